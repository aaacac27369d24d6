"""Prefect tasks of the held-out evaluation: one per benchmark, then the table, then
(for several runs) the comparison."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from populora_core.evaluation import pipeline
from populora_core.evaluation.benchmarks import BENCHMARKS, has_data
from populora_core.evaluation.datasets import data_dir as default_data_dir
from populora_core.run import open_run
from tasks.ui import artifact_key

__all__ = [
    "BENCHMARKS",
    "default_data_dir",
    "evaluate_benchmark",
    "evaluation_comparison",
    "evaluation_table",
    "has_data",
]  # the flow's defaults


@task(name="evaluate-benchmark", task_run_name="eval-{benchmark}-gen{generation}", cache_policy=NO_CACHE)
def evaluate_benchmark(
    run_dir: str,
    generation: int,
    benchmark: str,
    data_dir: str,
    limit: int | None,
    max_new_tokens: int | None,
    base: bool,
    protocol: str = "standard",
) -> dict:
    """pass@1 completions of one benchmark (``max_new_tokens`` None: the benchmark's cap),
    judged; skipped when its part exists."""
    return pipeline.evaluate_benchmark(
        open_run(run_dir),
        generation,
        benchmark,
        data_dir=Path(data_dir),
        limit=limit,
        max_new_tokens=max_new_tokens,
        include_base=base,
        protocol=protocol,
    )


@task(name="evaluation-table", task_run_name="eval-table-gen{generation}", cache_policy=NO_CACHE)
def evaluation_table(run_dir: str, generation: int, parts: list[str], protocol: str = "standard") -> dict:
    """The pass@1 table of the benchmarks' parts, written and published in the UI."""
    from prefect.artifacts import create_markdown_artifact

    run = open_run(run_dir)
    out = pipeline.evaluation_table(run, generation, parts, protocol)
    suffix = "-eval" if protocol == "standard" else f"-eval-{protocol}"
    create_markdown_artifact(key=artifact_key(run.run_id, generation, suffix), markdown=out["table"])
    return out


@task(name="evaluation-comparison", cache_policy=NO_CACHE)
def evaluation_comparison(runs: list[tuple[str, int]], protocol: str = "standard") -> dict:
    """Population versus base model over several evaluated runs, written beside the first
    run's evaluations and published in the UI."""
    from prefect.artifacts import create_markdown_artifact

    opened = [(open_run(run_dir), generation) for run_dir, generation in runs]
    out = pipeline.comparison_table(opened, protocol)
    first, generation = opened[0]
    suffix = "-eval-comparison" if protocol == "standard" else f"-eval-comparison-{protocol}"
    create_markdown_artifact(key=artifact_key(first.run_id, generation, suffix), markdown=out["table"])
    return out
