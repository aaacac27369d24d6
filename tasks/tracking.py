"""Tracking (TensorBoard, MLflow): bringing a run's tracking runs up to date, and adding the
report to them. Failures are warnings: tracking never stops a run, but for a full disk
(``populora_core.tracking``)."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError

from populora_core import tracking
from populora_core.run import RunDir


def warn(lines: list[str]) -> None:
    """Prints each warning (the CLI's output) and logs it to the Prefect run, if any."""
    for line in lines:
        print(line, flush=True)
        try:
            get_run_logger().warning(line)
        except MissingContextError:
            pass


@task(name="tracking", task_run_name="tracking", cache_policy=NO_CACHE)
def sync_tracking(run: RunDir) -> dict:
    """Logs every complete generation the run's tracking backends lack (``tracking.sync``):
    the one just finished, and any a process killed between its ``_SUCCESS`` and its
    logging left out; returns ``{"logged": {backend: [generations]}, "warnings": [...]}``."""
    record = tracking.sync(run)
    warn(record["warnings"])
    return record


def log_report(runs: list[RunDir], report_dir: Path) -> None:
    """Adds the report to each run's tracking (``tracking.log_report``)."""
    for run in runs:
        warn(tracking.log_report(run, report_dir))
