"""Held-out evaluation of a population snapshot, as resumable stages
(docs/evaluation.md#held-out-evaluation-populora-evaluate): one part per benchmark under
``eval/gen_NNNN/parts/`` (checkpointed a chunk at a time), the tables of a run's parts, and
the comparison of several runs in ``<first run>/eval/``.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from populora_core.evaluation import failure_tables, paired
from populora_core.evaluation.benchmarks import get_benchmark, load_benchmark
from populora_core.evaluation.datasets import data_dir as default_data_dir
from populora_core.evaluation.items import with_protocol
from populora_core.evaluation.pass_at_1 import RESULT_COLUMNS, evaluate
from populora_core.evaluation.tables import comparison, frame_markdown, pass_at_1, scores_table
from populora_core.inference.base import BASE
from populora_core.run import RunDir
from populora_core.rundir.artifacts import read_parquet, write_parquet_atomic, write_text_atomic
from populora_core.seams import EVAL_PART, seam

CHUNK_REQUESTS = 256
"""Completions per checkpoint of a benchmark's evaluation: ``chunk_items`` gives each chunk
this many items × models (at least 16 items): a kill on a CPU costs at most one chunk, and a
GPU engine still gets hundreds of requests per call."""


def chunk_items(models: int) -> int:
    """Items per chunk for ``models`` models (``CHUNK_REQUESTS``)."""
    return max(16, -(-CHUNK_REQUESTS // max(1, models)))


def settings_key(data_dir: Path, limit: int | None, max_new_tokens: int, include_base: bool, chunk: int) -> str:
    """Names a part by what it depends on, so other settings (or other data) never reuse it;
    the chunk size too, as it decides which completions share a batch."""
    data = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:8]
    # "-trained": the members as their last update left them (RunDir.trained_adapter_dirs);
    # parts without it served the snapshot, evolution's untrained children included
    return f"n{limit or 'all'}-t{max_new_tokens}-{'base' if include_base else 'nobase'}-c{chunk}-d{data}-trained"


def _adapter_by_adapter(results: pd.DataFrame) -> pd.DataFrame:
    """``results``' rows grouped by adapter (in order of first appearance), each in its order."""
    return results.sort_values("adapter_id", key=lambda s: s.factorize()[0], kind="stable", ignore_index=True)


def _judged_chunk(path: Path, adapters: Sequence[str], items: Sequence) -> pd.DataFrame | None:
    """The chunk at ``path`` if it holds exactly ``adapters`` × ``items`` (in that order);
    None when it is absent, or stale (other benchmark files or members: it is removed)."""
    if not path.is_file():
        return None
    frame = read_parquet(path).to_pandas()
    expected = [(a, i.item_id) for a in adapters for i in items]
    if list(zip(frame["adapter_id"], frame["item_id"], strict=True)) == expected:
        return frame
    path.unlink()
    return None


def evaluate_benchmark(
    run: RunDir,
    generation: int,
    benchmark: str,
    *,
    data_dir: Path | None = None,
    limit: int | None = None,
    max_new_tokens: int | None = None,
    include_base: bool = True,
    chunk: int | None = None,
    protocol: str = "standard",
) -> dict:
    """Greedy pass@1 completions of the trained population that generation ``generation``
    starts from (``RunDir.trained_adapter_dirs``) and of the base model on one
    benchmark, judged (code in the sandbox), at most ``max_new_tokens`` tokens each (None:
    the benchmark's default), ``chunk`` items at a time (None: ``chunk_items``), each chunk
    kept until the part is whole, asked under ``protocol`` (``items.PROTOCOLS``); returns
    {path, rows, cached}."""
    from populora_core.engine import runtime_of

    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()  # evaluation.datasets
    max_new_tokens = max_new_tokens or get_benchmark(benchmark).max_new_tokens
    served = run.trained_adapter_dirs(generation)  # not evolution's untrained children
    adapters = [*([BASE] if include_base else []), *served]
    chunk = chunk or chunk_items(len(adapters))
    key = settings_key(data_dir, limit, max_new_tokens, include_base, chunk)
    path = run.eval_part(generation, benchmark, key, protocol)
    chunks = path.with_suffix(".chunks")
    if path.is_file():
        shutil.rmtree(chunks, ignore_errors=True)  # left by a kill between the part and the cleanup
        return {"path": str(path), "rows": read_parquet(path).num_rows, "cached": True}
    items = [with_protocol(i, protocol) for i in load_benchmark(benchmark, Path(data_dir), limit)]
    starts = range(0, len(items), chunk)
    runtime, frames = None, []
    for k, start in enumerate(starts):
        these, at = items[start : start + chunk], chunks / f"items_{start:05d}.parquet"
        judged = _judged_chunk(at, adapters, these)
        if judged is None:
            if runtime is None:  # the model is loaded only when a chunk is left to judge
                runtime = runtime_of(run.config(), run.model_path)
                runtime.serve(served)
            label = f"evaluate {benchmark} {k + 1}/{len(starts)}"
            judged = evaluate(
                runtime.backend, adapters, these, runtime.pool, max_new_tokens=max_new_tokens, progress=label
            )
            write_parquet_atomic(judged, at)
        frames.append(judged)
    frames = frames or [pd.DataFrame(columns=RESULT_COLUMNS)]
    results = _adapter_by_adapter(pd.concat(frames, ignore_index=True))
    seam(EVAL_PART, path)
    write_parquet_atomic(results, path)
    shutil.rmtree(chunks, ignore_errors=True)
    return {"path": str(path), "rows": len(results), "cached": False}


FAILURES_INTRO = (
    "Why answers failed: answers per class (docs/evaluation.md#failure-classes); `format` sums "
    "the classes of the answer's form, `code` those of code that ran and was wrong:"
)


def evaluation_table(run: RunDir, generation: int, parts: Sequence[str], protocol: str = "standard") -> dict:
    """Joins the benchmark parts into results (adapter by adapter, as one batch over every
    benchmark would give them), the pass@1 tables and their Markdown (all atomic)."""
    results = _adapter_by_adapter(pd.concat([read_parquet(p).to_pandas() for p in parts], ignore_index=True))
    table = pass_at_1(results)
    out = run.eval_dir(generation, protocol)
    write_parquet_atomic(results, out / "results.parquet")
    write_parquet_atomic(table, out / "pass_at_1.parquet")
    scores = scores_table(table)
    write_parquet_atomic(scores.reset_index(), out / "scores.parquet")
    counts = failure_tables.class_counts(results)
    write_parquet_atomic(counts.reset_index(), out / "failures.parquet")
    markdown = (
        f"# {run.run_id}: pass@1, population of generation {generation}{protocol_title(protocol)}\n\n"
        f"{frame_markdown(scores, 'adapter')}\n\n"
        f"{FAILURES_INTRO}\n\n{failure_tables.counts_markdown(counts, {BASE: 'base model'})}"
    )
    write_text_atomic(markdown, out / "pass_at_1.md")
    return {"results": str(out / "results.parquet"), "pass_at_1": str(out / "pass_at_1.parquet"), "table": markdown}


def protocol_title(protocol: str) -> str:
    return "" if protocol == "standard" else f", {protocol} protocol (docs/evaluation.md#protocols)"


def paired_report(
    results: dict[str, pd.DataFrame], single_agent: Sequence[str], title: str
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """``paired.md`` of ``results`` (run label -> its ``results``; the first run's base model is
    the base): the paired differences, the flipped items' classes, and the Markdown."""
    pairs = paired.paired_table(results, single_agent=single_agent)
    verdicts = [f"- {pair}: {verdict}" for pair, verdict in paired.weakest_verdict(pairs).items()]
    flips = failure_tables.flip_table(pairs, failure_tables.model_failures(results))
    intervals = paired.intervals_markdown(paired.model_intervals(results))
    markdown = (
        f"# Paired comparisons, {title}\n\n"
        f"pass@1 of every model [95% Wilson interval]:\n\n{intervals}\n\n"
        f"Item by item:\n\n{paired.paired_markdown(pairs)}\n\n"
        "The weakest member beats the baseline (over all items: its interval above 0 supports, "
        "below 0 contradicts, else cannot tell):\n\n"
        + ("\n".join(verdicts) or "- no population and baseline pair")
        + f"\n\n{FAILURES_INTRO}\n\n{failure_tables.counts_markdown(failure_tables.runs_counts(results))}\n\n"
        "Where the differences come from: A − B split into its format and code parts (they sum to it, "
        "but for sandbox failures and unclassified rows), and the classes of the items only one "
        f"of the two passed:\n\n{failure_tables.flips_markdown(flips)}"
    )
    return pairs, flips, markdown


def comparison_table(runs: Sequence[tuple[RunDir, int]], protocol: str = "standard") -> dict:
    """The population-versus-baseline table of several evaluated runs ((run, generation)
    pairs, each with its ``pass_at_1.parquet``) in ``<first run>/eval/comparison.{md,parquet}``,
    and ``paired_report``'s in ``paired.md``, ``paired.parquet`` and ``paired_failures.parquet``."""
    tables, results, single = {}, {}, []
    for run, generation in runs:
        path = run.eval_dir(generation, protocol) / "pass_at_1.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{run.run_id} has no evaluation of generation {generation} ({path})")
        label = f"{run.run_id} gen {generation}"
        tables[label] = read_parquet(path).to_pandas()
        results[label] = read_parquet(run.eval_dir(generation, protocol) / "results.parquet").to_pandas()
        if run.config().population.single_agent:
            single.append(label)
    frame = comparison(tables)
    out = runs[0][0].comparison_dir(protocol)  # the first run's
    write_parquet_atomic(frame.rename_axis("model").reset_index(), out / "comparison.parquet")
    title = "pass@1: population versus base model, " + ", ".join(tables) + protocol_title(protocol)
    markdown = f"# {title}\n\n" + frame_markdown(frame, "model")
    write_text_atomic(markdown, out / "comparison.md")
    pairs, flips, paired_md = paired_report(results, single, f"{', '.join(tables)}{protocol_title(protocol)}")
    write_parquet_atomic(pairs, out / "paired.parquet")
    write_parquet_atomic(flips, out / "paired_failures.parquet")
    write_text_atomic(paired_md, out / "paired.md")
    return {"comparison": str(out / "comparison.md"), "paired": str(out / "paired.md"), "table": markdown}
