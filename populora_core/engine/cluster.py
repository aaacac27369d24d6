"""A generation's heavy work on a Ray cluster (``cluster.engine: ray``): drop-ins for the
local ``Runtime``'s objects. ``RayBackend`` (propose, solve): one inference actor per node;
``RaySandboxPool`` (validate, verify): one sandbox-pool actor per node; ``RayTrainer``
(update): one Ray task per adapter; ``RayRuntime`` hands them to the stages. A dead actor
is restarted and only its lost work is sent again (``actor_calls.map_ordered``); a lost
update task is re-run from the same snapshot and seed. Every node must see the run
directory and the base model at the same paths (docs/cluster.md).
"""

from __future__ import annotations

import atexit
import dataclasses
import math
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from populora_core.config import ClusterConfig, ConfigError, ResourceSpec, RunConfig
from populora_core.engine.actor_calls import close_actors, lost_errors, map_ordered, split_weighted
from populora_core.engine.runtime import Runtime, close_runtimes, get_runtime
from populora_core.inference.base import Completion, GenerationRequest, SamplingParams

T = TypeVar("T")
R = TypeVar("R")

NAMESPACE = "populora"


def node_name() -> str:
    """Which node this code runs on: the Ray node id inside a Ray worker, else the host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return "/".join(filter(None, (socket.gethostname(), os.environ.get("POPULORA_TRAINER_SLOT"))))  # engine.trainers


_exit_hook = False


def connect(cluster: ClusterConfig) -> None:
    """Joins the cluster at ``cluster.address`` once per process; with no address, starts a
    private single-node Ray on this machine, dashboard off (Ray's own ports still listen on
    every interface: README, "On a Ray cluster", Security). Workers take
    their environment from the node (``ray start`` in the environment they need, e.g.
    ``HF_HUB_OFFLINE=1``), not from the driver."""
    import ray

    global _exit_hook
    if not _exit_hook:  # registered after `import ray` registered Ray's: runs before it
        atexit.register(_close_runtimes)
        _exit_hook = True
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"namespace": NAMESPACE, "log_to_driver": False, "configure_logging": False}
    if cluster.address:
        try:
            ray.init(address=cluster.address, **kwargs)
        except ConnectionError as exc:
            raise ConfigError(
                f"cannot join the Ray cluster at cluster.address {cluster.address!r} ({exc}); start one with "
                "`ray start --head`, or leave the address empty for a private Ray on this machine"
            ) from None
    else:
        # "local": a new Ray even when another runs on this machine (address=None would join the
        # one `ray start` or an earlier private cluster recorded in /tmp/ray/ray_current_cluster)
        ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", **kwargs)


def _close_runtimes() -> None:
    """The process's runtimes (their actors) closed while Ray is still up: registered after
    Ray's own exit hook, it runs before it. ``runtime``'s hook, registered at import, runs
    after Ray's shutdown, where an actor call re-initialised Ray (seen: the driver then
    crashed with SIGSEGV at exit, after a run whose node was lost, 2 of 6 times)."""
    close_runtimes()


def worker_nodes(cluster: ClusterConfig, spec: ResourceSpec | None = None, key: str = "") -> list[str]:
    """Ids of the alive nodes with CPUs (and the resources ``spec``, ``cluster.<key>``, asks
    for), in a stable order, at most ``cluster.nodes``; raises naming what no node has."""
    import ray

    def fits(total: dict) -> bool:
        return spec is None or all(total.get(name, 0) >= amount for name, amount in _wanted(spec).items())

    alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    nodes = sorted(n["NodeID"] for n in alive if fits(n["Resources"]))
    if not nodes:
        have = [{k: v for k, v in n["Resources"].items() if not k.startswith("node:")} for n in alive]
        where = f"cluster.{key}" if key else "cluster.* resources"
        if key and getattr(cluster, key).num_cpus is None:
            where += f"; num_cpus unset is model.threads: set cluster.{key}.num_cpus to hold fewer"
        raise ConfigError(f"no alive Ray node has what {spec} asks for ({where}); nodes have: {have}")
    return nodes[: cluster.nodes] if cluster.nodes else nodes


def _wanted(spec: ResourceSpec) -> dict[str, float]:
    """The resources ``spec`` holds, by Ray's names, leaving out those it asks none of."""
    wanted = {"CPU": spec.num_cpus, "GPU": spec.num_gpus, **spec.resources}
    return {name: amount for name, amount in wanted.items() if amount > 0}


def _local(config: RunConfig) -> RunConfig:
    """The same settings on the local engine: what an actor or task runs inside its node (the
    generation and update resources kept: an inference actor plans its GPUs' share from them)."""
    cluster = ClusterConfig(generation=config.cluster.generation, update=config.cluster.update)
    return config.model_copy(update={"cluster": cluster})


def _per_node(cls: type, config: RunConfig, key: str, *args: Any) -> list:
    """One actor of ``cls`` per node that has what ``cluster.<key>`` asks for, placed there
    (softly: a dead node's actor restarts elsewhere)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    spec, cluster = config.resources(key), config.cluster
    remote = ray.remote(cls)
    return [
        remote.options(
            **spec.ray_options(),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
            max_restarts=-1,  # the actors live as long as the run: a restart budget would run out
            max_task_retries=0,  # a lost call is sent again by `map_ordered`, to an actor that is back
        ).remote(*args)
        for node in worker_nodes(cluster, spec, key)
    ]


# generation ----------------------------------------------------------------------
class _InferenceActor:
    """A node's generation backend: the local ``Runtime``'s, serving the adapters it is sent."""

    def __init__(self, config_json: str, model_path: str) -> None:
        self.runtime = get_runtime(_local(RunConfig.model_validate_json(config_json)), Path(model_path))
        self.served: dict[str, str] = {}

    def ready(self) -> bool:
        """Answers once the actor is constructed (``map_ordered``'s probe before work)."""
        return True

    def _serve(self, adapters: dict[str, str]) -> None:
        if adapters != self.served:  # a new generation's adapters, or a restarted actor
            self.runtime.serve({k: Path(v) for k, v in adapters.items()})
            self.served = dict(adapters)

    def generate_batch(self, shared: tuple, batch: list) -> list:
        """hf: one batch of ``hf.plan_batches``. ``shared``: (adapters id → directory, requests,
        prompt ids, sampling params), sent once per call of ``RayBackend.generate`` through the
        object store."""
        adapters, requests, prompts, params = shared
        self._serve(adapters)
        return self.runtime.backend.generate_batch(batch, requests, prompts, params)

    def close(self) -> None:
        self.runtime.close()

    def generate_requests(self, shared: tuple, indices: list[int]) -> list:
        """vllm: whole requests (indices into ``shared``'s), sent to this node's vLLM server at once."""
        adapters, requests, _, params = shared
        self._serve(adapters)
        return self.runtime.backend.generate([requests[i] for i in indices], params)


class RayBackend:
    """The generation backend of the Ray engine: batches spread over one actor per node."""

    def __init__(self, config: RunConfig, model_path: Path) -> None:
        from transformers import AutoTokenizer

        connect(config.cluster)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.batch_size = config.inference.batch_size
        self.vllm = config.inference.backend == "vllm"
        self.cluster = config.cluster
        self.adapters: dict[str, str] = {}
        self._actors = _per_node(_InferenceActor, config, "generation", config.model_dump_json(), str(model_path))

    def serve(self, adapters: dict[str, Path]) -> None:
        """The adapters (id → PEFT directory on the shared filesystem) every batch is served with."""
        self.adapters = {k: str(v) for k, v in sorted(adapters.items())}

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: str | None = None
    ) -> list[list[Completion]]:
        import ray

        from populora_core.inference.base import check_loaded, encode_prompt
        from populora_core.inference.hf import gather, plan_batches

        check_loaded(requests, self.adapters)
        if not requests:
            return []
        if self.vllm:  # vLLM batches continuously: one share of the requests per node, sent at once
            shared = ray.put((self.adapters, list(requests), None, params))
            shares = split_weighted(list(range(len(requests))), len(self._actors), [r.n for r in requests])
            call = lambda actor, share: actor.generate_requests.remote(shared, share)  # noqa: E731
            return [c for result in map_ordered(self._actors, call, shares, progress, self.cluster) for c in result]
        prompts = [encode_prompt(self.tokenizer, r) for r in requests]
        batches = plan_batches(requests, prompts, self.batch_size)
        shared = ray.put((self.adapters, list(requests), prompts, params))
        call = lambda actor, batch: actor.generate_batch.remote(shared, batch)  # noqa: E731
        out = {}
        for batch, completions in zip(
            batches, map_ordered(self._actors, call, batches, progress, self.cluster), strict=True
        ):
            out.update(zip(batch, completions, strict=True))
        return gather(requests, out)

    def close(self) -> None:
        close_actors(self._actors)  # a vLLM server stopped
        self._actors = []


# sandbox -------------------------------------------------------------------------
class _SandboxActor:
    """A node's sandbox pool."""

    def __init__(self, sandbox_json: str) -> None:
        from populora_core.config import SandboxConfig
        from populora_core.sandbox import SandboxPool

        self.pool = SandboxPool(SandboxConfig.model_validate_json(sandbox_json))
        self.pool.start()

    def run(self, jobs: list) -> list:
        return self.pool.run(jobs)

    def ready(self) -> bool:
        return True

    def stats(self) -> dict:
        return dataclasses.asdict(self.pool.stats)

    def close(self) -> None:
        self.pool.close()


class RaySandboxPool:
    """``SandboxPool`` of the Ray engine: jobs sharded over one sandbox-pool actor per node."""

    CHUNK = 64
    """Jobs per actor call at most (smaller for small batches, so every node gets some)."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self._actors: list = []
        self._started: list = []

    def start(self) -> None:

        connect(self.config.cluster)
        self._actors = _per_node(_SandboxActor, self.config, "sandbox", self.config.sandbox.model_dump_json())
        self._started = [a.stats.remote() for a in self._actors]  # awaited by the first `run`

    def run(self, jobs: Sequence) -> list:
        import ray

        if self._started:  # a node without a sandbox fails here, by name
            try:
                ray.get(self._started)
            except lost_errors() as exc:  # lost as it started: `map_ordered` waits for it
                if getattr(exc, "actor_init_failed", False):
                    raise
            self._started = []
        if not jobs:
            return []
        chunks = self.chunks(jobs, len(self._actors))
        results = map_ordered(self._actors, lambda a, c: a.run.remote(c), chunks, None, self.config.cluster)
        return [r for chunk in results for r in chunk]

    @classmethod
    def chunks(cls, jobs: Sequence, actors: int) -> list[list]:
        """``jobs`` cut into the pieces ``run`` sends, one actor call each: at most ``CHUNK``
        jobs, and about four pieces per actor for smaller batches."""
        size = max(1, min(cls.CHUNK, math.ceil(len(jobs) / (4 * max(1, actors)))))
        return [list(jobs[i : i + size]) for i in range(0, len(jobs), size)]

    def close(self) -> None:
        close_actors(self._actors)  # workers stopped, containers removed
        self._actors = []


# update --------------------------------------------------------------------------
def _train_task(config_json: str, model_path: str, fn: Callable | None, job: Any) -> Any:
    """A Ray task: ``fn(trainer, job)`` with this worker's trainer (built once per worker);
    with no ``fn``, builds the trainer only and returns (node, process id) (``RayTrainer.prestart``)."""
    import ray

    config = _local(RunConfig.model_validate_json(config_json))
    runtime = get_runtime(config, Path(model_path))
    gpus = [str(g) for g in ray.get_gpu_ids()]
    if runtime._trainer is None:  # the first task of this worker: will the trainers Ray puts on this GPU fit?
        from populora_core.engine.placement import check_ray_update

        check_ray_update(config, Path(model_path))
        _TRAINER_GPUS[:] = gpus
    check_same_gpus(_TRAINER_GPUS, gpus)
    trainer = runtime.trainer
    return fn(trainer, job) if fn is not None else (node_name(), os.getpid())


_TRAINER_GPUS: list[str] = []
"""The GPUs Ray gave this worker's first update task: where its cached trainer lives."""


def check_same_gpus(first: list[str], now: list[str]) -> None:
    """A worker's trainer stays on the GPUs of its first task (CUDA fixes a process's devices at
    its first use, whatever ``CUDA_VISIBLE_DEVICES`` Ray sets later): a task given other GPUs
    would train on GPUs Ray counts as another task's. ``update_task_options`` keeps GPU workers
    to one task each, so this is a guard, not a path."""
    if first != now:
        raise RuntimeError(
            f"this Ray worker's trainer is on GPU(s) {first or 'none'} but Ray gave this update GPU(s) "
            f"{now or 'none'}: a worker reused for GPU tasks must not keep its trainer (max_calls=1)"
        )


def update_task_options(config: RunConfig) -> dict:
    """``ray.remote`` options of the update task. On GPUs a worker runs one task (``max_calls``
    1, Ray's own default for a function decorated with GPUs, which ``.options()`` does not
    apply): its trainer cannot follow Ray to another GPU; each update then loads the base
    anew. On CPUs workers are reused and keep their trainer warm (``RayTrainer.prestart``)."""
    spec = config.resources("update")
    options = {**spec.ray_options(), "max_retries": config.cluster.max_retries}
    return options | ({"max_calls": 1} if spec.num_gpus else {})


class RayTrainer:
    """The trainer of the Ray engine: ``map`` runs each job as one Ray task."""

    def __init__(self, config: RunConfig, model_path: Path) -> None:
        import ray

        connect(config.cluster)
        self.config = config
        self._args = (config.model_dump_json(), str(model_path))
        self._task = ray.remote(**update_task_options(config))(_train_task)
        self._warming: list = []

    def slots(self) -> int:
        """How many update tasks the cluster runs at once (at most one per adapter)."""
        import ray

        spec = self.config.resources("update")
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n.get("Alive")}
        fit = 0
        for node in worker_nodes(self.config.cluster, spec, "update"):
            fit += min((int(nodes[node].get(k, 0) // v) for k, v in _wanted(spec).items()), default=1)
        population = self.config.population
        return max(1, min(fit, population.teachers + population.students))

    def prestart(self) -> None:
        """Starts as many update workers as can run at once, each loading its trainer (base model,
        optimizer settings), without waiting: the update tasks then find them warm, having
        paid the workers' start-up during the stages before `update`. Not on GPUs, where a
        worker runs one task (``update_task_options``)."""
        if self.config.resources("update").num_gpus:
            return
        self._warming = [self._task.remote(*self._args, None, None) for _ in range(self.slots())]

    def map(self, fn: Callable[[Any, T], R], jobs: Sequence[T], *, desc: str | None = None) -> list[R]:
        import ray

        refs = [self._task.remote(*self._args, fn, job) for job in jobs]
        with tqdm(total=len(refs), desc=desc, unit="adapter", disable=desc is None, leave=False) as bar:
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                bar.update(len(done))
        return ray.get(refs)


class RayRuntime(Runtime):
    """The runtime of ``cluster.engine: ray``: its backend, sandbox pool and trainer are the
    cluster's (``RayBackend``, ``RaySandboxPool``, ``RayTrainer``)."""

    def _start(self, need: str) -> None:
        """The first heavy stage starts all three at once (inference actors, sandbox actors,
        update workers loading their trainer): their start-ups overlap each other and the
        stages before they are needed, instead of each delaying its stage. A process whose
        first heavy stage is `update` (a resume or replay from it) starts the update workers
        only."""
        if need != "trainer" and self._backend is None:
            self._backend = RayBackend(self.config, self.model_path)
        if need != "trainer" and self._pool is None:
            self._pool = RaySandboxPool(self.config)
            self._pool.start()
        if self._trainer is None:
            self._trainer = RayTrainer(self.config, self.model_path)
            if need != "trainer":
                self._trainer.prestart()

    def serve(self, adapters: dict[str, Path]) -> None:
        """Each inference actor loads what changed (``RayBackend.serve``)."""
        self.backend.serve(adapters)
