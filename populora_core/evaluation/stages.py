"""Held-out evaluation of a population snapshot, as resumable stages.

One stage per benchmark writes that benchmark's judged completions to
``eval/gen_NNNN/parts/<benchmark>-<settings>.parquet`` (skipped when the file
exists, so a killed evaluation continues where it stopped, and other settings
never collide); the table stage joins the parts into ``results.parquet``,
``pass_at_1.parquet`` and ``pass_at_1.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from populora_core.artifacts import write_parquet_atomic, write_text_atomic
from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.runner import evaluate, pass_at_1
from populora_core.inference.base import BASE
from populora_core.runs import RunDir

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"
"""The public benchmark files beside the repository (``../shared/data``)."""


def settings_key(limit: int | None, max_new_tokens: int, include_base: bool) -> str:
    return f"n{limit or 'all'}-t{max_new_tokens}-{'base' if include_base else 'nobase'}"


def part_path(run: RunDir, generation: int, benchmark: str, key: str) -> Path:
    return run.eval_dir(generation) / "parts" / f"{benchmark}-{key}.parquet"


def evaluate_benchmark(
    run: RunDir,
    generation: int,
    benchmark: str,
    *,
    data_dir: Path = DEFAULT_DATA_DIR,
    limit: int | None = None,
    max_new_tokens: int = 512,
    include_base: bool = True,
) -> dict:
    """Greedy pass@1 completions of the snapshot's adapters (and the base model) on one
    benchmark, judged (code in the sandbox); returns {path, rows, cached}."""
    from populora_core.runtime import get_runtime

    path = part_path(run, generation, benchmark, settings_key(limit, max_new_tokens, include_base))
    if path.is_file():
        return {"path": str(path), "rows": len(pd.read_parquet(path)), "cached": True}
    members = run.members(generation)
    runtime = get_runtime(run.config(), run.model_path)
    runtime.serve({m.adapter_id: run.members_dir(generation) / m.adapter_id for m in members})
    items = load_benchmark(benchmark, Path(data_dir), limit)
    adapters = [*([BASE] if include_base else []), *(m.adapter_id for m in members)]
    results = evaluate(runtime.backend, adapters, items, runtime.pool, max_new_tokens=max_new_tokens)
    write_parquet_atomic(results, path)
    return {"path": str(path), "rows": len(results), "cached": False}


def markdown_table(table: pd.DataFrame) -> str:
    """pass@1 as a Markdown table: one row per adapter, one column per benchmark."""
    wide = table.pivot(index="adapter_id", columns="benchmark", values="pass@1")
    lines = ["| adapter | " + " | ".join(wide.columns) + " |", "|---" * (len(wide.columns) + 1) + "|"]
    for adapter_id, row in wide.iterrows():
        lines.append(f"| {adapter_id} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    return "\n".join(lines)


def evaluation_table(run: RunDir, generation: int, parts: Sequence[str]) -> dict:
    """Joins the benchmark parts into results, pass@1 table and its Markdown (all atomic)."""
    results = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    table = pass_at_1(results)
    out = run.eval_dir(generation)
    write_parquet_atomic(results, out / "results.parquet")
    write_parquet_atomic(table, out / "pass_at_1.parquet")
    markdown = f"# {run.run_id}: pass@1, population of generation {generation}\n\n" + markdown_table(table)
    write_text_atomic(markdown, out / "pass_at_1.md")
    return {"results": str(out / "results.parquet"), "pass_at_1": str(out / "pass_at_1.parquet"), "table": markdown}
