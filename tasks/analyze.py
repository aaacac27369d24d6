"""The Prefect task of the offline report: write it, publish it in the UI."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from populora_core.analysis.data import load_run
from populora_core.analysis.report import write_report
from populora_core.run import default_runs_dir, open_run
from tasks.tracking import log_report
from tasks.ui import artifact_key


@task(name="report", cache_policy=NO_CACHE)
def report(runs: list[str], out_dir: str | None = None) -> dict:
    """Report on ``runs`` (directories or ids, drawn side by side) into ``out_dir``
    (default ``<first run>/report``); returns the written paths."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    data = [load_run(open_run(r, default_runs_dir()).root) for r in runs]
    out = Path(out_dir) if out_dir else data[0].run.report_dir
    written = write_report(data, out)
    log_report([d.run for d in data], out)  # into each run's TensorBoard / MLflow run
    key = artifact_key("-vs-".join(d.label for d in data), 0).removesuffix("-gen-0000") + "-report"
    create_markdown_artifact(key=key, markdown=written["summary"].read_text(), description="PopuLoRA report")
    create_link_artifact(key=f"{key}-html", link=written["html"].resolve().as_uri(), link_text="report.html")
    return {name: str(path) for name, path in written.items()}
