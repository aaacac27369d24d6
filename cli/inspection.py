"""The commands that read runs: `status`, `runs`, `analyze`, `evaluate`."""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.common import as_disk_full, error, generations_table, runs_dir, user_errors


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.run import open_run
    from populora_core.stages.runner import run_status

    console = Console()
    try:
        run = open_run(args.run, runs_dir(args))
        st = run_status(run)
    except user_errors() as exc:
        return error(console, exc)
    console.print(f"run [bold]{st.run_id}[/bold] at {st.path}  (preset {st.preset}, model {st.model})")
    console.print(f"complete generations: {len(st.complete)} of {st.target_generations}")
    if st.holder:
        console.print(f"[bold]running[/bold]: {st.holder}")
    for name, why in st.damaged.items():
        console.print(f"[red]damaged[/red] {name}.parquet ({why}): {run.recompute_command(*_artifact_of(name))}")
    if len(st.complete) < st.target_generations:
        done = ", ".join(st.next_stages_done) or "none"
        console.print(f"generation {st.next_generation}: stages done: {done}  (`populora resume {st.path}`)")
        if st.stopped:
            console.print(f"generation {st.next_generation}: {st.stopped.describe()}", soft_wrap=True)
    console.print(generations_table(run, wide=args.wide))
    console.print(storage_lines(run), soft_wrap=True)
    return 0


def storage_lines(run) -> str:
    """The retention policy, what it kept and pruned, the run's size and the disk's free space."""
    import shutil

    from populora_core.rundir import storage

    policy = run.config().storage
    size = storage.unique_bytes([run.root])
    free = shutil.disk_usage(run.root).free
    line = storage.retention_line(run, policy.keep_last, policy.keep_every)
    return f"{line}\ndisk: the run holds {size / 2**30:.2f} GiB; {free / 2**30:.1f} GiB free"


def _artifact_of(key: str) -> tuple[int, str]:
    """("gen_0003/verdicts") -> (3, "verdicts")."""
    gen, _, name = key.partition("/")
    return int(gen.removeprefix("gen_")), name


def _state(st) -> str:
    """running (who) / complete / resumable at gen N, and damaged files if any."""
    if st.holder:
        state = f"running: {st.holder}"
    elif len(st.complete) >= st.target_generations:
        state = "complete"
    else:
        state = f"resumable at gen {st.next_generation}"
    return state + (f"; {len(st.damaged)} damaged file(s): populora status {st.path}" if st.damaged else "")


def cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from populora_core.run import list_runs
    from populora_core.stages.runner import run_status

    console = Console()
    root = runs_dir(args)
    table = Table(title=f"runs in {root}")
    for col in ("run", "preset", "model", "generations", "state"):
        table.add_column(col)
    for run in list_runs(root):
        try:
            st = run_status(run)
        except user_errors() as exc:
            table.add_row(run.run_id, "", "", "", f"unreadable: {exc}"[:60])
            continue
        state = _state(st)
        table.add_row(st.run_id, str(st.preset), st.model, f"{len(st.complete)}/{st.target_generations}", state)
    console.print(table)
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.analysis.data import load_run
    from populora_core.analysis.report import write_report
    from populora_core.experiment import is_experiment
    from populora_core.run import open_run
    from populora_core.tracking import log_report

    console = Console()
    if len(args.runs) == 1 and is_experiment(args.runs[0]):
        return _analyze_experiment(console, args.runs[0], args.out)
    try:
        data = [load_run(open_run(r, runs_dir(args)).root) for r in args.runs]
    except user_errors() as exc:
        return error(console, exc)
    out = Path(args.out) if args.out else data[0].run.report_dir
    with console.status(f"drawing the report of {len(data)} run(s)"):
        written = write_report(data, out)
        for line in (w for d in data for w in log_report(d.run, out)):  # into each run's tracking
            console.print(f"[yellow]{line}")
    console.print(written["summary"].read_text().split("\n## ")[0])
    console.print(f"report: [bold]{written['html']}[/bold] (plots and summary.md beside it)")
    return 0


def _analyze_experiment(console, directory: str, out: str | None) -> int:
    """Each run's statistics, each claim tested across seeds, the power the design had."""
    from populora_core.experiment import write_experiment_report

    try:
        with console.status(f"reading the runs of experiment {directory}"):
            written = write_experiment_report(directory, out)
    except user_errors() as exc:
        return error(console, exc)
    text = Path(written["report"]).read_text()
    console.print(text.split("\n## Per seed")[0], highlight=False, soft_wrap=True)
    console.print(f"report: [bold]{written['report']}[/bold] (claims.json beside it)")
    return 0


def _evaluation_benchmarks(args: argparse.Namespace, data_dir: Path, console) -> list[str] | str:
    """The benchmarks asked for (default: every one with files in ``data_dir``), or why not."""
    from populora_core.evaluation.benchmarks import BENCHMARKS, fetch_hint, has_data

    if not data_dir.is_dir():
        return f"no benchmark data at {data_dir} (--data-dir): fetch it with `{fetch_hint(list(BENCHMARKS), data_dir)}`"
    if not args.benchmarks:
        missing = [b for b in BENCHMARKS if not has_data(b, data_dir)]
        if missing:
            hint = fetch_hint(missing, data_dir)
            console.print(
                f"no files in {data_dir} for {', '.join(missing)}: not evaluated" + (f" ({hint})" if hint else "")
            )
        return [b for b in BENCHMARKS if b not in missing]
    benchmarks = args.benchmarks.split(",")
    unknown = [b for b in benchmarks if b not in BENCHMARKS]
    if unknown:
        return f"unknown benchmarks {unknown}; benchmarks: {', '.join(BENCHMARKS)}"
    missing = [b for b in benchmarks if not has_data(b, data_dir)]
    if missing:
        hint = fetch_hint(missing, data_dir)
        return f"no files in {data_dir} for {', '.join(missing)} (--data-dir)" + (
            f": fetch with `{hint}`" if hint else ""
        )
    return benchmarks


def cmd_evaluate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.evaluation.datasets import data_dir as default_data_dir
    from populora_core.run import open_run

    console = Console()
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    try:
        runs = [open_run(r, runs_dir(args)) for r in args.runs]
        for run in runs:  # a pruned snapshot is named now, not after the base model was scored
            run.adapter_dirs(run.next_generation() if args.generation is None else args.generation)
    except user_errors() as exc:
        return error(console, exc)
    benchmarks = _evaluation_benchmarks(args, data_dir, console)
    if isinstance(benchmarks, str):
        return error(console, benchmarks)
    settings = (args.generation, benchmarks, args.limit, str(data_dir), args.max_new_tokens)
    try:
        return _evaluate(console, runs, settings, args)
    except user_errors() as exc:
        return error(console, exc)
    except Exception as exc:
        if (full := as_disk_full(exc, runs[0].root / "eval")) is None:
            raise
        return error(console, full)


def _evaluate(console, runs: list, settings: tuple, args: argparse.Namespace) -> int:
    from flows.evaluate import evaluate_flow, evaluate_runs_flow

    if len(runs) == 1 and args.no_base:  # nothing to pair with: the table alone
        out = evaluate_flow(str(runs[0].root), *settings, False, args.protocol)
        console.print(out["table"])
        console.print(f"results: {out['results']}")
        return 0
    models = {str(run.model_path) for run in runs}
    if len(models) > 1:
        return error(console, f"the runs have different base models ({', '.join(sorted(models))}); compare runs of one")
    out = evaluate_runs_flow([str(run.root) for run in runs], *settings, not args.no_base, args.protocol)
    for one in out["runs"]:
        console.print(one["table"] + "\n")
        console.print(f"results: {one['results']}\n")
    console.print(out["table"])
    console.print(f"comparison: {out['comparison']}\npaired comparisons: {out['paired']}")
    return 0


def cmd_crossplay(args: argparse.Namespace) -> int:
    """Students of each generation against each generation's problems, replayed; the heatmap,
    the two slopes and the matrix into ``<run>/crossplay/`` (or ``--out``)."""
    import json

    from rich.console import Console

    from populora_core.crossplay import (
        crossplay,
        crossplay_report,
        crossplay_statistics,
        generations_of,
        plot_crossplay,
    )
    from populora_core.engine import runtime_of
    from populora_core.run import open_run
    from populora_core.rundir.artifacts import write_text_atomic

    console = Console()
    try:
        run = open_run(args.run, runs_dir(args))
        generations = generations_of(run, args.every)
        if args.problems < 1:
            return error(console, f"--problems must be at least 1, got {args.problems}")
        if len(generations) < 2:
            return error(console, f"{run.root} has {len(generations)} complete generation(s) to cross-play; it needs 2")
        out = Path(args.out) if args.out else run.root / "crossplay"
        out.mkdir(parents=True, exist_ok=True)
        runtime = runtime_of(run.config(), run.model_path)
        frame = crossplay(run, runtime, generations, args.problems, out=out)
    except user_errors() as exc:
        return error(console, exc)
    if frame.empty:
        return error(console, f"{run.root}: no valid fresh problem in generations {generations} to cross-play")
    stats = crossplay_statistics(frame)
    write_text_atomic(json.dumps(stats, indent=2), out / "crossplay.json")
    write_text_atomic(crossplay_report(stats, run.run_id), out / "README.md")
    plot_crossplay(stats, f"cross-play: {run.run_id}").savefig(out / "heatmap.png", dpi=120)
    console.print((out / "README.md").read_text(), highlight=False, soft_wrap=True)
    console.print(
        f"cross-play: [bold]{out}[/bold] (README.md, heatmap.png, crossplay.json, the answers per generation)"
    )
    return 0
