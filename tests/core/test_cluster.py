"""The Ray engine's pieces on a private single-node Ray (``cluster.address`` empty): the sandbox
pool actors give the local pool's results in order, a dead actor's jobs come back, and the CLI's
``--cluster``/``--address`` become the config's ``cluster:``. The two-node cluster and the whole
generation are in tests/flows/test_cluster.py."""

from __future__ import annotations

import os
import signal

import pytest

from flows.cli import build_parser
from flows.commands import _cluster_overrides
from populora_core.config import load_config
from populora_core.sandbox import Job, SandboxPool


@pytest.fixture(scope="module")
def private_ray():
    import ray

    yield
    ray.shutdown()


def test_cli_cluster_flags_become_the_config():
    parse = build_parser().parse_args
    cases = {
        ("train",): ("local", ""),
        ("train", "--address", "10.0.0.5:6379"): ("ray", "10.0.0.5:6379"),  # a string, not YAML's sexagesimal
        ("train", "--cluster", "ray"): ("ray", ""),
        ("train", "--cluster", "ray", "--address", "ray://head:10001"): ("ray", "ray://head:10001"),
    }
    for argv, (engine, address) in cases.items():
        cluster = load_config(preset="cpu-tiny", overrides=_cluster_overrides(parse(list(argv)))).cluster
        assert (cluster.engine, cluster.address) == (engine, address), argv
    back = _cluster_overrides(parse(["resume", "r", "--cluster", "local"]))
    assert load_config(overrides=["cluster.address='auto'", *back]).cluster.address == ""


def test_a_resumed_run_moves_to_the_cluster_and_back(tmp_path):
    from populora_core.config import ClusterConfig
    from populora_core.runs import create_run

    run = create_run(tmp_path, load_config(preset="cpu-tiny"), run_id="moves")
    before = run.config()
    run.set_cluster(ClusterConfig(engine="ray", address="auto"))
    assert run.config().cluster.address == "auto"
    assert run.config().model_copy(update={"cluster": ClusterConfig()}) == before  # nothing else changed


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
