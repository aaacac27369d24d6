"""Held-out evaluation as a Prefect flow: pass@1 of the base model and of a generation's adapters."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows.generation import artifact_key
from populora_core.artifacts import write_parquet_atomic
from populora_core.evaluation.benchmarks import BENCHMARKS, load_benchmark
from populora_core.evaluation.runner import evaluate, pass_at_1
from populora_core.inference.base import BASE
from populora_core.population.adapters import POPULATION_TABLE, members_from_frame
from populora_core.runs import default_runs_dir, open_run, run_config
from populora_core.runtime import get_runtime

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def markdown_table(table) -> str:
    """pass@1 as a Markdown table: one row per adapter, one column per benchmark."""
    wide = table.pivot(index="adapter_id", columns="benchmark", values="pass@1")
    lines = ["| adapter | " + " | ".join(wide.columns) + " |", "|---" * (len(wide.columns) + 1) + "|"]
    for adapter_id, row in wide.iterrows():
        lines.append(f"| {adapter_id} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return "\n".join(lines)


@flow(name="populora-evaluate")
def evaluate_flow(
    run_dir: str,
    generation: int | None = None,
    benchmarks: list[str] | None = None,
    limit: int | None = None,
    data_dir: str | None = None,
    max_new_tokens: int = 512,
    include_base: bool = True,
) -> dict:
    """pass@1 (greedy) on ``benchmarks`` of the population that generation ``generation``
    produced (default: the latest), and of the base model; results under ``<run>/eval/``."""
    import pandas as pd

    run = open_run(run_dir, default_runs_dir())
    config = run_config(run)
    if generation is None:
        generation = run.next_generation()  # the newest population snapshot
    members_dir = run.members_dir(generation)
    members = members_from_frame(pd.read_parquet(members_dir / POPULATION_TABLE))
    runtime = get_runtime(config, Path(run.info()["model_path"]))
    runtime.serve({m.adapter_id: members_dir / m.adapter_id for m in members})
    items = [
        i for b in (benchmarks or BENCHMARKS) for i in load_benchmark(b, Path(data_dir or DEFAULT_DATA_DIR), limit)
    ]
    adapters = [*([BASE] if include_base else []), *(m.adapter_id for m in members)]
    results = evaluate(runtime.backend, adapters, items, runtime.pool, max_new_tokens=max_new_tokens)
    table = pass_at_1(results)
    out = run.root / "eval" / f"gen_{generation:04d}"
    write_parquet_atomic(results, out / "results.parquet")
    write_parquet_atomic(table, out / "pass_at_1.parquet")
    markdown = f"# {run.run_id}: pass@1, population of generation {generation}\n\n" + markdown_table(table)
    (out / "pass_at_1.md").write_text(markdown)
    create_markdown_artifact(key=artifact_key(run.run_id, generation) + "-eval", markdown=markdown)
    return {"results": str(out / "results.parquet"), "pass_at_1": str(out / "pass_at_1.parquet"), "table": markdown}
