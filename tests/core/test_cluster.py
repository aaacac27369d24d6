"""The Ray engine's pieces on a private single-node Ray (``cluster.address`` empty): the sandbox
pool actors give the local pool's results in order, a dead actor's jobs come back, and the CLI's
``--cluster``/``--address`` become the config's ``cluster:``. The two-node cluster and the whole
generation are in tests/flows/test_cluster.py."""

from __future__ import annotations

import os
import signal

import pytest

from populora_core.config import load_config
from populora_core.sandbox import Job, SandboxPool


@pytest.fixture(scope="module")
def private_ray():
    import ray

    yield
    ray.shutdown()


def test_a_resumed_run_moves_to_the_cluster_and_back(tmp_path):
    from populora_core.config import ConfigError
    from populora_core.runs import create_run

    run = create_run(tmp_path, load_config(preset="cpu-tiny", overrides=["cluster.nodes=2"]), run_id="moves")
    before = run.config()
    run.set_cluster({"engine": "ray", "address": "auto"})
    assert (run.config().cluster.address, run.config().cluster.nodes) == ("auto", 2)  # merged, not replaced
    assert run.config().model_copy(update={"cluster": before.cluster}) == before  # nothing else changed
    vllm = create_run(tmp_path, load_config(preset="cpu-tiny", overrides=["inference.backend=vllm"]), run_id="v")
    written = vllm.config_file.read_bytes()
    with pytest.raises(ConfigError, match=r"cluster.engine: ray"):  # validated with the rest, nothing written
        vllm.set_cluster({"engine": "ray"})
    assert vllm.config_file.read_bytes() == written


def test_sandbox_actors_return_the_local_pools_results_in_order(private_ray):
    from populora_core.cluster import RaySandboxPool

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


def test_ray_with_vllm_is_refused_naming_both_fields():
    from populora_core.config import ConfigError

    with pytest.raises(ConfigError, match=r"cluster.engine: ray.*inference.backend: hf"):
        load_config(preset="cpu-tiny", overrides=["cluster.engine=ray", "inference.backend=vllm"])


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

    from populora_core.cluster import RaySandboxPool

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
