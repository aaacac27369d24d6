"""Creating and listing runs: typed snapshots, portable adapters, killed builds cleaned up.

The base model here is a local directory holding only a tiny ``config.json``: creating a
run sizes the adapters from it and never loads weights.
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from populora_core.config import load_config
from populora_core.metrics.coverage import DESCRIPTOR_NAMES
from populora_core.models import checkpoint_digest
from populora_core.run import RunDir, create_run, list_runs
from populora_core.rundir.artifacts import TMP_MARK, full_schema, schema_difference
from populora_core.rundir.storage import STALE_BUILD_S
from tests.helpers import TINY_QWEN2


@pytest.fixture
def local_model(tmp_path, monkeypatch):
    """``./tiny``, relative to the working directory, as a user may name it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(TINY_QWEN2))
    return "./tiny"


def _age(path, seconds: float) -> None:
    old = time.time() - seconds
    for p in (path, *path.rglob("*")):
        os.utime(p, (old, old))


def test_a_created_run_has_typed_snapshot_and_centroids_and_portable_adapters(tmp_path, local_model):
    config = load_config(preset="cpu-tiny", overrides=[f"model.name={local_model}"])
    run = create_run(tmp_path / "runs", config, run_id="r1")
    snapshot = run.members_dir(0) / "population.parquet"
    assert schema_difference(snapshot) is None
    assert pq.read_schema(snapshot).field("parents").type == pa.list_(pa.string())  # not list<null>
    frame = run.members_frame(0)
    assert set(frame["run_id"]) == {"r1"} and set(frame["generation"]) == {0}
    assert len(run.members(0)) == config.population.teachers + config.population.students
    for adapter_dir in run.adapter_dirs(0).values():
        cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
        assert cfg["base_model_name_or_path"] == local_model  # as the user gave it
    # the run records the model: its public name, where it was loaded from, its checkpoint's sha256
    info = run.info()
    assert info["model"] == local_model and info["model_path"].endswith("tiny")
    assert info["model_sha256"] == checkpoint_digest(run.model_path) and len(info["model_sha256"]) == 64
    (run.model_path / "config.json").write_text(json.dumps({**TINY_QWEN2, "note": "changed"}))
    assert checkpoint_digest(run.model_path) != info["model_sha256"]  # the cached digest is not stale

    centroids = run.centroids()
    assert schema_difference(run.centroids_file) is None
    stored = pd.read_parquet(run.centroids_file)
    assert set(stored["run_id"]) == {"r1"} and set(stored["generation"]) == {0}
    assert centroids.dtype == np.float64 and np.array_equal(centroids, stored[list(DESCRIPTOR_NAMES)].to_numpy())


def test_snapshot_and_centroids_of_runs_older_than_their_schemas_still_read(tmp_path, local_model):
    config = load_config(preset="cpu-tiny", overrides=[f"model.name={local_model}"])
    run = create_run(tmp_path / "runs", config, run_id="old")
    members, centroids = run.members(0), run.centroids()
    # as written before: no meta columns, int64 generation, empty parents typed list<null>
    old = run.members_frame(0).drop(columns=["run_id", "schema_version"]).assign(parents=[[]] * len(members))
    pq.write_table(pa.Table.from_pandas(old, preserve_index=False), run.members_dir(0) / "population.parquet")
    assert pq.read_schema(run.members_dir(0) / "population.parquet").field("parents").type == pa.list_(pa.null())
    pd.DataFrame(centroids, columns=list(DESCRIPTOR_NAMES)).to_parquet(run.centroids_file, index=False)
    assert run.members(0) == members
    assert np.array_equal(RunDir(run.root).centroids(), centroids)
    assert not full_schema("population").equals(pq.read_schema(run.members_dir(0) / "population.parquet"))


def test_create_and_list_remove_what_killed_builds_left_but_not_a_build_in_progress(tmp_path, local_model):
    runs = tmp_path / "runs"
    killed = runs / f".killed{TMP_MARK}0badc0de"
    (killed / "population" / "gen_0000").mkdir(parents=True)
    _age(killed, STALE_BUILD_S + 60)
    building = runs / f".building{TMP_MARK}12345678"  # another process writing right now
    building.mkdir()
    config = load_config(preset="cpu-tiny", overrides=[f"model.name={local_model}"])
    run = create_run(runs, config, run_id="r1")
    assert not killed.exists() and building.is_dir()
    assert [r.root for r in list_runs(runs)] == [run.root] and building.is_dir()
    _age(building, STALE_BUILD_S + 60)
    assert [r.root for r in list_runs(runs)] == [run.root]
    assert sorted(p.name for p in runs.iterdir()) == ["r1"]


def test_a_new_run_takes_the_placement_and_a_refused_config_writes_nothing(tmp_path, local_model):
    """``new_run``: settings → one config (the placement a dict, never `--set` text) → one run;
    ``find_run``/``open_run`` by path or by id."""
    from populora_core.config import ConfigError
    from populora_core.run import find_run, new_run, open_run

    runs, sets = tmp_path / "runs", [f"model.name={local_model}", "cluster.address='auto'"]
    seen = []
    run = new_run(runs, preset="cpu-tiny", overrides=sets, cluster={"engine": "ray"}, run_id="r1", check=seen.append)
    assert (run.config().cluster.engine, run.config().cluster.address) == ("ray", "auto")
    assert seen == [run.config()] and run.info()["preset"] == "cpu-tiny"

    def refuse(config) -> None:
        raise ConfigError("does not fit")

    with pytest.raises(ConfigError, match="does not fit"):
        new_run(runs, preset="cpu-tiny", overrides=sets[:1], run_id="r2", check=refuse)
    assert sorted(p.name for p in runs.iterdir()) == ["r1"]
    assert find_run("r1", runs).root == find_run(run.root).root == open_run("r1", runs).root == run.root
    assert find_run("r2", runs) is None
    with pytest.raises(ConfigError, match="no run at r2"):
        open_run("r2", runs)


def test_evaluation_serves_the_trained_population_not_evolutions_new_children(tmp_path, local_model):
    """After an evolution round the next snapshot holds children never trained; held-out
    evaluation serves the members as their last update left them (gen_N/updated/)."""
    from populora_core.population.adapters import Member, load_adapter, save_adapter, save_population

    config = load_config(preset="cpu-tiny", overrides=[f"model.name={local_model}"])
    run = create_run(tmp_path / "runs", config, run_id="r1")
    members = run.members(0)
    adapters = {m.adapter_id: load_adapter(run.members_dir(0) / m.adapter_id) for m in members}
    for m in members:
        save_adapter(adapters[m.adapter_id], run.updated(0) / m.adapter_id)
    culled, child = members[0], f"{members[0].role}-g0001-0"
    nxt = [
        m if m is not culled else Member(child, m.role, 1, m.mu, m.sigma, (members[1].adapter_id,), "M4")
        for m in members
    ]
    save_population(
        run.members_dir(1), 1, nxt, {**adapters, child: adapters[culled.adapter_id]}, link_from=run.updated(0)
    )
    served = run.trained_adapter_dirs(1)
    assert child in run.adapter_dirs(1) and child not in served
    assert set(served) == {m.adapter_id for m in members}
    assert all(path.parent == run.updated(0) for path in served.values())
    assert run.trained_adapter_dirs(0) == run.adapter_dirs(0)
