"""Wall-clock cost of a whole generation: a population over its single-agent baseline.

The PopuLoRA paper reports a population generation costing 1.31× a baseline generation
of the same total budget. Here: generation 0 of ``--preset`` (the population) and of
its baseline compute-matched on the **total** budget (``<preset>-baseline`` with
``baseline.matching=total``: the baseline proposes the teachers' proposals, solves the
students' problems and takes as many optimizer steps as the whole population), each
through the real generation flow (every stage, artifacts, ``_SUCCESS``), fresh runs,
alternating, ``--repeats`` times; the models are loaded and Prefect started before
timing. Per stage and in all. Final line: JSON with both medians and
``population_over_baseline`` (goal for comparison: the paper's 1.31).

    python benchmarks/generation_cost.py [--preset cpu-arms-race] [--repeats 1] [--matching total|per_adapter]
    python benchmarks/generation_cost.py --quick    # cpu-tiny, once each

``--matching`` names the definition the figure is under: ``total`` (the default here: the
paper's 1.31× compares generations of the same total budget) or ``per_adapter`` (the
definition every claim of this project uses; docs/runs.md#presets).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from populora_core.config import load_config
from populora_core.engine import runtime_of
from populora_core.run import create_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="cpu-arms-race")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="cpu-tiny and its baseline, one repeat")
    parser.add_argument(
        "--matching",
        choices=["total", "per_adapter"],
        default="total",
        help="the baseline's compute matching: total (the paper's cost figure: the same total budget) or "
        "per_adapter (the claims' definition: one member's work)",
    )
    args = parser.parse_args()
    if args.quick:
        args.preset, args.repeats = "cpu-tiny", 1

    from prefect import flow

    from benchmarks._flows import subflows_without_heartbeat
    from flows.generation import generation_flow

    configs = {
        "population": load_config(preset=args.preset),
        "baseline": load_config(preset=f"{args.preset}-baseline", overrides=[f"baseline.matching={args.matching}"]),
    }
    root = Path(tempfile.mkdtemp(prefix="populora-cost-"))
    for name, config in configs.items():  # models, trainer and sandbox built before timing
        run = create_run(root, config, run_id=f"warmup-{name}", preset=args.preset)
        runtime = runtime_of(config, run.model_path)
        _ = runtime.backend, runtime.trainer, runtime.pool
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    stages: dict[str, list[dict]] = {name: [] for name in configs}

    @flow(name="populora-generation-cost")
    def measure() -> None:
        with subflows_without_heartbeat():
            for i in range(args.repeats):
                for name, config in configs.items():
                    run = create_run(root, config, run_id=f"{name}-{i}", preset=args.preset)
                    run.centroids()
                    summary = generation_flow(str(run.root), 0)
                    seconds[name].append(summary["wall_seconds"])
                    stages[name].append(summary["stage_seconds"])
                    print(f"[{name} {i}] {summary['wall_seconds']:.1f} s", file=sys.stderr, flush=True)

    measure()
    median = {name: statistics.median(s) for name, s in seconds.items()}
    per_stage = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in stages.items()}
    print(
        json.dumps(
            {
                "preset": args.preset,
                "repeats": args.repeats,
                "population_s": round(median["population"], 2),
                "baseline_total_matched_s": round(median["baseline"], 2),
                "population_over_baseline": round(median["population"] / median["baseline"], 3),
                "stage_seconds": per_stage,
            }
        )
    )


if __name__ == "__main__":
    main()
