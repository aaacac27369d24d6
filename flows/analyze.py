"""The offline report as a Prefect flow: writes it and publishes it as artifacts in the UI."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from flows.generation import artifact_key
from populora_core.analysis.data import load_run
from populora_core.analysis.report import write_report
from populora_core.runs import default_runs_dir, open_run


@flow(name="populora-analyze")
def analyze_flow(runs: list[str], out_dir: str | None = None) -> dict:
    """Report on ``runs`` (directories or ids, drawn side by side) into ``out_dir``
    (default ``<first run>/report``); returns the written paths."""
    data = [load_run(open_run(r, default_runs_dir()).root) for r in runs]
    out = Path(out_dir) if out_dir else data[0].run.root / "report"
    written = write_report(data, out)
    key = artifact_key("-vs-".join(d.label for d in data), 0).removesuffix("-gen-0000") + "-report"
    create_markdown_artifact(key=key, markdown=written["summary"].read_text(), description="PopuLoRA report")
    create_link_artifact(key=f"{key}-html", link=written["html"].resolve().as_uri(), link_text="report.html")
    return {name: str(path) for name, path in written.items()}
