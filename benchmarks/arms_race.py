"""Population versus single-agent baseline: the experiment of the PopuLoRA paper, on the CPU.

Trains ``--preset`` (default cpu-arms-race: 2 teachers + 2 students) and its compute-matched
baseline (``<preset>-baseline``: one adapter proposing and solving) generation by
generation, alternating, so both have the same number of generations whenever it is
stopped; then writes the comparison report (``populora analyze`` of both). Long: not in CI.
Re-running with the same ``--out`` continues both runs. Final line: JSON with each
run's headline figures (solve-rate trend, complexity slopes, coverage) and the median
wall-clock of a generation of each (goal: population + baseline ≤ ~6 min on 2 cores).

    python benchmarks/arms_race.py --generations 30 [--preset cpu-arms-race] [--out runs/arms-race]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow

from flows.generation import generation_flow
from flows.train import subflows_without_heartbeat
from populora_core.analysis.data import headline, load_run
from populora_core.analysis.report import write_report
from populora_core.config import load_config
from populora_core.runs import RunDir, create_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--preset", default="cpu-arms-race")
    parser.add_argument("--out", default="runs/arms-race")
    args = parser.parse_args()

    out = Path(args.out)
    runs = {}
    for name in (args.preset, f"{args.preset}-baseline"):
        existing = RunDir(out / name)
        if existing.exists():
            runs[name] = existing
        else:
            config = load_config(preset=name, overrides=[f"generations={args.generations}"])
            runs[name] = create_run(out, config, run_id=name, preset=name)

    @flow(name="populora-arms-race")
    def arms_race() -> None:
        with subflows_without_heartbeat():
            for g in range(args.generations):
                for name, run in runs.items():
                    if g not in run.complete_generations():
                        print(f"[{name}] ", end="", flush=True)
                        generation_flow(str(run.root), g)

    arms_race()
    data = [load_run(run.root, label=name) for name, run in runs.items()]
    written = write_report(data, out / "report")
    print(f"report: {written['html']}", file=sys.stderr)
    seconds = {d.label: float(d.summaries["wall_seconds"].median()) for d in data}
    print(
        json.dumps(
            {
                "report": str(written["html"]),
                "median_generation_s": seconds,
                "population_plus_baseline_s": sum(seconds.values()),
                "runs": [headline(d) for d in data],
            }
        )
    )


if __name__ == "__main__":
    main()
