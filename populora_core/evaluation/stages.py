"""Held-out evaluation of a population snapshot, as resumable stages.

One stage per benchmark writes that benchmark's judged completions to
``eval/gen_NNNN/parts/<benchmark>-<settings>.parquet`` (skipped when the file
exists, so a killed evaluation continues where it stopped; other settings or data
never collide; delete the part, or the whole ``eval/gen_NNNN``, to judge again).
Within a benchmark, every ``CHUNK_ITEMS`` items (× every adapter, one batch plan) are
checkpointed in ``parts/<benchmark>-<settings>.chunks/`` until the part is whole, so a
kill costs at most one chunk.
The settings include the token cap actually used (the benchmark's default, or the
caller's). The table stage joins the parts into ``results.parquet``,
``pass_at_1.parquet`` (per benchmark), ``scores.parquet`` (per model, with the code
and math averages and the population rows) and ``pass_at_1.md``. The comparison
stage puts several runs' tables side by side in ``<first run>/eval/comparison.md``.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from populora_core.artifacts import read_parquet, write_parquet_atomic, write_text_atomic
from populora_core.evaluation.benchmarks import default_max_new_tokens, load_benchmark
from populora_core.evaluation.datasets import data_dir as default_data_dir
from populora_core.evaluation.paired import paired_markdown, paired_table, weakest_verdict
from populora_core.evaluation.runner import evaluate
from populora_core.evaluation.tables import (
    comparison,
    comparison_markdown,
    markdown_table,
    pass_at_1,
    scores_table,
)
from populora_core.inference.base import BASE
from populora_core.runs import RunDir

CHUNK_ITEMS = 16
"""Items per checkpoint of a benchmark's evaluation (each judged by every adapter)."""


def settings_key(
    data_dir: Path, limit: int | None, max_new_tokens: int, include_base: bool, chunk_items: int = CHUNK_ITEMS
) -> str:
    """Names a part by what it depends on, so other settings (or other data) never reuse it;
    the chunk size too, as it decides which completions share a batch."""
    data = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:8]
    return f"n{limit or 'all'}-t{max_new_tokens}-{'base' if include_base else 'nobase'}-c{chunk_items}-d{data}"


def _adapter_by_adapter(results: pd.DataFrame) -> pd.DataFrame:
    """``results``' rows grouped by adapter (in order of first appearance), each in its order."""
    order = {a: i for i, a in enumerate(dict.fromkeys(results["adapter_id"]))}
    return results.sort_values("adapter_id", key=lambda s: s.map(order), kind="stable", ignore_index=True)


def evaluate_benchmark(
    run: RunDir,
    generation: int,
    benchmark: str,
    *,
    data_dir: Path | None = None,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    include_base: bool = True,
    chunk_items: int = CHUNK_ITEMS,
) -> dict:
    """Greedy pass@1 completions of the snapshot's adapters (and the base model) on one
    benchmark, judged (code in the sandbox), at most ``max_new_tokens`` tokens each (None:
    the benchmark's default), ``chunk_items`` items at a time, each chunk kept until the
    part is whole; returns {path, rows, cached}."""
    from populora_core.engines import runtime_of

    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()  # evaluation.datasets
    max_new_tokens = max_new_tokens or default_max_new_tokens(benchmark)
    key = settings_key(data_dir, limit, max_new_tokens, include_base, chunk_items)
    path = run.eval_part(generation, benchmark, key)
    if path.is_file():
        return {"path": str(path), "rows": read_parquet(path).num_rows, "cached": True}
    items = load_benchmark(benchmark, Path(data_dir), limit)
    chunks = path.with_suffix(".chunks")
    starts = range(0, len(items), chunk_items)
    runtime, adapters, frames = None, [], []
    for k, start in enumerate(starts):
        chunk = chunks / f"items_{start:05d}.parquet"
        if chunk.is_file():
            frames.append(read_parquet(chunk).to_pandas())
            continue
        if runtime is None:  # the model is loaded only when a chunk is left to judge
            runtime = runtime_of(run.config(), run.model_path)
            served = run.adapter_dirs(generation)
            runtime.serve(served)
            adapters = [*([BASE] if include_base else []), *served]
        part = evaluate(
            runtime.backend,
            adapters,
            items[start : start + chunk_items],
            runtime.pool,
            max_new_tokens=max_new_tokens,
            progress=f"evaluate {benchmark} {k + 1}/{len(starts)}",
        )
        write_parquet_atomic(part, chunk)
        frames.append(part)
    results = _adapter_by_adapter(pd.concat(frames, ignore_index=True))
    write_parquet_atomic(results, path)
    shutil.rmtree(chunks, ignore_errors=True)
    return {"path": str(path), "rows": len(results), "cached": False}


def evaluation_table(run: RunDir, generation: int, parts: Sequence[str]) -> dict:
    """Joins the benchmark parts into results (adapter by adapter, as one batch over every
    benchmark would give them), the pass@1 tables and their Markdown (all atomic)."""
    results = _adapter_by_adapter(pd.concat([read_parquet(p).to_pandas() for p in parts], ignore_index=True))
    table = pass_at_1(results)
    out = run.eval_dir(generation)
    write_parquet_atomic(results, out / "results.parquet")
    write_parquet_atomic(table, out / "pass_at_1.parquet")
    write_parquet_atomic(scores_table(table).reset_index(), out / "scores.parquet")
    markdown = f"# {run.run_id}: pass@1, population of generation {generation}\n\n" + markdown_table(table)
    write_text_atomic(markdown, out / "pass_at_1.md")
    return {"results": str(out / "results.parquet"), "pass_at_1": str(out / "pass_at_1.parquet"), "table": markdown}


def comparison_table(runs: Sequence[tuple[RunDir, int]]) -> dict:
    """The population-versus-baseline table of several evaluated runs ((run, generation)
    pairs, each with its ``pass_at_1.parquet``), written to ``<first run>/eval/comparison.md``
    and ``comparison.parquet``; and their paired comparisons item by item (``paired``:
    differences with paired bootstrap intervals, McNemar p-values, the weakest member's
    verdict against each baseline) in ``paired.md`` and ``paired.parquet``."""
    tables, results, single = {}, {}, []
    for run, generation in runs:
        path = run.eval_dir(generation) / "pass_at_1.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{run.run_id} has no evaluation of generation {generation} ({path})")
        label = f"{run.run_id} gen {generation}"
        tables[label] = read_parquet(path).to_pandas()
        results[label] = read_parquet(run.eval_dir(generation) / "results.parquet").to_pandas()
        if run.config().population.single_agent:
            single.append(label)
    frame = comparison(tables)
    first = runs[0][0]
    out = first.root / "eval"
    write_parquet_atomic(frame.rename_axis("model").reset_index(), out / "comparison.parquet")
    title = "pass@1: population versus base model, " + ", ".join(tables)
    markdown = f"# {title}\n\n" + comparison_markdown(frame)
    write_text_atomic(markdown, out / "comparison.md")
    pairs = paired_table(results, single_agent=single)
    write_parquet_atomic(pairs, out / "paired.parquet")
    verdicts = [f"- {pair}: {verdict}" for pair, verdict in weakest_verdict(pairs).items()]
    paired = (
        f"# Paired comparisons, {', '.join(tables)}\n\n{paired_markdown(pairs)}\n\n"
        "The weakest member beats the baseline (over all items: its interval above 0 supports, "
        "below 0 contradicts, else cannot tell):\n\n" + ("\n".join(verdicts) or "- no population and baseline pair")
    )
    write_text_atomic(paired, out / "paired.md")
    return {"comparison": str(out / "comparison.md"), "paired": str(out / "paired.md"), "table": markdown}
