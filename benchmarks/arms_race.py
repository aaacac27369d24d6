"""Population versus single-agent baseline: the experiment of the PopuLoRA paper, on the CPU.

Trains ``--preset`` (default cpu-arms-race: 2 teachers + 2 students) and its compute-matched
baseline (``<preset>-baseline``: one adapter proposing and solving) side by side, one
process each (the preset gives each one thread: decoding, most of a generation on this
CPU, runs as fast on one thread as on two), each writing its log to ``<out>/<run>.log``;
then writes the comparison report (``populora analyze`` of both). ``--sequential`` runs
them generation by generation, alternating, in this process instead. Long: not in CI.
Re-running with the same ``--out`` continues both runs. Final line: JSON with each run's
headline figures, the median wall-clock of a generation of each, and ``pair_wall_s``:
this invocation's wall-clock per generation of both (goal: ≤ ~6 min on 2 cores).

    python benchmarks/arms_race.py --generations 30 [--preset cpu-arms-race] [--out runs/arms-race]
    python benchmarks/arms_race.py --quick       # cpu-tiny, 1 generation each, into a new temporary --out
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from populora_core.analysis.data import headline, load_run
from populora_core.analysis.report import write_report
from populora_core.config import load_config
from populora_core.run import RunDir, create_run


def _open(out: Path, name: str, generations: int) -> RunDir:
    run = RunDir(out / name)
    if run.exists():
        return run
    config = load_config(preset=name, overrides=[f"generations={generations}"])
    return create_run(out, config, run_id=name, preset=name)


def _train(runs: dict[str, RunDir], generations: int) -> None:
    """Every missing generation of ``runs``, generation by generation, alternating."""
    from prefect import flow

    from benchmarks._flows import subflows_without_heartbeat
    from flows.generation import generation_flow

    @flow(name="populora-arms-race")
    def arms_race() -> None:
        with subflows_without_heartbeat():
            for g in range(generations):
                for name, run in runs.items():
                    if g not in run.complete_generations():
                        print(f"[{name}] ", end="", flush=True)
                        generation_flow(str(run.root), g)

    arms_race()


def _side_by_side(out: Path, names: list[str], argv: list[str]) -> None:
    """One child process per run (``--only NAME``), each with its own Prefect home unless a
    server is configured (two ephemeral servers must not share one SQLite file)."""
    children = []
    try:
        for name in names:
            env = dict(os.environ)
            if not env.get("PREFECT_API_URL"):
                home = Path(env.get("PREFECT_HOME", Path.home() / ".cache" / "populora" / "prefect"))
                env["PREFECT_HOME"] = str(home / name)
                (home / name).mkdir(parents=True, exist_ok=True)
                # two servers starting beside a model load on 2 cores can miss Prefect's 20 s
                env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
            log = open(out / f"{name}.log", "a")  # noqa: SIM115 (closed below)
            cmd = [sys.executable, __file__, *argv, "--only", name]
            children.append((name, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
            print(f"[{name}] log: {out / f'{name}.log'}", file=sys.stderr)
        for name, child, _ in children:
            if child.wait() != 0:
                raise SystemExit(f"{name} failed (exit {child.returncode}): see {out / f'{name}.log'}")
    finally:
        for _, child, log in children:
            if child.poll() is None:
                child.terminate()
                child.wait()
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--preset", default="cpu-arms-race")
    parser.add_argument("--out", help="the runs and the report (default runs/arms-race; --quick: a new temporary one)")
    parser.add_argument("--sequential", action="store_true", help="both runs in this process, alternating")
    parser.add_argument("--quick", action="store_true", help="cpu-tiny and its baseline, 1 generation each")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # a child of the side-by-side mode
    args = parser.parse_args()
    if args.quick:
        args.preset, args.generations = "cpu-tiny", 1
    args.out = args.out or (tempfile.mkdtemp(prefix="arms-race-quick-") if args.quick else "runs/arms-race")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [args.preset, f"{args.preset}-baseline"]
    runs = {name: _open(out, name, args.generations) for name in names}
    if args.only:
        _train({args.only: runs[args.only]}, args.generations)
        return
    before = {name: len(run.complete_generations()) for name, run in runs.items()}
    started = time.perf_counter()
    threads = sum(run.config().model.threads or 1 for run in runs.values())
    if args.sequential:
        _train(runs, args.generations)
    else:
        if threads > (os.cpu_count() or 1):
            print(
                f"warning: side by side the two runs ask for {threads} threads on {os.cpu_count()} cores; "
                "oversubscribed, PyTorch runs several times slower (--sequential, or model.threads=1)",
                file=sys.stderr,
            )
        _side_by_side(out, names, ["--generations", str(args.generations), "--preset", args.preset, "--out", str(out)])
    elapsed = time.perf_counter() - started
    done = max(len(run.complete_generations()) - before[name] for name, run in runs.items())
    data = [load_run(run.root, label=name) for name, run in runs.items()]
    written = write_report(data, out / "report")
    print(f"report: {written['html']}", file=sys.stderr)
    seconds = {d.label: float(d.summaries["wall_seconds"].median()) for d in data}
    print(
        json.dumps(
            {
                "report": str(written["html"]),
                "mode": "sequential" if args.sequential else "side by side",
                "median_generation_s": seconds,
                "pair_wall_s": elapsed / done if done else None,
                "runs": [headline(d) for d in data],
            }
        )
    )


if __name__ == "__main__":
    main()
