"""What every `populora` command shares: the errors a user can cause, printed in one line
(exit status 2), the runs directory, quiet Prefect logging and the generations table.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def user_errors() -> tuple[type[BaseException], ...]:
    from populora_core.config import ConfigError
    from populora_core.inference.vllm import VLLMUnavailable
    from populora_core.models import ModelUnavailable
    from populora_core.rundir.artifacts import ArtifactError
    from populora_core.rundir.diskfull import DiskFull
    from populora_core.rundir.lock import RunLockError
    from populora_core.sandbox import SandboxUnavailable

    return (ConfigError, ModelUnavailable, SandboxUnavailable, VLLMUnavailable, ArtifactError, RunLockError, DiskFull)


def as_disk_full(exc: BaseException, where) -> BaseException | None:
    """``exc`` as a ``DiskFull`` (naming the file it names, else ``where``) when it is a full
    disk that no writer of ours turned into one (a library's own file), else None."""
    from populora_core.rundir.diskfull import DiskFull, is_disk_full, written_path

    if isinstance(exc, DiskFull):
        return exc
    return DiskFull(written_path(exc, where)) if is_disk_full(exc, where) else None


def error(console, message: object) -> int:
    """Prints a user error in one line; the exit status of a command that could not start. An
    error raised in a Ray task or actor (Ray's wrapper, which carries the remote traceback)
    is told by its cause."""
    cause = getattr(message, "cause", None)
    if isinstance(message, BaseException) and isinstance(cause, BaseException):
        message = cause
    console.print(f"[red]error:[/red] {message}", soft_wrap=True)  # one line, however long
    return 2


def configure(verbose: bool) -> None:
    """Logging as every `populora` process has it: Prefect's INFO lines drown the progress bars
    (the CLI prints its own summary), and transformers 5's renames (gradient -> activation
    checkpointing) warn on every update; ``verbose`` keeps both."""
    import logging
    import warnings

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Prefect waits 20 s for the ephemeral API server a command starts; on a busy machine
    # (2 cores, a run and evaluations beside it) it took longer, and the command died.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not verbose:
        for name in ("prefect.task_runs", "prefect.flow_runs"):
            logging.getLogger(name).addFilter(_said_in_one_line)


def _said_in_one_line(record) -> bool:
    """False for Prefect's log of a task or flow run failing with an error a user can cause (its
    traceback, then its state): the command prints that in one line. Other errors keep their logs."""
    names = {cls.__name__ for cls in user_errors()}
    if record.exc_info and record.exc_info[1] is not None:
        return not isinstance(record.exc_info[1], user_errors())
    message = record.getMessage()
    return not (message.startswith("Finished in state Failed") and any(f"exception {n}:" in message for n in names))


def runs_dir(args: argparse.Namespace) -> Path:
    from populora_core.run import default_runs_dir

    return Path(args.runs_dir) if args.runs_dir else default_runs_dir()


NARROW = ("gen", "valid", "solved", "fmt err", "T reward", "drift", "sec")
"""The generation table's columns at 80 columns (`populora status --wide` shows every one)."""


def generations_table(run, wide: bool = False) -> object:
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
