"""Held-out evaluation as a Prefect flow: one task per benchmark (a retried or resumed
flow skips the benchmarks already judged), then the pass@1 table."""

from __future__ import annotations

from prefect import flow

from populora_core.runs import default_runs_dir, open_run
from tasks.evaluate import BENCHMARKS, DEFAULT_DATA_DIR, DEFAULT_MAX_NEW_TOKENS, evaluate_benchmark, evaluation_table


@flow(name="populora-evaluate")
def evaluate_flow(
    run_dir: str,
    generation: int | None = None,
    benchmarks: list[str] | None = None,
    limit: int | None = None,
    data_dir: str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    include_base: bool = True,
) -> dict:
    """pass@1 (greedy) on ``benchmarks`` of the population that generation ``generation``
    produced (default: the latest), and of the base model; results under ``<run>/eval/``."""
    run = open_run(run_dir, default_runs_dir())
    generation = run.next_generation() if generation is None else generation
    data = data_dir or str(DEFAULT_DATA_DIR)
    parts = [
        evaluate_benchmark(str(run.root), generation, b, data, limit, max_new_tokens, include_base)["path"]
        for b in benchmarks or BENCHMARKS
    ]
    return evaluation_table(str(run.root), generation, parts)
