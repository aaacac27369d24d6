"""A generation's heavy work on a Ray cluster (``cluster.engine: ray``).

The driver (the Prefect flow's process) runs the stages in order, as with the local
engine, and the cheap ones itself. Inside the heavy stages the work goes to Ray's own
primitives, each a drop-in for the local object of ``runtime.Runtime``:

- ``RayBackend`` (propose, solve): one long-lived inference actor per node, each holding
  the base model and the population's adapters (a local ``Runtime``'s HF backend; vLLM
  actors are not built yet, and the config refuses them). The driver cuts the requests into the batches the local
  backend would run (``hf.plan_batches``) and spreads the batches over the actors
  (``ray.util.ActorPool``, results in order): a batch's samples depend only on the batch,
  so the artifacts equal the local run's.
- ``RaySandboxPool`` (validate, verify): one sandbox-pool actor per node (a local
  ``SandboxPool`` with ``sandbox.workers`` workers), jobs sharded across them in chunks,
  results in order.
- ``RayTrainer`` (update): one Ray task per adapter (``learn.train_one``), each in a Ray
  worker that keeps its trainer (the base model) between tasks.

Faults are Ray's to handle: an update task whose worker or node dies is re-run
(``max_retries``: it starts again from the same snapshot with the same seed, and writes
its adapter atomically), an actor whose process dies is restarted and its pending calls
retried (``max_restarts``, ``max_task_retries``); a restarted inference actor reloads the
adapters it is asked to serve. Actors are owned by the driver: they, and the sandbox
workers under them (bubblewrap ``--die-with-parent``, Docker containers removed on
close), end with it.

Every node must see the run directory and the base model at the same paths.
"""

from __future__ import annotations

import dataclasses
import math
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from populora_core.config import ClusterConfig, ConfigError, ResourceSpec, RunConfig
from populora_core.inference.base import Completion, GenerationRequest, SamplingParams

T = TypeVar("T")
R = TypeVar("R")

NAMESPACE = "populora"


def node_name() -> str:
    """Which node this code runs on: the Ray node id inside a Ray worker, else the host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.get_runtime_context().get_node_id()
    return socket.gethostname()


def connect(cluster: ClusterConfig) -> None:
    """Joins the cluster at ``cluster.address`` once per process; with no address, starts a
    private single-node Ray on this machine, dashboard off (Ray's own ports still listen on
    every interface: README, "On a Ray cluster", Security). Workers take
    their environment from the node (``ray start`` in the environment they need, e.g.
    ``HF_HUB_OFFLINE=1``), not from the driver."""
    import ray

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


def worker_nodes(cluster: ClusterConfig, spec: ResourceSpec | None = None) -> list[str]:
    """Ids of the alive nodes with CPUs (and the resources ``spec`` asks for), in a stable
    order, at most ``cluster.nodes``; raises naming what no node has."""
    import ray

    def fits(total: dict) -> bool:
        if spec is None:
            return True
        wanted = {"CPU": spec.num_cpus, "GPU": spec.num_gpus, **spec.resources}
        return all(total.get(name, 0) >= amount for name, amount in wanted.items() if amount > 0)

    alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    nodes = sorted(n["NodeID"] for n in alive if fits(n["Resources"]))
    if not nodes:
        have = [{k: v for k, v in n["Resources"].items() if not k.startswith("node:")} for n in alive]
        raise RuntimeError(f"no alive Ray node has what {spec} asks for (cluster.* resources); nodes have: {have}")
    return nodes[: cluster.nodes] if cluster.nodes else nodes


def _local(config: RunConfig) -> RunConfig:
    """The same settings on the local engine: what an actor or task runs inside its node."""
    return config.model_copy(update={"cluster": ClusterConfig()})


def _per_node(cls: type, spec: ResourceSpec, cluster: ClusterConfig, *args: Any) -> list:
    """One actor of ``cls`` per node, placed there (softly: a dead node's actor restarts elsewhere)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(cls)
    return [
        remote.options(
            **spec.ray_options(),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
            max_restarts=-1,  # the actors live as long as the run: a restart budget would run out
            max_task_retries=cluster.max_retries,
        ).remote(*args)
        for node in worker_nodes(cluster, spec)
    ]


def _ordered(actors: list, call: Callable[[Any, T], Any], chunks: Sequence[Sequence], desc: str | None) -> list:
    """``call(actor, chunk)`` for every chunk over the actors (``ActorPool``), results in order."""
    from ray.util import ActorPool

    results = []
    with tqdm(total=sum(map(len, chunks)), desc=desc, unit="sample", disable=desc is None, leave=False) as bar:
        for chunk, result in zip(chunks, ActorPool(actors).map(call, chunks), strict=True):
            results.append(result)
            bar.update(len(chunk))
    return results


# generation ----------------------------------------------------------------------
class _InferenceActor:
    """A node's generation backend: the local ``Runtime``'s, serving the adapters it is sent."""

    def __init__(self, config_json: str, model_path: str) -> None:
        from populora_core.runtime import get_runtime

        self.runtime = get_runtime(_local(RunConfig.model_validate_json(config_json)), Path(model_path))
        self.served: dict[str, str] = {}

    def generate_batch(self, shared: tuple, batch: list) -> list:
        """``shared``: (adapters id → directory, requests, prompt ids, sampling params), sent once per call of
        ``RayBackend.generate`` through the object store."""
        adapters, requests, prompts, params = shared
        if adapters != self.served:  # a new generation's adapters, or a restarted actor
            self.runtime.serve({k: Path(v) for k, v in adapters.items()})
            self.served = dict(adapters)
        return self.runtime.backend.generate_batch(batch, requests, prompts, params)


class RayBackend:
    """The generation backend of the Ray engine: batches spread over one actor per node."""

    def __init__(self, config: RunConfig, model_path: Path) -> None:
        from transformers import AutoTokenizer

        connect(config.cluster)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.batch_size = config.inference.batch_size
        self.adapters: dict[str, str] = {}
        self._actors = _per_node(
            _InferenceActor, config.cluster.generation, config.cluster, config.model_dump_json(), str(model_path)
        )

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
        prompts = [encode_prompt(self.tokenizer, r) for r in requests]
        batches = plan_batches(requests, prompts, self.batch_size)
        shared = ray.put((self.adapters, list(requests), prompts, params))
        call = lambda actor, batch: actor.generate_batch.remote(shared, batch)  # noqa: E731
        out = {}
        for batch, completions in zip(batches, _ordered(self._actors, call, batches, progress), strict=True):
            out.update(zip(batch, completions, strict=True))
        return gather(requests, out)

    def close(self) -> None:
        _kill(self._actors)
        self._actors = []


def _kill(actors: list) -> None:
    import ray

    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone with its node
            pass


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

    def start(self) -> None:
        import ray

        connect(self.config.cluster)
        self._actors = _per_node(
            _SandboxActor, self.config.cluster.sandbox, self.config.cluster, self.config.sandbox.model_dump_json()
        )
        ray.get([a.stats.remote() for a in self._actors])  # a node without a sandbox fails here, by name

    def run(self, jobs: Sequence) -> list:
        if not jobs:
            return []
        size = max(1, min(self.CHUNK, math.ceil(len(jobs) / (4 * len(self._actors)))))
        chunks = [list(jobs[i : i + size]) for i in range(0, len(jobs), size)]
        results = _ordered(self._actors, lambda a, c: a.run.remote(c), chunks, None)
        return [r for chunk in results for r in chunk]

    def close(self) -> None:
        import ray

        try:  # the pools' own close: workers stopped, containers removed
            ray.get([a.close.remote() for a in self._actors], timeout=60)
        except Exception:  # noqa: BLE001 - a dead actor's workers died with it
            pass
        _kill(self._actors)
        self._actors = []


# update --------------------------------------------------------------------------
def _train_task(config_json: str, model_path: str, fn: Callable, job: Any) -> Any:
    """A Ray task: ``fn(trainer, job)`` with this worker's trainer (built once per worker)."""
    from populora_core.runtime import get_runtime

    config = _local(RunConfig.model_validate_json(config_json))
    return fn(get_runtime(config, Path(model_path)).trainer, job)


class RayTrainer:
    """The trainer of the Ray engine: ``map`` runs each job as one Ray task."""

    def __init__(self, config: RunConfig, model_path: Path) -> None:
        import ray

        connect(config.cluster)
        self._args = (config.model_dump_json(), str(model_path))
        self._task = ray.remote(_train_task).options(
            **config.cluster.update.ray_options(), max_retries=config.cluster.max_retries
        )

    def map(self, fn: Callable[[Any, T], R], jobs: Sequence[T], *, desc: str | None = None) -> list[R]:
        import ray

        refs = [self._task.remote(*self._args, fn, job) for job in jobs]
        with tqdm(total=len(refs), desc=desc, unit="adapter", disable=desc is None, leave=False) as bar:
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                bar.update(len(done))
        return ray.get(refs)
