"""Generations on a real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``,
one CPU per node), driven by the real CLI and a real Prefect server: the artifacts and
adapters equal the local engine's, both nodes work, a worker killed during update, a sandbox
actor killed or a whole node lost with a batch in flight, costs only its own work, and
nothing is left running."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from tests.faults.inject import worker_fault_env
from tests.flows.conftest import populora, prefect_runs, still_running

TIMING = ["run_id", "seconds", "node"]
"""Columns that differ between any two runs (ids, wall-clock) or name where the work ran."""


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("worker-faults")


@contextlib.contextmanager
def _node_env(faults: Path):
    """The environment Ray nodes started inside take (and pass to their workers)."""
    saved = dict(os.environ)
    os.environ.update(worker_fault_env(faults), HF_HUB_OFFLINE="1")
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


SANDBOX_NODE = {"sandbox_node": 1}
"""A resource of the worker nodes only: ``cluster.sandbox.resources`` naming it keeps the
sandbox actors off the head, whose loss would end the cluster."""


@pytest.fixture(scope="module")
def ray_cluster(faults):
    """Two Ray nodes (head + one), one CPU each; their workers take the faults armed in ``faults``."""
    from ray.cluster_utils import Cluster

    with _node_env(faults):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1, resources=SANDBOX_NODE)
        cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


@contextlib.contextmanager
def _a_node_lost_during_a_batch(cluster, faults: Path, trigger: Path):
    """One more worker node, and whichever worker node's sandbox actor gets a batch once
    ``trigger`` exists is removed whole (raylet, workers and all: a machine lost) with that
    batch in flight. Yields a list that gets the removed node's id."""
    with _node_env(faults):
        added = cluster.add_node(num_cpus=1, resources=SANDBOX_NODE)
        cluster.wait_for_nodes()
    (faults / "node").write_text(str(trigger))
    removed: list[str] = []
    done = threading.Event()

    def remove_when_fired() -> None:
        fired = faults / "node.fired.id"
        while not done.is_set():
            if fired.exists():
                node = next(n for n in cluster.worker_nodes if n.node_id == fired.read_text())
                cluster.remove_node(node, allow_graceful=False)
                removed.append(node.node_id)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=remove_when_fired, daemon=True)
    killer.start()
    try:
        yield removed
    finally:
        done.set()
        killer.join(timeout=60)
        if not removed:  # the module's cluster back to two nodes, whatever happened
            cluster.remove_node(added, allow_graceful=False)


def on_cluster(cluster) -> list[str]:
    """The CLI flags of a run on ``cluster``: its 1-CPU nodes hold one update task each, which
    keeps cpu-tiny's two torch threads (the local run's, so the artifacts stay equal)."""
    return ["--address", cluster.address, "--set", "cluster.update.num_cpus=1"]


def _ours() -> list[str]:
    """Our Ray actors still alive, and orphaned sandbox processes (bubblewrap or its worker,
    reparented to init: whoever started them is gone)."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True).stdout
    left = []
    for line in out.splitlines()[1:]:
        _, ppid, args = line.split(None, 2)
        if (
            "ray::_InferenceActor" in args
            or "ray::_SandboxActor" in args
            or (ppid == "1" and ("bwrap" in args or "sandbox" in args))
        ):
            left.append(line)
    return left


def _assert_same_generation(run, reference) -> None:
    """Every artifact of generation 0 and every adapter written by it equal the reference's."""
    from populora_core.rundir.artifacts import read_artifact

    names = sorted(p.stem for p in reference.gen(0).glob("*.parquet"))
    assert len(names) >= 12, names
    for name in names:
        ours, theirs = read_artifact(run.gen(0), name), read_artifact(reference.gen(0), name)
        keep = [c for c in theirs.columns if c not in TIMING]
        pd.testing.assert_frame_equal(ours[keep], theirs[keep], obj=name)
    adapters = [*reference.updated(0).rglob("*.safetensors"), *reference.members_dir(1).rglob("*.safetensors")]
    # 4 trained, 4 members of generation 1 (2 carried over, 2 children), and each role's best in the hall of fame
    assert len(adapters) == 4 + 4 + 2, adapters
    for path in adapters:
        assert (run.root / path.relative_to(reference.root)).read_bytes() == path.read_bytes(), path


def _wait_until_gone(deadline_s: float = 30) -> list[str]:
    end = time.monotonic() + deadline_s
    while (left := _ours()) and time.monotonic() < end:
        time.sleep(0.5)
    return left


@pytest.mark.slow  # make test-slow (~2 min): make test's CI stays under 40 minutes; there tests/core/engine/
# test_cluster.py moves a resumed run to a Ray cluster and back, and the paper run's Ray twin is slow too
def test_a_generation_on_two_nodes_equals_the_local_run(ray_cluster, reference_run, prefect_server, tmp_path):
    from populora_core.run import RunDir

    args = ["train", "--preset", "cpu-tiny", "--generations", "1", "--run-id", "on-ray"]
    result = populora([*args, "--runs-dir", str(tmp_path), *on_cluster(ray_cluster)], prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    run = RunDir(tmp_path / "on-ray")
    assert run.config().cluster.engine == "ray"
    _assert_same_generation(run, reference_run)

    metrics = run.read(0, "train_metrics")
    trained = metrics.loc[metrics["updated"], "node"]
    assert len(trained) >= 2 and trained.nunique() == 2, metrics[["adapter_id", "updated", "node"]]
    assert set(metrics.loc[~metrics["updated"], "node"]) <= {""}  # linked, trained nowhere

    flows, tasks, names = prefect_runs(prefect_server, "on-ray")
    assert names == {"on-ray": "populora-train", "on-ray/gen_0000": "populora-generation"}
    stages = {t.name.split("-gen")[0] for t in tasks if t.name.endswith("-gen0")}
    assert {"pair", "propose", "validate", "solve", "verify", "reward", "update", "rate", "evolve", "measure"} <= stages
    assert not still_running(flows, tasks)
    assert not _wait_until_gone(), _ours()


def _fresh_logs(faults: Path) -> None:
    """The attempt logs emptied, so that they hold this test's attempts only."""
    for log in ("saves.log", "batches.log"):
        (faults / log).unlink(missing_ok=True)


@pytest.mark.slow  # make test-slow (~2 min): make test's CI stays under 40 minutes; there
# tests/core/engine/test_cluster.py kills actors mid-call and a whole node, and the work survives
def test_a_worker_killed_during_update_costs_only_its_adapter(
    ray_cluster, faults, reference_run, prefect_server, tmp_path
):
    from populora_core.run import RunDir

    _fresh_logs(faults)
    (faults / "update").write_text("")
    train = ["train", "--preset", "cpu-tiny", "--generations", "1", "--runs-dir", str(tmp_path)]
    result = populora([*train, "--run-id", "killed", *on_cluster(ray_cluster)], prefect_server)
    assert result.returncode == 0, result.stdout[-4000:]
    assert (faults / "update.fired").exists()  # renamed by the worker that then killed itself
    out = RunDir(tmp_path / "killed")
    _assert_same_generation(out, reference_run)
    # only the lost work ran again: one adapter's update, not the stage
    saves = Counter((faults / "saves.log").read_text().split())
    trained = out.read(0, "train_metrics").query("updated")["adapter_id"]
    assert set(saves) == set(trained) and sorted(saves.values()) == [1] * (len(saves) - 1) + [2], saves
    assert not [p for p in out.root.rglob("*") if ".tmp-" in p.name], "a killed attempt's temp files are left"
    assert not _wait_until_gone(), _ours()


def test_sandbox_batches_lost_to_a_killed_actor_and_a_lost_node_run_again_once_each(ray_cluster, faults, tmp_path):
    """Sandbox work this test makes itself (not what the model happens to sample, which
    differs between CPUs): one actor killed on a batch, then a whole node lost with another
    batch in flight; the results are the local pool's, and exactly those two batches ran again."""
    import ray

    from populora_core.config import load_config
    from populora_core.engine.cluster import RaySandboxPool
    from populora_core.sandbox import Job, SandboxPool

    sandboxes = "cluster.sandbox.resources={sandbox_node: 0.5}"  # on the worker nodes, not the head
    config = load_config(
        preset="cpu-tiny", overrides=["cluster.engine=ray", f"cluster.address='{ray_cluster.address}'", sandboxes]
    )
    jobs = [Job(code="x = 3", expr=f"{i} * x") for i in range(64)]  # distinct, so each batch has its digest
    with SandboxPool(config.sandbox) as local:
        expected = [(r.status, r.value, r.stdout, r.error) for r in local.run(jobs)]
    _fresh_logs(faults)
    trigger = tmp_path / "go"
    trigger.write_text("")
    (faults / "verify").write_text(str(trigger))
    pool = RaySandboxPool(config)
    try:
        with _a_node_lost_during_a_batch(ray_cluster, faults, trigger) as removed:
            pool.start()
            got = [(r.status, r.value, r.stdout, r.error) for r in pool.run(jobs)]
        pool.close()
    finally:
        ray.shutdown()
    assert (faults / "verify.fired").exists() and removed, removed
    assert got == expected
    chunks = RaySandboxPool.chunks(jobs, 2)  # one actor per worker node
    batches = Counter(line.split()[0] for line in (faults / "batches.log").read_text().splitlines())
    assert len(batches) == len(chunks), batches
    assert sum(batches.values()) == len(chunks) + 2, batches  # the two lost batches, once more each
    assert not _wait_until_gone(), _ours()


def test_cli_cluster_flags_become_the_config():
    from cli.main import build_parser
    from cli.run import cluster_settings
    from populora_core.config import ConfigError, load_config

    parse = build_parser().parse_args
    cases = {
        ("train",): ("local", ""),
        ("train", "--address", "10.0.0.5:6379"): ("ray", "10.0.0.5:6379"),  # a string, not YAML's sexagesimal
        ("train", "--cluster", "ray"): ("ray", ""),
        ("train", "--cluster", "ray", "--address", "ray://head:10001"): ("ray", "ray://head:10001"),
    }
    for argv, (engine, address) in cases.items():
        cluster = load_config(preset="cpu-tiny", cluster=cluster_settings(parse(list(argv)))).cluster
        assert (cluster.engine, cluster.address) == (engine, address), argv
    back = cluster_settings(parse(["resume", "r", "--cluster", "local"]))
    assert load_config(overrides=["cluster.address='auto'"], cluster=back).cluster.address == ""
    kept = cluster_settings(parse(["resume", "r", "--cluster", "ray"]))  # the run's address stays
    assert load_config(preset="cpu-tiny", overrides=["cluster.address='auto'"], cluster=kept).cluster.address == "auto"
    with pytest.raises(ConfigError, match="contradicts"):
        cluster_settings(parse(["train", "--cluster", "local", "--address", "auto"]))
