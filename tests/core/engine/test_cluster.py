"""The Ray engine's pieces on a private single-node Ray (``cluster.address`` empty): the sandbox
pool actors give the local pool's results in order, a dead actor's jobs come back, and the CLI's
``--cluster``/``--address`` become the config's ``cluster:``. The two-node cluster and the whole
generation are in tests/flows/test_cluster.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from populora_core.config import load_config
from populora_core.sandbox import Job, SandboxPool

pytestmark = pytest.mark.heavy  # a private Ray cluster, nodes killed: 5-30 s a test


@pytest.fixture(scope="module")
def private_ray():
    import ray

    from populora_core.engine.cluster import connect

    connect(load_config(preset="cpu-tiny", overrides=["cluster.engine=ray"]).cluster)
    yield
    ray.shutdown()


def _refuse() -> None:
    from populora_core.config import ConfigError

    raise ConfigError("refused")


def test_a_resumed_run_moves_to_the_cluster_and_back(tmp_path):
    from populora_core.config import ConfigError
    from populora_core.run import create_run

    run = create_run(tmp_path, load_config(preset="cpu-tiny", overrides=["cluster.nodes=2"]), run_id="moves")
    before = run.config()
    run.set_cluster({"engine": "ray", "address": "auto"})
    assert (run.config().cluster.address, run.config().cluster.nodes) == ("auto", 2)  # merged, not replaced
    assert run.config().model_copy(update={"cluster": before.cluster}) == before  # nothing else changed
    seen = []
    with pytest.raises(ConfigError, match="refused"):  # the check sees the new config; refused, nothing written
        run.set_cluster({"engine": "local"}, check=lambda config: seen.append(config) or _refuse())
    assert seen[0].cluster.engine == "local" and run.config().cluster.engine == "ray"
    sets = ["inference.backend=vllm", "inference.vllm_url=http://127.0.0.1:8000"]
    vllm = create_run(tmp_path, load_config(preset="cpu-tiny", overrides=sets), run_id="v")
    written = vllm.config_file.read_bytes()
    with pytest.raises(ConfigError, match=r"cluster.engine: ray"):  # validated with the rest, nothing written
        vllm.set_cluster({"engine": "ray"})
    assert vllm.config_file.read_bytes() == written


def test_sandbox_actors_return_the_local_pools_results_in_order(private_ray):
    from populora_core.engine.cluster import RaySandboxPool

    jobs = [Job(code=f"print({i})", expr=f"{i} * 2") for i in range(150)]
    jobs += [Job(code="raise ValueError('no')"), Job(code="while True: pass", timeout_s=0.5)]
    config = load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "sandbox.workers=1"])
    with SandboxPool(config.sandbox) as local:
        expected = local.run(jobs)
    pool = RaySandboxPool(config)
    pool.start()
    try:
        got = pool.run(jobs)
        assert [(r.status, r.value, r.stdout) for r in got] == [(r.status, r.value, r.stdout) for r in expected]
        assert got[-2].status == "error" and got[-1].status == "timeout"

        # the actor's process dies: Ray restarts it and the call is retried, nothing lost
        import ray

        pid = ray.get(pool._actors[0].__ray_call__.remote(lambda self: os.getpid()))
        os.kill(pid, signal.SIGKILL)
        again = pool.run(jobs[:150])
        assert [r.value for r in again] == [str(i * 2) for i in range(150)]
    finally:
        pool.close()


def test_ray_with_one_vllm_server_is_refused_naming_both_fields():
    from populora_core.config import ConfigError

    sets = ["cluster.engine=ray", "inference.backend=vllm"]
    assert load_config(preset="cpu-tiny", overrides=sets).inference.backend == "vllm"  # a server per node
    with pytest.raises(ConfigError, match=r"cluster.engine: ray.*inference.vllm_url"):
        load_config(preset="cpu-tiny", overrides=[*sets, "inference.vllm_url=http://127.0.0.1:8000"])


def test_the_ray_engine_asks_for_what_keeps_artifacts_equal():
    from populora_core.config import ConfigError

    with pytest.raises(ConfigError, match=r"model.threads > 0"):
        load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "model.threads=0"])
    with pytest.raises(ConfigError, match=r"cluster.generation.num_gpus"):
        load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "model.device=cuda"])
    load_config(
        preset="cpu-tiny",
        overrides=[
            "cluster.engine=ray",
            "model.device=cuda",
            "cluster.generation.num_gpus=0.5",
            "cluster.update.num_gpus=0.5",
        ],
    )


def test_an_actor_killed_during_a_call_finishes_it_after_its_restart(private_ray):
    import threading
    import time

    import ray

    from populora_core.engine.cluster import RaySandboxPool

    config = load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "sandbox.workers=1"])
    pool = RaySandboxPool(config)
    pool.start()
    try:
        pid = ray.get(pool._actors[0].__ray_call__.remote(lambda self: os.getpid()))
        jobs = [Job(code="import time\ntime.sleep(0.05)", expr=str(i)) for i in range(80)]  # ~4 s, one actor
        killer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        results = pool.run(jobs)
        assert time.monotonic() - started > 1.0  # the kill landed during the call
        assert [r.value for r in results] == [str(i) for i in range(80)]
        assert ray.get(pool._actors[0].__ray_call__.remote(lambda self: os.getpid())) != pid  # restarted
    finally:
        pool.close()


def test_update_tasks_run_in_the_workers_prestart_warmed(private_ray):
    """`prestart` starts one update worker per slot with its trainer built; the update tasks then
    run in those processes (no worker start-up, no model load inside `update`)."""
    import ray

    from populora_core.engine.cluster import RayTrainer
    from populora_core.models import resolve_model

    config = load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "model.threads=1"])
    trainer = RayTrainer(config, resolve_model(config.model.name))
    assert trainer.slots() == min(int(ray.cluster_resources()["CPU"]), 4)  # one CPU each, at most 2 + 2 adapters
    trainer.prestart()
    warmed = ray.get(trainer._warming)
    assert len({pid for _, pid in warmed}) == trainer.slots()
    ran = trainer.map(lambda t, job: (os.getpid(), type(t).__name__, job), list(range(6)))
    assert [job for _, _, job in ran] == list(range(6))
    assert {name for _, name, _ in ran} == {"Trainer"}
    assert {pid for pid, _, _ in ran} <= {pid for _, pid in warmed}

    from populora_core.config import ConfigError

    too_big = load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "model.threads=64"])
    with pytest.raises(ConfigError, match=r"cluster.update; num_cpus unset is model.threads"):
        RayTrainer(too_big, resolve_model(config.model.name)).slots()


def test_split_keeps_order_and_balances_samples():
    from populora_core.engine.actor_calls import split_weighted as _split

    assert _split(list(range(6)), 2, [1] * 6) == [[0, 1, 2], [3, 4, 5]]
    assert _split(list(range(4)), 2, [6, 1, 1, 1]) == [[0], [1, 2, 3]]
    assert _split([0], 3, [4]) == [[0]]
    pieces = _split(list(range(10)), 3, [2] * 10)
    assert [i for p in pieces for i in p] == list(range(10)) and len(pieces) == 3


@pytest.mark.slow  # make test-slow (~2 min): make test's CI stays under 40 minutes; there the paper run serves on vLLM
# and the other tests of this file run Ray's actors
@pytest.mark.vllm
def test_vllm_inference_actors_serve_the_adapters_and_stop_their_server(private_ray, tmp_path):
    """`inference.backend: vllm` on the Ray engine: each node's actor starts a vLLM server (the
    CPU build here) and gives HF+peft's greedy tokens for every adapter; a killed actor's server
    and the engine processes under it die with it (Ray kills a dead worker's process group)."""
    import time

    import ray

    from populora_core.config import RatingConfig
    from populora_core.engine.cluster import RayBackend
    from populora_core.inference.base import GenerationRequest, SamplingParams
    from populora_core.inference.hf import HFBackend
    from populora_core.inference.vllm import DEFAULT_VENV
    from populora_core.models import load_model, resolve_model
    from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter
    from tests.core.inference.test_vllm_parity import PROMPTS, assert_same_greedy

    if not (DEFAULT_VENV / "bin" / "python").exists():
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"CI needs the vLLM environment at {DEFAULT_VENV} (make vllm-env)")
        pytest.skip(f"no vLLM environment at {DEFAULT_VENV} (make vllm-env)")
    config = load_config(
        preset="cpu-tiny", overrides=["cluster.engine=ray", "inference.backend=vllm", "model.dtype=float32"]
    )
    path = resolve_model(config.model.name)
    model, tokenizer = load_model(path, dtype="float32")
    members, adapters = create_population(
        config.population.model_copy(update={"init_b_std": 0.02}),
        RatingConfig(),
        lora_shapes_from_model(model, config.population.target_modules),
        0,
    )
    ids = [m.adapter_id for m in members]
    for a in ids:
        save_adapter(adapters[a], tmp_path / a)
    hf = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=8)
    for a in ids:
        hf.load_adapter(a, tmp_path / a)
    requests = [GenerationRequest(p, adapter=a) for a in ids for p in PROMPTS]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    expected = [c[0].token_ids for c in hf.generate(requests, params)]

    backend = RayBackend(config, path)
    try:
        backend.serve({a: tmp_path / a for a in ids})
        got = backend.generate(requests, params)
        assert_same_greedy(hf, requests, [c[0].token_ids for c in got], expected)
        actor = backend._actors[0]
        pids = ray.get(actor.__ray_call__.remote(lambda self: (os.getpid(), self.runtime.backend.servers[0].proc.pid)))
        server = _tree(pids[1])
        assert len(server) >= 2 and _alive(server)  # the API server and its engine process
        os.kill(pids[0], signal.SIGKILL)  # the actor crashes (Ray restarts it: no server until it is called)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(server):
            time.sleep(0.5)
        assert not _alive(server)
    finally:
        backend.close()


def _tree(pid: int) -> set[int]:
    """``pid`` and every process under it."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += children.get(p, [])
    return tree


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (not zombies)."""
    left = set()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                left.add(pid)
        except OSError:
            pass
    return left


def _flaky_actor(marks: Path):
    """An actor class whose start takes 2 s (a model load) and whose `work` dies on demand: on a
    chunk ``("die-once", name)`` while ``marks/name`` exists (removing it), on ``"die"`` always;
    dying on a chunk named ``then-stay-down``, it makes every later start take 60 s (longer
    than the tests' ``restart_timeout_s``). Each call appends its node's id to ``marks/nodes``."""
    import time

    class Flaky:
        def __init__(self) -> None:
            time.sleep(60 if (marks / "stay-down").exists() else 2)

        def ready(self) -> bool:
            return True

        def work(self, chunk: tuple) -> tuple:
            import ray

            with (marks / "nodes").open("a") as f:  # where each call ran
                f.write(ray.get_runtime_context().get_node_id() + "\n")
            kind, name = chunk
            if kind == "die" or (kind == "die-once" and (marks / name).exists()):
                (marks / name).unlink(missing_ok=True)
                if name == "then-stay-down":
                    (marks / "stay-down").touch()
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(0.1)
            return chunk

    return Flaky


def _flaky_actors(marks: Path, n: int) -> list:
    import ray

    actors = [ray.remote(_flaky_actor(marks)).options(max_restarts=-1, max_task_retries=0).remote() for _ in range(n)]
    ray.get([a.ready.remote() for a in actors])
    return actors


def test_work_survives_actors_lost_during_a_slow_restart(private_ray, tmp_path):
    """A lost actor's piece is sent again once an actor is ready; a piece that kills whoever
    runs it, and losing every actor for good, end the stage with a clear error."""
    import ray

    from populora_core.engine.actor_calls import map_ordered

    cluster = load_config(overrides=["cluster.max_retries=1", "cluster.restart_timeout_s=8"]).cluster
    actors = _flaky_actors(tmp_path, 2)
    try:
        (tmp_path / "a").touch()
        (tmp_path / "b").touch()
        chunks = [("ok", str(i)) for i in range(10)]
        chunks[2], chunks[7] = ("die-once", "a"), ("die-once", "b")
        assert map_ordered(actors, lambda a, c: a.work.remote(c), chunks, None, cluster) == chunks
        assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # each killed its actor, once

        with pytest.raises(RuntimeError, match=r"lost its actor 2 times \(cluster.max_retries 1\)"):
            map_ordered(actors, lambda a, c: a.work.remote(c), [("ok", "0"), ("die", "x")], None, cluster)

        patient = cluster.model_copy(update={"max_retries": 5})  # the piece kills both, neither comes back
        with pytest.raises(RuntimeError, match=r"no actor left.*cluster.restart_timeout_s \(8 s\)"):
            map_ordered(actors, lambda a, c: a.work.remote(c), [("die", "then-stay-down")], None, patient)
    finally:
        for actor in actors:
            ray.kill(actor)


def test_an_actor_whose_constructor_raises_fails_the_work_at_once_with_its_error(private_ray):
    """Ray does not restart such an actor: no waiting out ``restart_timeout_s`` (900 s)."""
    import time

    import ray

    from populora_core.engine.actor_calls import map_ordered

    class NoModel:
        def __init__(self) -> None:
            raise ValueError("no model at /nowhere")

        def ready(self) -> bool:
            return True

    actor = ray.remote(NoModel).options(max_restarts=-1, max_task_retries=0).remote()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)no actor left.*constructor raised.*no model at /nowhere"):
        map_ordered([actor], lambda a, c: a.ready.remote(), [[1]], None, load_config().cluster)
    assert time.monotonic() - start < 60


def test_work_survives_the_loss_of_a_whole_node(private_ray, tmp_path):
    """An actor's node is removed (raylet and all) during a call: Ray restarts the actor on the
    other node and the call is sent again there. With Ray's own retries instead (ActorPool,
    ``max_task_retries=3``) this raised ``ActorUnavailableError``."""
    import threading

    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from populora_core.engine.actor_calls import map_ordered

    ray.shutdown()  # this test's own two-node cluster; a later test's `connect` starts a private Ray
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        node = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        there = NodeAffinitySchedulingStrategy(node.node_id, soft=True)
        actor = ray.remote(_flaky_actor(tmp_path)).options(
            max_restarts=-1, max_task_retries=0, scheduling_strategy=there
        )
        actor = actor.remote()
        where = lambda: ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))  # noqa: E731
        assert where() == node.node_id
        chunks = [("ok", str(i)) for i in range(30)]  # ~3 s of work
        threading.Timer(1.0, cluster.remove_node, (node,), {"allow_graceful": False}).start()
        assert map_ordered([actor], lambda a, c: a.work.remote(c), chunks, None, load_config().cluster) == chunks
        assert where() == cluster.head_node.node_id
        ran_on = (tmp_path / "nodes").read_text().split()
        assert ran_on[0] == node.node_id and ran_on[-1] == cluster.head_node.node_id  # lost mid-way, finished there
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_runtimes_close_their_actors_before_ray_shuts_down_at_exit(tmp_path):
    """The process's runtimes are closed at exit while Ray is still connected: after Ray's own
    exit hook an actor call re-initialises Ray (and a driver crashed with SIGSEGV at exit)."""
    import subprocess
    import sys

    script = f"""
import sys
from pathlib import Path
from populora_core.engine import runtime
from populora_core.engine.cluster import connect
from populora_core.config import load_config

class Probe:
    def close(self):
        import ray
        Path({str(tmp_path / "closed")!r}).write_text(str(ray.is_initialized()))

runtime._RUNTIMES["probe"] = Probe()
assert "ray" not in sys.modules  # Ray's exit hook is registered by `connect`'s import, after runtime's
connect(load_config(preset="cpu-tiny", overrides=["cluster.engine=ray"]).cluster)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "closed").read_text() == "True"
