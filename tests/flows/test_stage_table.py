"""Resume, replay and status read one stage table: a stage added in a test is run by the
generation flow, skipped when done, linked by replay and reported by status."""

from __future__ import annotations

import shutil

import pandas as pd
import pyarrow as pa
import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.generation import generation_flow
from populora_core.replay import prepare_replay
from populora_core.run import RunDir
from populora_core.rundir.artifacts import SCHEMAS, SUCCESS, read_artifact
from populora_core.stages import runner, table


def census(*, verdicts: pd.DataFrame, config, generation: int) -> pd.DataFrame:
    """Solutions judged per student."""
    counts = verdicts.groupby("student_id").size()
    return pd.DataFrame({"student_id": counts.index, "solutions": counts.to_numpy()})


@pytest.fixture
def extended(monkeypatch):
    """The real table with a `census` stage appended."""
    monkeypatch.setitem(SCHEMAS, "census", pa.schema([("student_id", pa.string()), ("solutions", pa.int32())]))
    monkeypatch.setattr(table, "TABLE", (*table.TABLE, table.Stage("census", census, ("verdicts",), ("census",))))
    return table.stage_names()


def test_a_stage_added_to_the_table_appears_in_status_resume_and_replay(
    extended, reference_run, prefect_server, tmp_path
):
    run = RunDir(shutil.copytree(reference_run.root, tmp_path / "runs" / "extended"))
    (run.gen(1) / SUCCESS).unlink()  # generation 1: every stage done but the new one

    status = runner.run_status(run)
    assert status.stages == extended and status.stages[-1] == "census"
    assert status.next_generation == 1 and status.next_stages_done == list(extended[:-1])

    with temporary_settings({PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        summary = generation_flow(str(run.root), 1)
    assert summary["resumed_stages"] == list(extended[:-1])  # only census was computed
    expected = read_artifact(run.gen(1), "verdicts").groupby("student_id").size()
    got = read_artifact(run.gen(1), "census").set_index("student_id")["solutions"]
    assert got.to_dict() == expected.to_dict()
    assert run.complete_generations() == [0, 1] and runner.stages_done(run, 1) == list(extended)

    new = prepare_replay(run, tmp_path / "runs" / "replayed", from_stage="census", generation=1)
    assert not (new.gen(1) / "census.parquet").exists()
    for stage in table.TABLE[:-1]:  # what every upstream stage left, artifacts and adapters, is linked
        for src, dst in zip(runner.stage_paths(run, 1, stage), runner.stage_paths(new, 1, stage), strict=True):
            files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
            assert files, (stage.name, src)
            for f in files:
                assert (dst / f.relative_to(src) if src.is_dir() else dst).stat().st_ino == f.stat().st_ino
    with temporary_settings({PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        replayed = generation_flow(str(new.root), 1)
    assert replayed["resumed_stages"] == list(extended[:-1])
    pd.testing.assert_frame_equal(
        read_artifact(new.gen(1), "census").drop(columns="run_id"),
        read_artifact(run.gen(1), "census").drop(columns="run_id"),
    )
