"""A run's files mean the same thing outside it: every artifact kind reads as one table
across generations and runs (one duckdb glob each), and its adapters name their base
model by hub id, loadable by PEFT anywhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from populora_core.run import RunDir
from populora_core.rundir.artifacts import RUN_SCHEMAS, SCHEMA_VERSION, SCHEMAS

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what embedded:smollm2-135m-instruct was made from


def pattern(kind: str) -> str:
    """Where a run keeps the files of artifact ``kind``, as a glob under its root."""
    return {
        "population": "population/gen_*/population.parquet",
        "hall": "population/gen_*/hall.parquet",
        "cvt_centroids": "cvt_centroids.parquet",
    }.get(kind, f"gen_*/{kind}.parquet")


def expected_rows(run: RunDir, kind: str) -> dict[tuple[str, int], int]:
    """(run id, generation) → rows, from the files themselves (empty files add nothing)."""
    files = sorted(run.root.glob(pattern(kind)))
    done = len(run.complete_generations())
    # the hall of fame: in every snapshot after the first replacement round (k = 1), none for a single agent
    hall = 0 if run.config().population.single_agent else done
    wanted = {"population": done + 1, "cvt_centroids": 1, "hall": hall}
    assert len(files) == wanted.get(kind, done), (run.run_id, kind)
    rows = {}
    for path in files:
        generation = 0 if kind == "cvt_centroids" else int(path.parent.name.removeprefix("gen_"))
        if n := pq.read_metadata(path).num_rows:
            rows[(run.run_id, generation)] = n
    return rows


def test_every_artifact_kind_reads_as_one_table_across_generations_and_runs(reference_run, baseline_run):
    runs = (reference_run, baseline_run)
    con = duckdb.connect()
    for kind in [*SCHEMAS, *RUN_SCHEMAS]:
        having = [run for run in runs if list(run.root.glob(pattern(kind)))]  # the baseline has no hall of fame
        source = "read_parquet([{}])".format(", ".join(f"'{run.root}/{pattern(kind)}'" for run in having))
        types = {row[0]: row[1] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
        assert (types["run_id"], types["generation"], types["schema_version"]) == ("VARCHAR", "INTEGER", "SMALLINT"), (
            kind,
            types,
        )
        query = f"SELECT run_id, generation, schema_version, count(*) FROM {source} GROUP BY ALL"
        seen = con.execute(query).fetchall()
        expected = expected_rows(reference_run, kind) | expected_rows(baseline_run, kind)
        assert {(r, g): n for r, g, _, n in seen} == expected, kind
        assert {v for _, _, v, _ in seen} == ({SCHEMA_VERSION} if expected else set()), kind
        # the baseline has nobody to replace: its lineage is empty; cpu-tiny does not probe
        # (probe.items 0: its model answers nothing), its probes files are empty, typed
        if kind not in ("lineage", "probes", "hall"):
            assert {r for r, _ in expected} == {"reference", "baseline"}, kind


def test_adapters_name_their_base_by_hub_id_and_load_in_peft(reference_run, tmp_path):
    from peft import LoraConfig, PeftModel

    from populora_core.models import load_model

    configs = sorted(reference_run.root.rglob("adapter_config.json"))
    # written by create_run (population/gen_0000), the update (gen_N/updated) and evolution
    assert {p.relative_to(reference_run.root).parts[0] for p in configs} == {"population", "gen_0000", "gen_0001"}
    assert any(p.parent.parent.name == "gen_0002" for p in configs)

    def strings(value) -> list[str]:
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    for path in configs:
        cfg = json.loads(path.read_text())
        assert cfg["base_model_name_or_path"] == SMOLLM2, path
        assert not [s for s in strings(cfg) if Path(s).is_absolute() or s.startswith("~")], path
    # plain peft loads an adapter from a copy of the run directory on another path
    copy = tmp_path / "elsewhere" / "copied-run"
    shutil.copytree(reference_run.root, copy)
    adapter = copy / configs[0].parent.relative_to(reference_run.root)
    assert LoraConfig.from_pretrained(str(adapter)).base_model_name_or_path == SMOLLM2
    model, _ = load_model(reference_run.model_path, dtype="float32")
    peft_model = PeftModel.from_pretrained(model, str(adapter))
    assert peft_model.peft_config["default"].base_model_name_or_path == SMOLLM2
