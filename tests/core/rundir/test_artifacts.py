"""The artifact store: schemas enforced, atomic writes, partial files found, run layout."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest

from populora_core.rundir.artifacts import (
    SCHEMA_VERSION,
    SUCCESS,
    ArtifactError,
    full_schema,
    is_complete,
    mark_success,
    partial_files,
    read_artifact,
    remove_partials,
    schema_difference,
    write_artifact,
)


def pairings() -> pd.DataFrame:
    return pd.DataFrame({"teacher_id": ["t0", "t1"], "student_id": ["s0", "s0"], "match_quality": [0.4, 0.9]})


def test_written_artifact_has_its_schema_and_carries_run_generation_version(tmp_path):
    path = write_artifact(pairings(), tmp_path, "pairings", run_id="r1", generation=3)
    assert schema_difference(path) is None
    assert pq.read_schema(path).remove_metadata().equals(full_schema("pairings"))
    frame = read_artifact(tmp_path, "pairings")
    assert list(frame["run_id"]) == ["r1", "r1"]
    assert set(frame["generation"]) == {3} and set(frame["schema_version"]) == {SCHEMA_VERSION}
    assert list(frame["teacher_id"]) == ["t0", "t1"]


def test_a_file_whose_schema_differs_is_named_with_what_differs(tmp_path):
    """A pairings file written by other code (a column renamed, one retyped): what a resume,
    `populora status` or `analyze` reports about it (``storage.artifact_damage``)."""
    import pyarrow as pa

    table = pq.read_table(write_artifact(pairings(), tmp_path, "pairings", run_id="r1", generation=0))
    table = table.rename_columns(["quality" if n == "match_quality" else n for n in table.column_names])
    table = table.set_column(table.column_names.index("generation"), "generation", table["generation"].cast(pa.int64()))
    pq.write_table(table, tmp_path / "pairings.parquet")
    said = schema_difference(tmp_path / "pairings.parquet")
    assert "missing ['match_quality']" in said and "extra ['quality']" in said and "generation is int64" in said


def test_frames_that_do_not_fit_are_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ArtifactError, match="missing"):
        write_artifact(pairings().drop(columns="match_quality"), tmp_path, "pairings", run_id="r", generation=0)
    with pytest.raises(ArtifactError, match="unexpected"):
        write_artifact(pairings().assign(extra=1), tmp_path, "pairings", run_id="r", generation=0)
    with pytest.raises(ArtifactError, match="column"):
        bad = pairings().assign(match_quality=["high", "low"])
        write_artifact(bad, tmp_path, "pairings", run_id="r", generation=0)
    with pytest.raises(ArtifactError, match="unknown artifact"):
        write_artifact(pairings(), tmp_path, "nonsense", run_id="r", generation=0)
    assert list(tmp_path.iterdir()) == []


def test_other_schema_version_is_refused_on_read(tmp_path):
    frame = pairings().assign(run_id="r", generation=0, schema_version=SCHEMA_VERSION + 1)
    frame.to_parquet(tmp_path / "pairings.parquet")
    with pytest.raises(ArtifactError, match="schema version"):
        read_artifact(tmp_path, "pairings")
    with pytest.raises(ArtifactError, match="missing"):
        read_artifact(tmp_path, "ratings")


def test_a_file_of_the_previous_version_is_read_with_the_columns_added_since_empty(tmp_path):
    """Runs made before the sampler/learner columns (schema v2) still resume, replay and report."""
    from populora_core.rundir.artifacts import columns, full_schema
    from populora_core.rundir.versions import ADDED_SINCE

    added = ADDED_SINCE[SCHEMA_VERSION]["train_metrics"]
    row = {c: 0.0 for c in columns("train_metrics")} | {"adapter_id": "s0", "samples": 4, "updated": True}
    row |= {"skip_reason": "", "steps": 1, "node": ""}
    old = pd.DataFrame([row]).drop(columns=list(added)).assign(run_id="r", generation=0, schema_version=2)
    old = old.astype({"samples": "int32", "steps": "int32", "generation": "int32", "schema_version": "int16"})
    names = [n for n in full_schema("train_metrics").names if n not in added]
    old[names].to_parquet(tmp_path / "train_metrics.parquet", index=False)
    assert schema_difference(tmp_path / "train_metrics.parquet") is None
    frame = read_artifact(tmp_path, "train_metrics")
    assert frame[list(added)].isna().all().all() and frame.loc[0, "adapter_id"] == "s0"
    short = pd.DataFrame([row]).drop(columns=[*added, "kl"]).assign(run_id="r", generation=0, schema_version=2)
    short.to_parquet(tmp_path / "train_metrics.parquet", index=False)
    with pytest.raises(ArtifactError, match="schema version"):
        read_artifact(tmp_path, "train_metrics")  # lacking more than what was added: not an old file


def test_partial_files_are_found_and_removed(tmp_path):
    (tmp_path / "gen_0000").mkdir()
    (tmp_path / "gen_0000" / ".rollouts.parquet.tmp-1234").write_bytes(b"PAR1")
    (tmp_path / "population" / ".gen_0001.tmp-abcd").mkdir(parents=True)
    write_artifact(pairings(), tmp_path / "gen_0000", "pairings", run_id="r", generation=0)
    assert len(partial_files(tmp_path)) == 2
    remove_partials(tmp_path)
    assert partial_files(tmp_path) == []
    assert (tmp_path / "gen_0000" / "pairings.parquet").is_file()


def test_run_layout_knows_complete_and_next_generations(tmp_path):
    from populora_core.run import RunDir

    run = RunDir(tmp_path / "r")
    for g in (0, 1, 2):
        run.gen(g).mkdir(parents=True)
    mark_success(run.gen(0), {"solve_rate": 0.5})
    mark_success(run.gen(1), {"solve_rate": 0.25})
    assert is_complete(run.gen(1)) and (run.gen(1) / SUCCESS).is_file()
    assert run.complete_generations() == [0, 1]
    assert run.next_generation() == 2
    assert run.generations() == [0, 1, 2]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_an_unreadable_artifact_is_named_in_one_line_with_the_command_that_recomputes_it(tmp_path, damage):
    from populora_core.run import RunDir
    from populora_core.rundir.artifacts import DamagedArtifact
    from populora_core.stages.runner import damaged, is_done, remove_damaged
    from populora_core.stages.table import get_stage

    run = RunDir(tmp_path / "r1")
    path = run.write(0, "pairings", pairings())
    assert is_done(run, 0, get_stage("pair"))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"x" * len(data))

    with pytest.raises(DamagedArtifact) as caught:  # the generation in progress: resume recomputes it
        run.read(0, "pairings")
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and f"populora resume {run.root}" in message
    assert not is_done(run, 0, get_stage("pair")) and set(damaged(run, 0)) == {"pairings"}

    mark_success(run.gen(0), {})  # a complete generation: resume --recompute recomputes it in place
    with pytest.raises(DamagedArtifact, match=rf"populora resume {run.root} --recompute gen_0000/pairings"):
        run.read(0, "pairings")

    (run.gen(0) / SUCCESS).unlink()
    lines = remove_damaged(run, 0)
    assert len(lines) == 1 and "pairings.parquet" in lines[0] and "recomputing pair" in lines[0]
    assert not path.exists() and damaged(run, 0) == {}
