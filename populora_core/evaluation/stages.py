"""Held-out evaluation of a population snapshot, as resumable stages.

One stage per benchmark writes that benchmark's judged completions to
``eval/gen_NNNN/parts/<benchmark>-<settings>.parquet`` (skipped when the file
exists, so a killed evaluation continues where it stopped; other settings or data
never collide; delete the part, or the whole ``eval/gen_NNNN``, to judge again).
The table stage joins the parts into ``results.parquet``, ``pass_at_1.parquet``
and ``pass_at_1.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from populora_core.artifacts import write_parquet_atomic, write_text_atomic
from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.runner import DEFAULT_MAX_NEW_TOKENS, evaluate, pass_at_1
from populora_core.inference.base import BASE
from populora_core.runs import RunDir

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"
"""The public benchmark files beside the repository (``../shared/data``)."""


def settings_key(data_dir: Path, limit: int | None, max_new_tokens: int, include_base: bool) -> str:
    """Names a part by what it depends on, so other settings (or other data) never reuse it."""
    data = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:8]
    return f"n{limit or 'all'}-t{max_new_tokens}-{'base' if include_base else 'nobase'}-d{data}"


def evaluate_benchmark(
    run: RunDir,
    generation: int,
    benchmark: str,
    *,
    data_dir: Path = DEFAULT_DATA_DIR,
    limit: int | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    include_base: bool = True,
) -> dict:
    """Greedy pass@1 completions of the snapshot's adapters (and the base model) on one
    benchmark, judged (code in the sandbox); returns {path, rows, cached}."""
    from populora_core.runtime import get_runtime

    path = run.eval_part(generation, benchmark, settings_key(data_dir, limit, max_new_tokens, include_base))
    if path.is_file():
        return {"path": str(path), "rows": len(pd.read_parquet(path)), "cached": True}
    runtime = get_runtime(run.config(), run.model_path)
    served = run.adapter_dirs(generation)
    runtime.serve(served)
    items = load_benchmark(benchmark, Path(data_dir), limit)
    adapters = [*([BASE] if include_base else []), *served]
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
    """Joins the benchmark parts into results (adapter by adapter, as one batch over every
    benchmark would give them), the pass@1 table and its Markdown (all atomic)."""
    results = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    order = {a: i for i, a in enumerate(dict.fromkeys(results["adapter_id"]))}
    results = results.sort_values("adapter_id", key=lambda s: s.map(order), kind="stable", ignore_index=True)
    table = pass_at_1(results)
    out = run.eval_dir(generation)
    write_parquet_atomic(results, out / "results.parquet")
    write_parquet_atomic(table, out / "pass_at_1.parquet")
    markdown = f"# {run.run_id}: pass@1, population of generation {generation}\n\n" + markdown_table(table)
    write_text_atomic(markdown, out / "pass_at_1.md")
    return {"results": str(out / "results.parquet"), "pass_at_1": str(out / "pass_at_1.parquet"), "table": markdown}
