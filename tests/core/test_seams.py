"""The seams the code declares for fault injection (``populora_core.seams``): a hook for a point
no code declares is refused, and every declared point is reached by the code its line names, so
a fault of ``tests/faults`` cannot be disarmed by a rename or an import without a test failing."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from populora_core import seams
from populora_core.config import load_config
from populora_core.run import RunDir, create_run
from tests.helpers import TINY_QWEN2


class Reached(BaseException):
    """Raised by the test's hook at a seam (not an Exception: tracking goes on past those)."""


@pytest.fixture
def run(tmp_path) -> RunDir:
    """A cpu-tiny run on a base model that is only a ``config.json`` (nothing is loaded)."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(TINY_QWEN2))
    config = load_config(preset="cpu-tiny", overrides=[f"model.name={tmp_path / 'tiny'}"])
    return create_run(tmp_path / "runs", config, run_id="seams")


def _write_artifact(run: RunDir, tmp_path, monkeypatch) -> None:
    run.write(0, "verdicts", pd.DataFrame())


def _sync(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core import tracking

    tracking.sync(run)


def _sync_a_complete_generation(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core import tracking
    from populora_core.rundir.artifacts import SUCCESS

    run.gen(0).mkdir(parents=True)
    (run.gen(0) / SUCCESS).write_text("{}")
    monkeypatch.setattr(tracking, "figures", lambda run, generation: {})
    tracking.sync(run)


def _sandbox_batch(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core.sandbox import SandboxPool

    SandboxPool(run.config().sandbox).run([])


def _update_job(run: RunDir, tmp_path):
    from populora_core.stages.learn import UpdateJob

    member = run.members(0)[0]
    row = {"adapter_id": member.adapter_id}
    source, target = run.members_dir(0) / member.adapter_id, run.updated(0) / member.adapter_id
    return UpdateJob(source, target, (), run.config().grpo, 0, row, run.config().model.name)


def _train_one(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core.stages.learn import train_one

    train_one(None, _update_job(run, tmp_path))


def _save_updated(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core.population.adapters import load_adapter
    from populora_core.stages.learn import save_updated

    job = _update_job(run, tmp_path)
    save_updated(job.target, load_adapter(job.source), {}, job.row, job.base_model)


def _save_population(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core.population.adapters import save_population

    save_population(run.members_dir(1), 1, run.members(0), {}, link_from=run.members_dir(0))


def _verify(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core.rundir.artifacts import columns
    from populora_core.stages.play import verify

    problems = pd.DataFrame(columns=columns("problems")).astype({"valid": bool})
    rollouts = pd.DataFrame(columns=columns("rollouts"))
    verify(rollouts=rollouts, problems=problems, pool=None, config=run.config(), generation=0)


def _evaluate_benchmark(run: RunDir, tmp_path, monkeypatch) -> None:
    from populora_core.evaluation import pipeline

    monkeypatch.setattr(pipeline, "load_benchmark", lambda name, data_dir, limit=None: [])  # no items to judge
    pipeline.evaluate_benchmark(run, 0, "humanevalplus", data_dir=tmp_path, include_base=False)


REACHED_BY = {
    seams.ARTIFACT_WRITE: _write_artifact,
    seams.TRACKING_SYNC: _sync,
    seams.TENSORBOARD_WRITE: _sync_a_complete_generation,
    seams.SANDBOX_BATCH: _sandbox_batch,
    seams.UPDATE_TRAIN: _train_one,
    seams.UPDATE_WEIGHTS: _save_updated,
    seams.UPDATE_OPTIMIZER: _save_updated,
    seams.SNAPSHOT_LINK: _save_population,
    seams.VERIFY_VERDICTS: _verify,
    seams.EVAL_PART: _evaluate_benchmark,
}
"""Each declared point and the code that reaches it (its line in ``populora_core.seams``)."""


def test_every_declared_seam_has_a_path_here():
    assert set(REACHED_BY) == seams.POINTS


@pytest.mark.parametrize("point", sorted(REACHED_BY))
def test_each_declared_seam_is_reached_by_the_code_it_names(point, run, tmp_path, monkeypatch):
    seen = []

    def hook(value, **context):
        held = sorted(p.name for p in value.iterdir()) if isinstance(value, Path) and value.is_dir() else None
        seen.append((value, context, held))
        raise Reached(point)

    remove = seams.register(point, hook)
    try:
        with pytest.raises(Reached):
            REACHED_BY[point](run, tmp_path, monkeypatch)
    finally:
        remove()
    [(value, context, held)] = seen
    if point == seams.ARTIFACT_WRITE:
        assert context == {"run": run, "generation": 0, "name": "verdicts"}
    if point == seams.UPDATE_WEIGHTS:  # before anything of the adapter is written
        assert held == [] and context["target"].parent == run.updated(0)
    if point == seams.UPDATE_OPTIMIZER:  # after the weights, in the directory about to become the target
        from populora_core.population.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS

        assert held == sorted([ADAPTER_CONFIG, ADAPTER_WEIGHTS]) and context["target"].parent == run.updated(0)
    if point == seams.VERIFY_VERDICTS:
        assert value == []


def test_a_hook_for_an_undeclared_seam_is_refused_and_no_hook_costs_nothing():
    with pytest.raises(ValueError, match=r"no seam 'play\.check_answers'"):
        seams.register("play.check_answers", lambda value: value)
    frame = pd.DataFrame({"a": [1]})
    assert seams.seam(seams.ARTIFACT_WRITE, frame) is frame  # nothing registered: the value itself
    first = seams.register(seams.VERIFY_VERDICTS, lambda value: [*value, "first"])
    second = seams.register(seams.VERIFY_VERDICTS, lambda value: [*value, "second"])
    try:
        assert seams.seam(seams.VERIFY_VERDICTS, []) == ["first", "second"]  # in order of registration
    finally:
        first()
        second()
    assert seams.seam(seams.VERIFY_VERDICTS, []) == []
