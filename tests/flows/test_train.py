"""Training runs end to end through Prefect: artifacts, crash and resume, replay, bad input.

Every run here is real: the cpu-tiny preset (SmolLM2-135M, 2 teachers + 2 students,
evolution after every generation), the bubblewrap sandbox and a real Prefect server.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import time

import pandas as pd
import pytest

from populora_core.config import load_config
from populora_core.population.adapters import load_hall, members_from_frame
from populora_core.population.replacement import in_grace
from populora_core.run import RunDir
from populora_core.rundir.artifacts import (
    SUCCESS,
    artifact_path,
    artifacts_in,
    partial_files,
    read_artifact,
    schema_difference,
)
from populora_core.stages.evolve import rated as rated_members
from populora_core.stages.table import TABLE, get_stage, stage_names
from tasks.ui import artifact_key
from tests.flows.conftest import (
    GENERATIONS,
    TRAIN,
    assert_same_run,
    members,
    populora,
    prefect_runs,
    start_populora,
    still_running,
)


def test_every_artifact_is_present_schema_valid_and_consistent(reference_run):
    run = reference_run
    assert run.complete_generations() == list(range(GENERATIONS))
    assert json.loads(run.run_file.read_text())["run_id"] == "reference"
    for g in range(GENERATIONS):
        gen = run.gen(g)
        assert (gen / SUCCESS).is_file()
        names = {p.name.removesuffix(".parquet") for p in artifacts_in(gen)}
        assert names == {n for stage in TABLE for n in stage.outputs}
        for path in artifacts_in(gen):
            assert schema_difference(path) is None
            frame = pd.read_parquet(path)
            assert set(frame["run_id"]) <= {"reference"} and set(frame["generation"]) <= {g}
        a = {name: read_artifact(gen, name) for name in names}
        now, nxt = members(run, g), members(run, g + 1)
        ids = set(now["adapter_id"])
        # pairings and ratings reference existing adapters
        assert set(a["pairings"]["teacher_id"]) | set(a["pairings"]["student_id"]) <= ids
        assert set(a["ratings"]["adapter_id"]) == ids
        assert set(a["train_metrics"]["adapter_id"]) == ids
        # an adapter takes no update only when every reward of its role was equal, and says so
        for row in a["train_metrics"].itertuples():
            role = a["rewards"].loc[a["rewards"]["adapter_id"] == row.adapter_id, "role"].iloc[0]
            flat = a["rewards"].loc[a["rewards"]["role"] == role, "reward"].nunique() == 1
            assert row.updated == (not flat) and (row.skip_reason == "") == row.updated, row
            assert (row.delta_change > 0) == row.updated
        # rollouts reference existing valid problems of their teacher
        valid = a["problems"][a["problems"]["valid"]]
        known = set(zip(valid["teacher_id"], valid["problem_id"], strict=True))
        assert len(a["rollouts"]) > 0
        assert set(zip(a["rollouts"]["teacher_id"], a["rollouts"]["problem_id"], strict=True)) <= known
        assert list(a["verdicts"]["rollout_id"]) == list(a["rollouts"]["rollout_id"])
        assert set(a["verdicts"]["status"]) <= {"correct", "wrong", "format_error"}
        items = a["rewards"].groupby("kind")["item_id"].apply(set)
        assert items["rollout"] == set(a["rollouts"]["rollout_id"])
        assert items["proposal"] == set(a["proposals"]["proposal_id"])
        # every teacher proposed; every pairing's student has work
        assert set(a["proposals"]["teacher_id"]) == set(now.loc[now["role"] == "teacher", "adapter_id"])
        assert set(a["rollouts"]["student_id"]) == set(a["pairings"]["student_id"])
        # evolution at k=1: lineage parents existed (members, or hall-of-fame snapshots of earlier
        # members), children are in the next population; a role culls nobody only when its weakest
        # member is a child in its grace round
        hall = {h.adapter_id for h in load_hall(run.members_dir(g))}
        for row in a["lineage"].itertuples():
            assert set(row.parents) <= ids | hall and row.replaced_id in ids
            assert row.child_id in set(nxt["adapter_id"]) and row.replaced_id not in set(nxt["adapter_id"])
        config = run.config()
        rated = rated_members(members_from_frame(now), a["ratings"])
        for role in ("teacher", "student"):
            if role not in set(a["lineage"]["role"]):
                weakest = min((m for m in rated if m.role == role), key=lambda m: (m.conservative, m.adapter_id))
                assert in_grace(weakest, g, config.evolution), (g, role)
        assert {h.role for h in load_hall(run.members_dir(g + 1))} == {"teacher", "student"}
        assert set(a["buffers"]["teacher_id"]) == set(nxt.loc[nxt["role"] == "teacher", "adapter_id"])
        for adapter_id in nxt["adapter_id"]:
            assert (run.members_dir(g + 1) / adapter_id / "adapter_model.safetensors").is_file()
    assert partial_files(run.root) == []


def test_the_ui_draws_the_stage_chain_and_the_generation_table_reads_well(reference_run, prefect_server):
    """Each stage's task run waits for the one before (the Prefect graph draws the table's chain,
    prepare first, tracking after finish); the generation's artifact has no NaN and no file://
    link, and keeps long skip reasons out of its table."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    _, tasks, _ = prefect_runs(prefect_server, "reference")
    gen0 = {t.name: t for t in tasks if t.name.endswith("-gen0")}
    chain = ["prepare", *stage_names(), "finish"]
    for earlier, later in itertools.pairwise(chain[:-1]):
        waits = [i.id for i in gen0[f"{later}-gen0"].task_inputs.get("wait_for", [])]
        assert waits == [gen0[f"{earlier}-gen0"].id], (later, waits)
    with temporary_settings({PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}), get_client(sync_client=True) as c:
        artifact = c.read_latest_artifacts()
    summaries = {artifact_key("reference", g) for g in range(GENERATIONS)}  # not the evaluation's tables
    texts = [a.data for a in artifact if a.key in summaries]
    assert len(texts) == GENERATIONS, [a.key for a in artifact]
    for text in texts:
        assert not re.search(r"\bnan\b", text) and "file://" not in text and "Read one: `duckdb" in text
        assert "| skipped: " not in text  # reasons under the table, as numbered notes


def test_status_and_runs_commands_describe_the_run(reference_run, prefect_server):
    status = populora(["status", str(reference_run.root)], prefect_server)
    assert status.returncode == 0, status.stdout
    assert f"complete generations: {GENERATIONS} of {GENERATIONS}" in status.stdout
    runs = populora(["runs", "--runs-dir", str(reference_run.root.parent)], prefect_server)
    assert "reference" in runs.stdout and "complete" in runs.stdout


EVERY_STAGE = [(stage.name, 0) for stage in TABLE] + [("propose", 1)]
TWO_KINDS = [("update", 0), ("propose", 1)]
"""A stage that writes adapter directories (the update) and one with the generation backend in
a later generation. `make test` kills there (each kill is a process start and a model load;
CI stays under 40 minutes); `make test-slow` at every stage, the first and the last included."""


@pytest.mark.parametrize(
    "faults",
    [pytest.param(TWO_KINDS, id="two-kinds"), pytest.param(EVERY_STAGE, id="every-stage", marks=pytest.mark.slow)],
)
def test_sigkill_during_stages_then_resume_gives_the_uninterrupted_artifacts(
    reference_run, prefect_server, tmp_path, faults
):
    run_id = f"crashed-{len(faults)}"
    runs = tmp_path / "runs"
    run = RunDir(runs / run_id)
    train = [*TRAIN, "--run-id", run_id, "--runs-dir", str(runs), "--set", "tracking.backends=[tensorboard, mlflow]"]
    for i, (stage, generation) in enumerate(faults):
        args = train if i == 0 else ["resume", str(run.root)]
        result = populora(args, prefect_server, fault=f"{stage}@{generation}")
        assert result.returncode == -9, (stage, result.stdout[-3000:])
        said = f"generation {generation}: the last attempt (pid "  # the supervisor names the stage and signal
        assert f"{said}" in result.stdout and f"killed by SIGKILL in stage {stage} (writing" in result.stdout, stage
        gen = run.gen(generation)
        assert partial_files(gen), stage  # killed half-way through writing
        assert not (gen / SUCCESS).exists()
        assert not artifact_path(gen, get_stage(stage).outputs[-1]).exists()
    finished_by_ctrl_c = _ctrl_c_in_a_stage(run, prefect_server)
    # killed after the last generation's _SUCCESS, before logging it: the next resume catches up
    untracked = populora(["resume", str(run.root)], prefect_server, fault=f"tracking@{GENERATIONS - 1}")
    assert run.stopped_by_person() is None  # continued by a person: no longer left alone
    assert untracked.returncode == -9 and run.complete_generations() == list(range(GENERATIONS))
    final = populora(["resume", str(run.root)], prefect_server)
    assert final.returncode == 0, final.stdout[-3000:]
    assert run.complete_generations() == list(range(GENERATIONS))
    assert partial_files(run.root) == []

    assert_same_run(run, reference_run)
    # the final generation reports which stages were already done when it resumed
    resumed = json.loads((run.gen(1) / SUCCESS).read_text())["resumed_stages"]
    assert resumed == ["pair", *finished_by_ctrl_c]
    # generation 0's seconds count every stage, computed by several processes: each killed one
    # that finished a stage before its kill (it starts at the stage its predecessor died in),
    # and the one that finished the generation
    first = json.loads((run.gen(0) / SUCCESS).read_text())
    killed_at = [stage_names().index(stage) for stage, g in faults if g == 0]
    computed = sum(kill > start for start, kill in zip([0, *killed_at], killed_at, strict=False))
    assert len(first["attempts"]) == computed + 1 and all(s > 0 for s in first["stage_seconds"].values())
    assert first["seconds"] == pytest.approx(sum(first["stage_seconds"].values()))
    # the Prefect UI: every killed process's flow runs were set to Crashed by the next resume
    flows, tasks, kinds = prefect_runs(prefect_server, run_id)
    assert still_running(flows, tasks) == []
    crashed = [f for f in flows if f.state.is_crashed()]
    assert len(crashed) >= 2 * len(faults), [(f.name, f.state.type) for f in flows]
    interrupted = "aborted by an interrupt signal"  # Prefect's own, for the run stopped with Ctrl-C
    assert all(any(m in (f.state.message or "") for m in ("process died", interrupted)) for f in crashed), [
        f.state.message for f in crashed
    ]
    assert kinds == {
        run_id: "populora-train",
        f"{run_id}/gen_0000": "populora-generation",
        f"{run_id}/gen_0001": "populora-generation",
    }
    _assert_tracked_once(run)


def _ctrl_c_in_a_stage(run: RunDir, env: dict[str, str]) -> list[str]:
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) while `populora resume`
    computes a stage of the last generation: the run is marked stopped by a person, so
    `populora revive` leaves it alone and says so. Returns the stages that attempt finished."""
    from cli.revive import unfinished
    from populora_core.rundir.attempts import read_lines

    path = run.attempts_file(GENERATIONS - 1)
    before = len(read_lines(path))
    proc = start_populora(["resume", str(run.root)], env)
    try:
        deadline = time.monotonic() + 300
        while not [x for x in read_lines(path)[before:] if x.get("event") == "start"]:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGINT, out[-3000:]
    assert run.stopped_by_person()["how"] == "Ctrl-C"
    stopped: list = []
    assert unfinished(run.root.parent, stopped=stopped) == [] and [s[:2] for s in stopped] == [("run", run.root)]
    return [x["stage"] for x in read_lines(path)[before:] if "seconds" in x]


def _assert_tracked_once(run: RunDir) -> None:
    """The run's one MLflow run (run.json's) and its TensorBoard files hold every figure of
    every generation once, though each killed process logged to them and one died before logging."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from populora_core import tracking

    figures = {g: tracking.figures(run, g) for g in range(GENERATIONS)}
    want = {key: [(g, f[key]) for g, f in figures.items() if key in f] for key in set().union(*figures.values())}
    assert {"valid_rate", "coverage", "bytes_written", "stage_seconds/propose"} <= set(want)
    assert any(k.startswith("ratings/") for k in want) and any(k.startswith("train/") for k in want)
    recorded = tracking.state(run)["mlflow"]
    client = MlflowClient(recorded["uri"])
    [found] = client.search_runs([recorded["experiment_id"]])
    assert found.info.run_id == recorded["run_id"] and found.info.status == "FINISHED"
    assert found.data.params["population.teachers"] == str(run.config().population.teachers)
    assert found.data.params["tracking.backends"] == '["tensorboard", "mlflow"]'
    assert set(found.data.metrics) == {*want, "generation"}
    for key, points in want.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(found.info.run_id, key))
        assert history == [(g, pytest.approx(v)) for g, v in points], key
    acc = EventAccumulator(str(tracking.tensorboard_dir(run)), size_guidance={"scalars": 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == set(want)
    for key, points in want.items():
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [(g, pytest.approx(v, rel=1e-6)) for g, v in points]


def test_replay_recomputes_from_a_stage_without_regenerating_upstream(reference_run, prefect_server, tmp_path):
    out = tmp_path / "replayed"
    result = populora(
        [
            "replay",
            str(reference_run.root),
            "--from",
            "reward",
            "--generation",
            "0",
            "--set",
            "rewards.format_error=-3.0",
            "--out",
            str(out),
        ],
        prefect_server,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    new = RunDir(out)
    info = json.loads(new.run_file.read_text())
    assert info["replay_from"] == {"stage": "reward", "generation": 0, "overrides": ["rewards.format_error=-3.0"]}
    for name in ("pairings", "proposals", "problems", "rollouts", "verdicts"):  # linked, not regenerated
        src, dst = reference_run.gen(0) / f"{name}.parquet", new.gen(0) / f"{name}.parquet"
        assert src.stat().st_ino == dst.stat().st_ino, name
    old_r, new_r = read_artifact(reference_run.gen(0), "rewards"), read_artifact(new.gen(0), "rewards")
    fmt = read_artifact(new.gen(0), "verdicts").set_index("rollout_id")["status"] == "format_error"
    students = new_r[new_r["kind"] == "rollout"].set_index("item_id")["reward"]
    assert (students[fmt[fmt].index] == -3.0).all() and fmt.any()
    assert not old_r["reward"].equals(new_r["reward"])
    assert new.complete_generations() == [0]
    assert partial_files(new.root) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "population.teachers=0"], "population.teachers"),
        (["--set", "grpo.no_such_field=1"], "grpo.no_such_field"),
        (["--set", "model.name=/nonexistent/model"], "/nonexistent/model"),
        (["--set", "sandbox.backend=docker", "--set", "sandbox.docker_image=populora-absent:0"], "docker"),
        (["--preset", "no-such-preset"], "no-such-preset"),
    ],
)
def test_bad_input_fails_fast_and_leaves_no_run(args, message, tmp_path, prefect_server):
    runs = tmp_path / "runs"
    argv = ["train", *(["--preset", "cpu-tiny"] if "--preset" not in args else []), *args]
    result = populora([*argv, "--run-id", "bad", "--runs-dir", str(runs)], prefect_server, timeout=300)
    assert result.returncode == 2, result.stdout[-2000:]
    assert message in result.stdout
    assert not (runs / "bad").exists()
    assert not runs.exists() or not any(runs.iterdir())


def test_broken_yaml_config_names_the_field(tmp_path, prefect_server):
    config = tmp_path / "run.yaml"
    config.write_text("population:\n  teachers: two\nevolution:\n  every_k: 0\n")
    result = populora(["train", "--config", str(config), "--runs-dir", str(tmp_path / "runs")], prefect_server)
    assert result.returncode == 2
    assert "population.teachers" in result.stdout and "evolution.every_k" in result.stdout
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_resume_of_a_missing_run_is_a_clear_error(tmp_path, prefect_server):
    result = populora(["resume", str(tmp_path / "nowhere")], prefect_server)
    assert result.returncode == 2 and "no run at" in result.stdout
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_single_agent_baseline_runs_through_the_flow_compute_matched(reference_run, baseline_run):
    run = baseline_run
    assert run.complete_generations() == [0]
    pop = members(run, 0)
    assert len(pop) == 1 and sorted(pop["roles"].iloc[0]) == ["student", "teacher"]
    agent = pop["adapter_id"].iloc[0]
    pairings = read_artifact(run.gen(0), "pairings")
    assert list(pairings["teacher_id"]) == [agent] and list(pairings["student_id"]) == [agent]
    # compute-matched per adapter: as many proposals as one of the population's teachers
    ref_props = read_artifact(reference_run.gen(0), "proposals")
    per_teacher = ref_props.groupby("teacher_id").size()
    assert len(read_artifact(run.gen(0), "proposals")) == per_teacher.iloc[0] == per_teacher.max()
    config = load_config(preset="cpu-tiny-baseline")
    rollouts = read_artifact(run.gen(0), "rollouts")
    assert len(rollouts) >= config.budget.problems_per_match * config.budget.samples_per_problem
    metrics = read_artifact(run.gen(0), "train_metrics")
    assert list(metrics["adapter_id"]) == [agent] and metrics["steps"].max() <= 1  # one update per generation
    rewards = read_artifact(run.gen(0), "rewards")
    assert set(rewards["role"]) == {"teacher", "student"} and set(rewards["adapter_id"]) == {agent}
    assert read_artifact(run.gen(0), "lineage").empty  # nobody to replace
