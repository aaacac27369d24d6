"""What Prefect and the Parquet artifacts cost: one cpu-tiny generation two ways.

- flow: ``flows.generation.generation_flow`` as the train flow runs it (a subflow,
  ``flows.train.train_flow``) — a Prefect task per stage, ``prepare`` and ``finish``, every
  artifact written and read back as Parquet, the UI table published, ``_SUCCESS``
  written;
- direct: the stage table's functions called in order in one process, frames
  handed over in memory, no Prefect and no artifacts (the update and evolve stages
  still write adapters into the run's directories, as the flow does).

Both run the same generation 0 of fresh runs with the same config and seed (so the
same samples, the same programs, the same updates), alternating, ``--repeats``
times each; the model, trainer and sandbox pool are built once beforehand and
Prefect's API is started by a warm-up flow (both reported separately: they are paid
once per process, not per generation). The direct path's frames are checked equal
to the flow's artifacts. Final line: JSON with both median wall-clocks and
``overhead_ratio`` (flow / direct). Goal: ≤ 1.03.

    python benchmarks/orchestration_overhead.py [--repeats 7] [--preset cpu-tiny] [--quick]

--quick: one repeat (the same as ``--repeats 1``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd

from populora_core.config import RunConfig, load_config
from populora_core.engine import runtime_of
from populora_core.engine.runtime import Runtime
from populora_core.run import RunDir, create_run
from populora_core.rundir.artifacts import read_artifact
from populora_core.stages import runner, table


def direct_generation(run: RunDir, runtime: Runtime, config: RunConfig) -> dict[str, pd.DataFrame]:
    """Generation 0 of ``run``: the stage table's functions called in order, frames handed
    over in memory (adapters still go to the run's directories); returns the frames."""
    runtime.serve(run.adapter_dirs(0))
    frames: dict[str, pd.DataFrame] = {}
    for stage in table.TABLE:
        kwargs = {i: runner.INPUTS[i](run, 0) if i in runner.INPUTS else frames[i] for i in stage.inputs}
        kwargs |= {n: getattr(runtime, n) for n in stage.needs}
        out = stage.fn(**kwargs, config=config, generation=0)
        frames |= dict(zip(stage.outputs, (out,) if len(stage.outputs) == 1 else out, strict=True))
    return frames


def same_results(direct: dict[str, pd.DataFrame], run: RunDir) -> bool:
    timing = {"verdicts": ["seconds"], "train_metrics": ["seconds"]}
    for name, frame in direct.items():
        stored = read_artifact(run.gen(0), name).drop(columns=["run_id", "generation", "schema_version"])
        drop = timing.get(name, [])
        a = frame.drop(columns=drop).reset_index(drop=True)
        b = stored.drop(columns=drop).reset_index(drop=True)
        try:
            pd.testing.assert_frame_equal(a, b, check_dtype=False)
        except AssertionError as exc:
            print(f"{name} differs: {str(exc)[:300]}", file=sys.stderr)
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--preset", default="cpu-tiny")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds of idle before each pair of runs")
    parser.add_argument("--quick", action="store_true", help="one repeat")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1

    from prefect import flow

    from benchmarks._flows import subflows_without_heartbeat
    from flows.generation import generation_flow

    config = load_config(preset=args.preset)
    root = Path(tempfile.mkdtemp(prefix="populora-bench-"))
    t0 = time.perf_counter()
    first = create_run(root, config, run_id="warmup", preset=args.preset)
    runtime = runtime_of(config, Path(first.info()["model_path"]))
    _ = runtime.backend, runtime.trainer, runtime.pool
    setup_s = time.perf_counter() - t0

    @flow(name="warmup")
    def warmup() -> int:
        return 1

    t0 = time.perf_counter()
    warmup()
    prefect_start_s = time.perf_counter() - t0

    flow_s, direct_s, identical = [], [], []

    @flow(name="orchestration-benchmark")
    def parent() -> None:
        """Generations run as the train flow runs them: subflows of a running flow."""
        for i in range(args.repeats):
            time.sleep(args.pause)  # let Prefect's server finish the previous run's events
            run = create_run(root, config, run_id=f"direct-{i}", preset=args.preset)
            run.centroids()  # a per-run cost, paid before timing on both sides
            t0 = time.perf_counter()
            frames = direct_generation(run, runtime, config)
            direct_s.append(time.perf_counter() - t0)

            run = create_run(root, config, run_id=f"flow-{i}", preset=args.preset)
            run.centroids()
            t0 = time.perf_counter()
            generation_flow(str(run.root), 0)
            flow_s.append(time.perf_counter() - t0)
            identical.append(same_results(frames, run))
            print(f"repeat {i}: direct {direct_s[-1]:.2f} s, flow {flow_s[-1]:.2f} s", file=sys.stderr)

    with subflows_without_heartbeat():
        parent()

    flow_med, direct_med = statistics.median(flow_s), statistics.median(direct_s)
    paired = statistics.median(f / d for f, d in zip(flow_s, direct_s, strict=True))
    print(
        json.dumps(
            {
                "preset": args.preset,
                "repeats": args.repeats,
                "flow_s": round(flow_med, 3),
                "direct_s": round(direct_med, 3),
                "flow_runs_s": [round(x, 3) for x in flow_s],
                "direct_runs_s": [round(x, 3) for x in direct_s],
                "overhead_s": round(flow_med - direct_med, 3),
                "overhead_ratio": round(flow_med / direct_med, 4),
                "paired_ratio_median": round(paired, 4),
                "same_artifacts": all(identical),
                "setup_s": round(setup_s, 2),
                "prefect_start_s": round(prefect_start_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
