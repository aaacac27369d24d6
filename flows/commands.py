"""The `populora` commands: each parses nothing, runs one thing, prints tables.

A command that cannot start (a bad config, a missing model or run, no sandbox)
prints one line and exits with status 2; see ``flows.cli`` for the parser.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def _user_errors() -> tuple[type[BaseException], ...]:
    from populora_core.artifacts import ArtifactError
    from populora_core.config import ConfigError
    from populora_core.models import ModelUnavailable
    from populora_core.runlock import RunLockError
    from populora_core.sandbox import SandboxUnavailable

    return (ConfigError, ModelUnavailable, SandboxUnavailable, ArtifactError, RunLockError)


def _error(console, message: object) -> int:
    """Prints a user error in one line; the exit status of a command that could not start."""
    console.print(f"[red]error:[/red] {message}")
    return 2


def quiet_prefect(verbose: bool) -> None:
    """Prefect's INFO lines drown the progress bars; the CLI prints its own summary."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def _runs_dir(args: argparse.Namespace) -> Path:
    from populora_core.runs import default_runs_dir

    return Path(args.runs_dir) if args.runs_dir else default_runs_dir()


NARROW = ("gen", "valid", "solved", "fmt err", "T reward", "drift", "sec")
"""The generation table's columns at 80 columns (`populora status --wide` shows every one)."""


def _generations_table(run, wide: bool = False) -> object:
    """One row per complete generation: `NARROW`'s columns, or every column when ``wide``."""
    from rich.table import Table

    from populora_core.stages.summary import mib, pct, updated_count

    columns = ("gen", "valid", "solved", "fresh", "fmt err", "T reward", "updated", "drift", "cov/all", "repl", "sec")
    columns += ("written", "resumed")
    shown = columns if wide else NARROW
    table = Table(title=f"{run.run_id}: generations")
    for col in shown:
        table.add_column(col, justify="right")
    for s in run.summaries():
        rewards = list(s["teacher_reward"].values())
        cells = dict(
            zip(
                columns,
                (
                    str(s["generation"]),
                    f"{s['valid_rate']:.0%}",
                    f"{s['solve_rate']:.0%}",
                    pct(s.get("fresh_solve_rate", float("nan"))),
                    f"{s['format_error_rate']:.0%}",
                    f"{sum(rewards) / len(rewards):+.2f}" if rewards else "",
                    updated_count(s),
                    pct(s.get("drift_mean", float("nan"))),
                    f"{s['coverage']:.1%}/{s['cumulative_coverage']:.1%}",
                    str(len(s["replaced"])),
                    f"{s['seconds']:.0f}",
                    mib(s["bytes_written"]) if "bytes_written" in s else "",
                    ",".join(s.get("resumed_stages", [])) or "-",
                ),
                strict=True,
            )
        )
        table.add_row(*(cells[c] for c in shown))
    return table


def _run_training(console, run, generations: int | None, command: str, recompute: list[str] | None = None) -> int:
    """Runs the train flow on ``run`` holding its lock (taken here first, so that a run
    another process works on fails at once, in one line, before any flow starts)."""
    from flows.automations import heartbeats
    from flows.train import train_flow

    try:
        with run.lock(command), heartbeats():
            console.print(f"run directory: [bold]{run.root}[/bold]")
            train_flow(run_id=str(run.root.resolve()), generations=generations, recompute=recompute)
    except _user_errors() as exc:
        return _error(console, exc)
    console.print(_generations_table(run))
    console.print(f"run directory: [bold]{run.root}[/bold]  (populora status {run.root})")
    return 0


def _cluster_settings(args: argparse.Namespace) -> dict:
    """``--cluster`` / ``--address`` as settings of the config's ``cluster:`` (an address implies
    the Ray engine, the local engine clears it)."""
    from populora_core.config import ConfigError

    if args.cluster == "local" and args.address:
        raise ConfigError("--address joins a Ray cluster; it contradicts --cluster local")
    engine = args.cluster or ("ray" if args.address else None)
    settings = {"engine": engine} if engine else {}
    if args.address is not None or engine == "local":
        settings["address"] = args.address or ""
    return settings


def _cluster_overrides(args: argparse.Namespace) -> list[str]:
    """``_cluster_settings`` as `key=value` overrides (values quoted: YAML would read host:port)."""
    return [f"cluster.{key}={json.dumps(value)}" for key, value in _cluster_settings(args).items()]


def cmd_train(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.config import DEFAULT_PRESET, load_config
    from populora_core.runs import create_run

    console = Console()
    preset = args.preset if args.preset or args.config else DEFAULT_PRESET
    try:
        overrides = [*args.set, *([f"generations={args.generations}"] if args.generations else [])]
        overrides += _cluster_overrides(args)
        config = load_config(args.config, preset=preset, overrides=overrides)
        run = create_run(_runs_dir(args), config, run_id=args.run_id, preset=preset)
    except _user_errors() as exc:
        return _error(console, exc)
    return _run_training(console, run, args.generations, f"populora train --run-id {run.run_id}")


def cmd_resume(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.runs import open_run
    from populora_core.stages.runner import check_intact

    console = Console()
    try:
        run = open_run(args.run, _runs_dir(args))
        settings = _cluster_settings(args)
        if settings:  # placement only; under the lock: a running process would re-read config.yaml
            with run.lock(f"populora resume {run.root}"):
                run.set_cluster(settings)
        run.config()
        check_intact(run, args.recompute)  # here too: in the flow it would come with Prefect's traceback
    except _user_errors() as exc:
        return _error(console, exc)
    return _run_training(console, run, args.generations, f"populora resume {run.root}", recompute=args.recompute)


def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from flows.automations import heartbeats
    from flows.generation import generation_flow
    from populora_core.replay import prepare_replay, replay_warnings
    from populora_core.runs import open_run

    console = Console()
    try:
        source = open_run(args.run, _runs_dir(args))
        out = source.sibling(args.out)
        new = prepare_replay(source, out, from_stage=args.from_stage, generation=args.generation, overrides=args.set)
    except _user_errors() as exc:
        return _error(console, exc)
    console.print(f"replaying generation {args.generation} of {source.root} from '{args.from_stage}' into {new.root}")
    for line in replay_warnings(source, args.generation, args.from_stage):
        console.print(f"[yellow]warning[/yellow] {line}")
    with heartbeats():  # the server's automation watches generation flow runs (flows.automations)
        generation_flow(str(new.root), args.generation, until=args.until)
    if args.until is None:
        console.print(_generations_table(new))
    console.print(f"run directory: [bold]{new.root}[/bold]")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.runs import open_run
    from populora_core.stages.runner import run_status

    console = Console()
    try:
        run = open_run(args.run, _runs_dir(args))
        st = run_status(run)
    except _user_errors() as exc:
        return _error(console, exc)
    console.print(f"run [bold]{st.run_id}[/bold] at {st.path}  (preset {st.preset}, model {st.model})")
    console.print(f"complete generations: {len(st.complete)} of {st.target_generations}")
    if st.holder:
        console.print(f"[bold]running[/bold]: {st.holder}")
    for name, why in st.damaged.items():
        console.print(f"[red]damaged[/red] {name}.parquet ({why}): {run.recompute_command(*_artifact_of(name))}")
    if len(st.complete) < st.target_generations:
        done = ", ".join(st.next_stages_done) or "none"
        console.print(f"generation {st.next_generation}: stages done: {done}  (`populora resume {st.path}`)")
    console.print(_generations_table(run, wide=args.wide))
    return 0


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

    from populora_core.runs import list_runs
    from populora_core.stages.runner import run_status

    console = Console()
    root = _runs_dir(args)
    table = Table(title=f"runs in {root}")
    for col in ("run", "preset", "model", "generations", "state"):
        table.add_column(col)
    for run in list_runs(root):
        try:
            st = run_status(run)
        except _user_errors() as exc:
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
    from populora_core.runs import open_run
    from populora_core.tracking import log_report

    console = Console()
    try:
        data = [load_run(open_run(r, _runs_dir(args)).root) for r in args.runs]
    except _user_errors() as exc:
        return _error(console, exc)
    out = Path(args.out) if args.out else data[0].run.report_dir
    with console.status(f"drawing the report of {len(data)} run(s)"):
        written = write_report(data, out)
        for line in (w for d in data for w in log_report(d.run, out)):  # into each run's tracking
            console.print(f"[yellow]{line}")
    console.print(written["summary"].read_text().split("\n## ")[0])
    console.print(f"report: [bold]{written['html']}[/bold] (plots and summary.md beside it)")
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

    from flows.evaluate import evaluate_flow, evaluate_runs_flow
    from populora_core.evaluation.datasets import data_dir as default_data_dir
    from populora_core.runs import open_run

    console = Console()
    data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
    try:
        runs = [open_run(r, _runs_dir(args)) for r in args.runs]
        for run in runs:  # a pruned snapshot is named now, not after the base model was scored
            run.adapter_dirs(run.next_generation() if args.generation is None else args.generation)
    except _user_errors() as exc:
        return _error(console, exc)
    benchmarks = _evaluation_benchmarks(args, data_dir, console)
    if isinstance(benchmarks, str):
        return _error(console, benchmarks)
    settings = (args.generation, benchmarks, args.limit, str(data_dir), args.max_new_tokens)
    if len(runs) == 1:
        out = evaluate_flow(str(runs[0].root), *settings, not args.no_base)
        console.print(out["table"])
        console.print(f"results: {out['results']}")
        return 0
    models = {str(run.model_path) for run in runs}
    if len(models) > 1:
        return _error(
            console, f"the runs have different base models ({', '.join(sorted(models))}); compare runs of one"
        )
    out = evaluate_runs_flow([str(run.root) for run in runs], *settings, not args.no_base)
    for one in out["runs"]:
        console.print(one["table"] + "\n")
    console.print(out["table"])
    console.print(f"comparison: {out['comparison']}\npaired comparisons: {out['paired']}")
    return 0
