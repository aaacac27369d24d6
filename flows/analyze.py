"""The offline report as a Prefect flow: writes it and publishes it as artifacts in the UI."""

from __future__ import annotations

from prefect import flow

from tasks.analyze import report


@flow(name="populora-analyze")
def analyze_flow(runs: list[str], out_dir: str | None = None) -> dict:
    """Report on ``runs`` (directories or ids, drawn side by side) into ``out_dir``
    (default ``<first run>/report``); returns the written paths."""
    return report(runs, out_dir)
