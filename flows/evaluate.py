"""Held-out evaluation as Prefect flows: one task per benchmark (a retried or resumed
flow skips the benchmarks already judged), then the pass@1 table; for several runs,
each run so, then the population-versus-baseline comparison."""

from __future__ import annotations

from prefect import flow

from populora_core.run import default_runs_dir, open_run
from tasks.evaluate import (
    BENCHMARKS,
    default_data_dir,
    evaluate_benchmark,
    evaluation_comparison,
    evaluation_table,
    has_data,
)


@flow(name="populora-evaluate")
def evaluate_flow(
    run_dir: str,
    generation: int | None = None,
    benchmarks: list[str] | None = None,
    limit: int | None = None,
    data_dir: str | None = None,
    max_new_tokens: int | None = None,
    include_base: bool = True,
    protocol: str = "standard",
) -> dict:
    """pass@1 (greedy) on ``benchmarks`` (default: every one whose files are in ``data_dir``)
    of the population that generation ``generation`` produced (default: the latest), and
    of the base model; each answer capped at ``max_new_tokens`` tokens (default: the
    benchmark's own cap), asked under ``protocol`` ("standard", or "trained": the format the
    adapters were trained on; docs/evaluation.md#protocols); results under ``<run>/eval/``."""
    run = open_run(run_dir, default_runs_dir())
    generation = run.next_generation() if generation is None else generation
    data = data_dir or str(default_data_dir())
    chosen = benchmarks or [b for b in BENCHMARKS if has_data(b, data)]
    if not chosen:
        raise ValueError(f"no benchmark files in {data} (data_dir): fetch them with `populora data download`")
    parts = [
        evaluate_benchmark(str(run.root), generation, b, data, limit, max_new_tokens, include_base, protocol)["path"]
        for b in chosen
    ]
    out = evaluation_table(str(run.root), generation, parts, protocol)
    return {**out, "run_dir": str(run.root), "generation": generation}


@flow(name="populora-evaluate-runs")
def evaluate_runs_flow(
    run_dirs: list[str],
    generation: int | None = None,
    benchmarks: list[str] | None = None,
    limit: int | None = None,
    data_dir: str | None = None,
    max_new_tokens: int | None = None,
    include_base: bool = True,
    protocol: str = "standard",
) -> dict:
    """``evaluate_flow`` for every run (the base model with the first only: the runs must
    share it), then one table of each run's population mean and weakest member beside
    the base model, in ``<first run>/eval/comparison.md``."""
    runs = [open_run(r, default_runs_dir()) for r in run_dirs]
    models = {str(run.model_path) for run in runs}
    if len(models) > 1:
        raise ValueError(f"the runs have different base models ({', '.join(sorted(models))}); compare runs of one")
    tables = [
        evaluate_flow(
            str(run.root), generation, benchmarks, limit, data_dir, max_new_tokens, include_base and k == 0, protocol
        )
        for k, run in enumerate(runs)
    ]
    comparison = evaluation_comparison([(t["run_dir"], t["generation"]) for t in tables], protocol)
    return {"runs": tables, **comparison}
