"""What the CLI and the Prefect UI say after a crash: one process per run, killed runs shown
Crashed, damaged artifacts named and recomputed. Real CLI processes, a real Prefect server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from populora_core.run import RunDir
from populora_core.rundir.artifacts import artifact_path
from tests.flows.conftest import populora, prefect_runs, start_populora, still_running


def _wide(env: dict[str, str]) -> dict[str, str]:
    return dict(env, COLUMNS="400")  # rich wraps long paths at 80 columns otherwise


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _wait_for_holder(run: RunDir, proc: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = run.holder() if run.exists() else None
        if holder is not None:
            return holder
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.2)
    raise AssertionError("the first run never took its lock")


def _crashed_by_the_server(env: dict[str, str], run_id: str, names: set[str], timeout: float) -> dict[str, str]:
    """Polls the API until the flow runs ``names`` of ``run_id`` are Crashed; their messages."""
    deadline = time.monotonic() + timeout
    while True:
        flows, _, _ = prefect_runs(env, run_id)
        crashed = {f.name: f.state.message for f in flows if f.name in names and f.state.type.value == "CRASHED"}
        if set(crashed) == names or time.monotonic() > deadline:
            return crashed
        time.sleep(2)


@pytest.mark.slow  # make test-slow (~2 min): make test's CI stays under 40 minutes; there tests/core/rundir checks the
# lock (held, re-entrant, taken over from a dead holder) without a run
def test_a_second_resume_fails_at_once_naming_the_holder_and_a_killed_holder_shows_crashed_and_is_taken_over(
    prefect_server, tiny_model, tmp_path
):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows import automations

    prefect_server = _wide(prefect_server)
    runs = tmp_path / "runs"
    run = RunDir(runs / "busy")
    args = ["train", "--preset", "cpu-tiny", "--generations", "1", "--run-id", "busy", "--runs-dir", str(runs)]
    # `make server` registers 90 s; shorter here (a live run's beat may come 20 s late), the same automation
    within = automations.HEARTBEAT_S + 20
    with temporary_settings({PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        automations.register(within_s=within)
    try:
        first = start_populora(args, prefect_server)
        try:
            holder = _wait_for_holder(run, first)
            assert _parent(holder.pid) == first.pid  # the training process that `populora train` watches
            assert holder.command.startswith("populora train --preset cpu-tiny"), holder.command
            second = populora(["resume", str(run.root)], prefect_server, timeout=120)
            assert second.returncode == 2, second.stdout[-3000:]
            assert f"in use by pid {holder.pid}" in second.stdout and "Traceback" not in second.stdout
            listing = populora(["runs", "--runs-dir", str(runs)], prefect_server)
            assert f"running: pid {holder.pid}" in " ".join(listing.stdout.split()), listing.stdout
            time.sleep(8)  # let it get into the generation flow before it dies
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        # nobody resumes: the server's automation shows both flow runs Crashed once their
        # heartbeats stop (the last one came at most one interval before the kill)
        names = {"busy", "busy/gen_0000"}
        crashed = _crashed_by_the_server(prefect_server, "busy", names, timeout=within + automations.HEARTBEAT_S + 60)
        assert set(crashed) == names, (crashed, prefect_runs(prefect_server, "busy")[0])
        assert all("No heartbeat" in message for message in crashed.values()), crashed
    finally:
        with temporary_settings({PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
            automations.remove()
    assert run.holder() is None
    final = populora(["resume", str(run.root)], prefect_server)
    assert final.returncode == 0, final.stdout[-3000:]
    assert run.complete_generations() == [0]
    flows, tasks, kinds = prefect_runs(prefect_server, "busy")
    assert kinds == {"busy": "populora-train", "busy/gen_0000": "populora-generation"}
    assert still_running(flows, tasks) == []  # the dead attempt's task runs: crashed by the resume
    assert sorted(f.state.type.value for f in flows if f.name == "busy") == ["COMPLETED", "CRASHED"]
    state = populora(["runs", "--runs-dir", str(runs)], prefect_server)
    assert "complete" in state.stdout and "running" not in state.stdout


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow  # make test-slow (~1.5 min): make test's CI stays under 40 minutes; there tests/core/rundir/
# test_artifacts.py names an unreadable artifact of each kind of damage with the command that recomputes it
def test_a_truncated_artifact_is_named_by_status_recomputed_by_resume_and_named_by_analyze(
    reference_run, prefect_server, tmp_path
):
    prefect_server = _wide(prefect_server)
    out = tmp_path / "partial"
    replay = ["replay", str(reference_run.root), "--from", "pair", "--until", "solve", "--out", str(out)]
    assert populora(replay, prefect_server).returncode == 0
    run = RunDir(out)
    problems = artifact_path(run.gen(0), "problems")
    _truncate(problems)

    status = populora(["status", str(out)], prefect_server)
    assert status.returncode == 0, status.stdout[-3000:]
    text = " ".join(status.stdout.split())
    assert "damaged gen_0000/problems.parquet" in text and f"populora resume {out}" in text
    assert "stages done: pair, propose, solve (" in text  # not validate: its artifact is unreadable

    resumed = populora(["resume", str(out), "--generations", "1"], prefect_server)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "removed damaged gen_0000/problems.parquet" in resumed.stdout
    pd.testing.assert_frame_equal(
        run.read(0, "problems").drop(columns="run_id"), reference_run.read(0, "problems").drop(columns="run_id")
    )

    # damage in a complete generation: verdicts truncated, one bit of rewards flipped (it may still read)
    _truncate(artifact_path(run.gen(0), "verdicts"))
    rewards = artifact_path(run.gen(0), "rewards")
    data = bytearray(rewards.read_bytes())
    data[len(data) // 3] ^= 0x01
    rewards.write_bytes(bytes(data))
    status = " ".join(populora(["status", str(out)], prefect_server).stdout.split())
    assert (
        "damaged gen_0000/verdicts.parquet" in status and "damaged gen_0000/rewards.parquet (sha256 differs" in status
    )
    assert f"populora resume {out} --recompute gen_0000/verdicts" in status
    analyze = populora(["analyze", str(out)], prefect_server)
    assert analyze.returncode == 2 and "Traceback" not in analyze.stdout
    assert "is damaged" in analyze.stdout and "--recompute gen_0000/" in " ".join(analyze.stdout.split())
    refused = populora(["resume", str(out), "--generations", "1"], prefect_server)
    assert refused.returncode == 2 and "Traceback" not in refused.stdout, refused.stdout[-3000:]
    assert "--recompute gen_0000/" in " ".join(refused.stdout.split())

    untouched = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}
    untouched = {
        p: v
        for p, v in untouched.items()
        # the run's lock file is rewritten by every command that holds the run; it is no artifact
        if p.name not in ("verdicts.parquet", "rewards.parquet", "_SUCCESS", ".lock")
    }
    fix = ["--recompute", "gen_0000/verdicts", "--recompute", "gen_0000/rewards.parquet"]
    fixed = populora(["resume", str(out), "--generations", "1", *fix], prefect_server)
    assert fixed.returncode == 0, fixed.stdout[-3000:]
    assert "recomputed gen_0000/rewards.parquet (stage reward): identical" in " ".join(fixed.stdout.split())
    timing = ["run_id", "seconds"]  # the sandbox's seconds per program are measured anew
    pd.testing.assert_frame_equal(
        run.read(0, "verdicts").drop(columns=timing), reference_run.read(0, "verdicts").drop(columns=timing)
    )
    pd.testing.assert_frame_equal(
        run.read(0, "rewards").drop(columns="run_id"), reference_run.read(0, "rewards").drop(columns="run_id")
    )
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in untouched} == untouched  # nothing else touched
    assert "damaged" not in populora(["status", str(out)], prefect_server).stdout


def test_the_resume_deployment_never_starts_a_new_run(tmp_path):
    import pytest

    from flows.train import train_flow
    from populora_core.config import ConfigError

    with pytest.raises(ConfigError, match="no run 'typo' to resume"):
        train_flow.fn(preset=None, run_id="typo", runs_dir=str(tmp_path))  # the deployment's parameters
    assert list(tmp_path.iterdir()) == []


def test_the_train_deployment_places_a_new_run_once_and_moves_an_existing_one(tmp_path, monkeypatch):
    """The `train` and `resume` deployments' `cluster` parameter (JSON, as the UI gives it): a
    new run is created (``new_run``) with it as its placement, an address a string as given;
    an existing run is moved, under its lock, and trained from where it is."""
    import flows.train
    from flows.train import train_flow
    from populora_core.run import RunDir

    trained = []
    monkeypatch.setattr(flows.train, "_continue", lambda run, target, recompute: trained.append((run.root, target)))
    ray = {"engine": "ray", "address": "10.0.0.5:6379"}  # a string as given, never read as YAML
    train_flow.fn(preset="cpu-tiny", run_id="deployed", runs_dir=str(tmp_path), generations=1, cluster=ray)
    run = RunDir(tmp_path / "deployed")
    assert (run.config().cluster.engine, run.config().cluster.address) == ("ray", "10.0.0.5:6379")
    train_flow.fn(preset=None, run_id=str(run.root), cluster={"engine": "local", "address": ""})
    assert (run.config().cluster.engine, run.config().cluster.address) == ("local", "")
    assert trained == [(run.root, 1), (run.root, run.config().generations)]


def test_cli_flow_runs_beat_well_within_the_automations_wait():
    """Prefect's own default (180 s) is longer than the automation waits: a live run would be
    crashed. `populora train`/`resume`/`replay` run their flows under ``heartbeats``."""
    import pytest
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY

    from flows import automations

    with automations.heartbeats():
        assert PREFECT_FLOWS_HEARTBEAT_FREQUENCY.value() == automations.HEARTBEAT_S
    assert automations.CRASH_AFTER_S >= 3 * automations.HEARTBEAT_S
    with pytest.raises(ValueError, match="must exceed"):
        automations.crash_automation(within_s=automations.HEARTBEAT_S)
