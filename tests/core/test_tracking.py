"""Tracking: real TensorBoard event files (read back with TensorBoard's own reader) and a
real MLflow SQLite store (queried with MlflowClient), each step once after a process is
killed half-way through logging and the run is opened again from run.json."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from populora_core import tracking
from populora_core.config import load_config
from populora_core.run import RunDir, build_run
from populora_core.rundir.artifacts import mark_success

REPO = Path(__file__).resolve().parents[2]
NAN = float("nan")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """One runs directory, so the tests share its MLflow store (``runs/mlflow.db``, the default)."""
    return tmp_path_factory.mktemp("runs")


def make_run(runs_dir: Path, run_id: str, backends: str = "[tensorboard, mlflow]", *overrides: str) -> RunDir:
    config = load_config(preset="cpu-tiny", overrides=[f"tracking.backends={backends}", "generations=3", *overrides])
    return build_run(runs_dir / run_id, config, {"model_path": "unused"})


def summary(g: int) -> dict:
    """A generation's `_SUCCESS` record, shaped as `stages.summary.generation_summary` writes it."""
    return {
        "proposals": 8,
        "valid_rate": 0.25 + g / 10,
        "fresh_solve_rate": NAN if g == 0 else 0.5,  # nothing to measure in generation 0
        "triviality": {"identity": 0.1 * g, "shallow": 0.5},
        "teacher_reward": {"t0": 0.5 - g / 10, "t1": 0.25},
        "updates": {"t0": {"delta_change": 0.01 * (g + 1), "skip_reason": ""}},
        "ratings": {"t0": {"mu": 25.0 + g, "sigma": 8.0, "conservative": 1.0}, "s0": {"mu": 24.0, "sigma": 7.0}},
        "replaced": {"s0": f"c{g}"},
        "coverage": 0.1 * (g + 1),
        "ast_depth_mean": 7.5,
        "bytes_written": 1000 + g,
        "seconds": 3.5,
        "stage_seconds": {"propose": 1.5, "update": 2.0},
        "attempts": [{"attempt": "a1", "pid": 7, "stages": {"propose": 1.5}}],
        "resumed_stages": ["pair"],
    }


def complete(run: RunDir, g: int) -> None:
    """Generation ``g`` complete: its train_metrics artifact, then `_SUCCESS`."""
    train = pd.DataFrame(
        {
            "adapter_id": ["t0", "s0"],
            "samples": [8, 0],
            "updated": [True, False],
            "skip_reason": ["", "no samples"],
            "steps": [1, 0],
            "delta_change": [0.01 * (g + 1), 0.0],
            "loss": [0.3 - g / 100, NAN],
            "clip_frac": [0.0, NAN],
            "kl": [0.001 * g, NAN],
            "grad_norm": [1.5, NAN],
            "tokens": [512.0, 0.0],
            "sampler_gap_mean": [1e-6, NAN],
            "sampler_gap_p99": [1e-5, NAN],
            "sampler_ratio_std": [1e-6, NAN],
            "sampler_ratio_max": [1.0, NAN],
            "truncated_frac": [0.0, NAN],
            "seconds": [2.0, 0.0],
            "node": ["host-a", ""],
        }
    )
    run.gen(g).mkdir(parents=True, exist_ok=True)
    run.write(g, "train_metrics", train)
    mark_success(run.gen(g), summary(g))


def expected(run: RunDir, generations: list[int]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for g in generations:
        for key, value in tracking.figures(run, g).items():
            out.setdefault(key, []).append((g, value))
    return out


def tensorboard_scalars(run: RunDir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series as TensorBoard's reader gives it."""
    acc = EventAccumulator(str(tracking.tensorboard_dir(run)), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_records(run: RunDir) -> Counter:
    """(tag, step) of every record in every event file, duplicates counted (a raw reader
    that purges nothing)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = Counter()
    for path in sorted(tracking.tensorboard_dir(run).glob("events.out.tfevents.*")):
        found.update((v.tag, e.step) for e in EventFileLoader(str(path)).Load() for v in e.summary.value)
    return found


def mlflow_series(run: RunDir) -> dict[str, list[tuple[int, float]]]:
    recorded = tracking.state(run)["mlflow"]
    client = MlflowClient(recorded["uri"])
    keys = client.get_run(recorded["run_id"]).data.metrics
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(recorded["run_id"], k)) for k in keys}


def assert_series(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for key, points in want.items():
        assert [s for s, _ in got[key]] == [s for s, _ in points], key  # each step once, in order
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in points], rel=1e-6), key


def assert_logged_once(run: RunDir, generations: list[int], backend: str) -> None:
    want = expected(run, generations)
    if backend == "tensorboard":
        assert_series(tensorboard_scalars(run), want)
        records = tensorboard_records(run)
        assert max(records.values()) == 1, [k for k, n in records.items() if n > 1][:5]
    else:
        assert_series(mlflow_series(run), want | {"generation": [(g, float(g)) for g in generations]})


# what a process does when it is killed half-way through logging generation 2
KILLS = {
    "tensorboard-before-recording": "tracking._record = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)",
    "tensorboard-mid-step": """
from torch.utils.tensorboard import SummaryWriter
add, calls = SummaryWriter.add_scalar, []
def dying(self, tag, value, step, **kw):
    add(self, tag, value, step, **kw)
    calls.extend([tag] if step == 2 else [])
    if len(calls) == 5:
        self.flush()
        os.kill(os.getpid(), signal.SIGKILL)
SummaryWriter.add_scalar = dying
""",
    "mlflow-before-sentinel": """
from mlflow.tracking import MlflowClient
log = MlflowClient.log_batch
def dying(self, run_id, metrics=(), **kw):
    if any(m.key == "generation" and m.step == 2 for m in metrics):
        os.kill(os.getpid(), signal.SIGKILL)
    return log(self, run_id, metrics=metrics, **kw)
MlflowClient.log_batch = dying
""",
    "mlflow-mid-step": """
from mlflow.tracking import MlflowClient
tracking.MLFLOW_BATCH = 4
log, calls = MlflowClient.log_batch, []
def dying(self, run_id, metrics=(), **kw):
    out = log(self, run_id, metrics=metrics, **kw)
    calls.extend([1] if any(m.step == 2 for m in metrics) else [])
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return out
MlflowClient.log_batch = dying
""",
}


def sync_killed(run: RunDir, kill: str) -> None:
    """``tracking.sync(run)`` in a process that SIGKILLs itself at ``kill``."""
    code = "\n".join(
        [
            "import os, signal",
            "from populora_core import tracking",
            "from populora_core.run import RunDir",
            KILLS[kill],
            f"tracking.sync(RunDir({str(run.root)!r}))",
        ]
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]


def test_figures_are_every_number_of_the_summary_and_of_train_metrics(runs_dir):
    run = make_run(runs_dir, "figures", "[]")
    complete(run, 1)
    got = tracking.figures(run, 1)
    assert got["valid_rate"] == 0.35 and got["fresh_solve_rate"] == 0.5 and got["bytes_written"] == 1001
    assert got["ratings/t0/mu"] == 26.0 and got["teacher_reward/t1"] == 0.25 and got["triviality/identity"] == 0.1
    assert got["stage_seconds/update"] == 2.0 and got["updates/t0/delta_change"] == 0.02 and got["replaced"] == 1
    assert got["train/t0/loss"] == 0.29 and got["train/t0/kl"] == 0.001 and got["train/t0/updated"] == 1.0
    assert got["train/t0/samples"] == 8 and got["train/t0/steps"] == 1 and "train/t0/generation" not in got
    assert got["train/s0/updated"] == 0.0 and "train/s0/loss" not in got  # NaN: no update, nothing measured
    assert not [k for k in got if k.startswith(("attempts", "resumed_stages", "updates/t0/skip"))]
    complete(run, 0)
    assert "fresh_solve_rate" not in tracking.figures(run, 0)
    assert tracking.flatten({"a": {"b c:d": 1, "e": "x", "f": [1], "g": True}}) == {"a/b c_d": 1.0}


@pytest.mark.parametrize("kill", list(KILLS))
def test_each_step_is_logged_once_after_a_kill_and_the_run_continues_the_same_tracking_run(runs_dir, kill):
    backend = kill.split("-")[0]
    run = make_run(runs_dir, f"killed-{kill}", f"[{backend}]")
    for g in (0, 1):
        complete(run, g)
    assert tracking.sync(run) == {"logged": {backend: [0, 1]}, "warnings": []}
    first = tracking.state(run)[backend]
    complete(run, 2)
    sync_killed(run, kill)
    if kill == "tensorboard-mid-step":  # and a record cut short by the kill
        newest = max(tracking.tensorboard_dir(run).glob("*g0002-0002"))
        newest.write_bytes(newest.read_bytes()[:-7])
    if backend == "mlflow":
        # _SUCCESS rewritten since (a recompute reseals it): the figures' timestamps move, so a
        # figure logged again would be a second point, not a row the store recognises as identical
        success = run.gen(2) / "_SUCCESS"
        os.utime(success, (success.stat().st_atime, success.stat().st_mtime + 60))
    reopened = RunDir(run.root)  # a new process: everything from run.json and the stores
    assert tracking.sync(reopened) == {"logged": {backend: [2]}, "warnings": []}
    assert tracking.sync(reopened)["logged"] == {backend: []}
    assert_logged_once(reopened, [0, 1, 2], backend)
    if backend == "mlflow":
        now = tracking.state(reopened)["mlflow"]
        assert now == first and now["uri"] == f"sqlite:///{runs_dir.resolve() / 'mlflow.db'}"
        client = MlflowClient(now["uri"])
        same = client.search_runs([now["experiment_id"]], f"tags.`populora.run_id` = '{run.run_id}'")
        assert [r.info.run_id for r in same] == [now["run_id"]]
        assert same[0].info.status == "FINISHED"  # generations=3, all logged
    else:
        assert tracking.state(reopened)["tensorboard"] == {"log_dir": "tensorboard", "logged_through": 2}


def test_mlflow_run_holds_the_config_as_params_and_the_config_file(runs_dir):
    run = make_run(runs_dir, "params", "[mlflow]", "population.teachers=3")
    complete(run, 0)
    tracking.sync(run)
    recorded = tracking.state(run)["mlflow"]
    client = MlflowClient(recorded["uri"])
    found = client.get_run(recorded["run_id"])
    params = found.data.params
    assert params["population.teachers"] == "3" and params["seed"] == "0" and params["generations"] == "3"
    assert params["tracking.backends"] == '["mlflow"]' and params["model.name"] == run.config().model.name
    assert found.info.run_name == run.run_id and found.info.status == "RUNNING"  # 1 of 3 generations
    assert found.data.tags["populora.run_dir"] == str(run.root.resolve())
    assert [a.path for a in client.list_artifacts(recorded["run_id"])] == ["config.yaml"]
    assert (runs_dir / "mlartifacts").is_dir()  # beside the store, not in the working directory


def test_tensorboard_holds_the_config_as_text_at_step_0(runs_dir):
    run = make_run(runs_dir, "config-text", "[tensorboard]")
    complete(run, 0)
    tracking.sync(run)
    acc = EventAccumulator(str(tracking.tensorboard_dir(run)), size_guidance={"tensors": 0})
    acc.Reload()
    [event] = acc.Tensors("config/text_summary")
    assert event.step == 0 and "teachers: 2" in event.tensor_proto.string_val[0].decode()


def test_a_copied_run_directory_never_logs_into_the_original_tracking_run(runs_dir):
    original = make_run(runs_dir, "original")
    for g in (0, 1):
        complete(original, g)
    tracking.sync(original)
    copy = RunDir(runs_dir / "copy")
    shutil.copytree(original.root, copy.root, ignore=shutil.ignore_patterns("tensorboard"))
    assert tracking.state(copy)["mlflow"]["run_id"] == tracking.state(original)["mlflow"]["run_id"]
    assert tracking.sync(copy)["logged"] == {"tensorboard": [0, 1], "mlflow": [0, 1]}
    assert tracking.state(copy)["mlflow"]["run_id"] != tracking.state(original)["mlflow"]["run_id"]
    for run in (original, copy):
        assert_logged_once(run, [0, 1], "mlflow")
        assert_logged_once(run, [0, 1], "tensorboard")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_mlflow_server_is_a_warning_and_tensorboard_still_logs(runs_dir):
    uri = f"http://127.0.0.1:{_closed_port()}"
    run = make_run(runs_dir, "unreachable", "[mlflow, tensorboard]", f"tracking.mlflow_uri={uri}")
    complete(run, 0)
    result = tracking.sync(run)
    assert result["logged"] == {"tensorboard": [0]}
    [warning] = result["warnings"]
    assert warning.startswith("tracking: mlflow failed, the run goes on") and f"populora resume {run.root}" in warning
    assert "mlflow" not in tracking.state(run)
    assert_logged_once(run, [0], "tensorboard")


def test_the_report_is_an_mlflow_artifact_and_tensorboard_text_once_per_generation(runs_dir, tmp_path):
    run = make_run(runs_dir, "reported")
    for g in (0, 1):
        complete(run, g)
    tracking.sync(run)
    report = tmp_path / "report"
    report.mkdir()
    (report / "summary.md").write_text("# reported\n\nfresh solve rate 50%")
    (report / "report.html").write_text("<html></html>")
    assert tracking.log_report(run, report) == []
    assert tracking.log_report(run, report) == []  # again: TensorBoard keeps one report per generation
    recorded = tracking.state(run)["mlflow"]
    listed = MlflowClient(recorded["uri"]).list_artifacts(recorded["run_id"], "report")
    assert sorted(a.path for a in listed) == ["report/report.html", "report/summary.md"]
    acc = EventAccumulator(str(tracking.tensorboard_dir(run)), size_guidance={"tensors": 0})
    acc.Reload()
    [event] = acc.Tensors("report/text_summary")
    assert event.step == 1 and "fresh solve rate 50%" in event.tensor_proto.string_val[0].decode()
    untracked = make_run(runs_dir, "untracked", "[]")
    assert tracking.log_report(untracked, report) == [] and not tracking.tensorboard_dir(untracked).exists()
    assert json.loads(untracked.run_file.read_text()).get("tracking") is None
