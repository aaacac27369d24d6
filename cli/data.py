"""The commands about what a run is made of: `verify` (the sandbox on given proposals and
answers), `models` (embedded base models) and `data` (evaluation datasets).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def _sandbox_config(args: argparse.Namespace):
    from populora_core.config import SandboxConfig

    return SandboxConfig(backend=args.backend, workers=args.workers, timeout_s=args.timeout)


def _read_items(args: argparse.Namespace, console) -> list[tuple[str, str]] | None:
    """The proposals to check: the demo's, or a JSON-lines file's (None after printing why not)."""
    from populora_core.problems.demo import DEMO_PROPOSALS

    if args.demo:
        return DEMO_PROPOSALS
    if not args.file:
        console.print("[red]verify needs --demo or a FILE.jsonl")
        return None
    items = []
    for n, line in enumerate(Path(args.file).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            items.append((record["task_type"], record["completion"]))
        except (ValueError, KeyError, TypeError) as exc:
            console.print(f"[red]{args.file}:{n}: not a {{task_type, completion}} record ({exc})")
            return None
    return items


def _proposals_table(items, results):
    from rich.table import Table

    table = Table(title="Proposals")
    for col in ("#", "task", "valid", "reason", "gold outputs", "depth", "cyclomatic", "loc"):
        table.add_column(col)
    for i, ((task_type, _), res) in enumerate(zip(items, results, strict=True)):
        outs = ", ".join(res.problem.outputs)[:40] if res.problem else ""
        m = res.metrics
        table.add_row(
            str(i),
            task_type,
            "yes" if res.valid else "no",
            res.reason[:50],
            outs,
            *(f"{m[k]:.0f}" if m else "" for k in ("ast_depth", "cyclomatic", "loc")),
        )
    return table


def _answers_table(pairs, verdicts):
    from rich.table import Table

    table = Table(title="Student answers")
    for col in ("task", "answer", "verdict", "detail"):
        table.add_column(col)
    for (problem, answer), verdict in zip(pairs, verdicts, strict=True):
        shown = answer.replace("\n", " ")[:60]
        table.add_row(problem.task_type, shown, verdict.verdict, verdict.detail[:40])
    return table


def cmd_verify(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.config import ProblemsConfig
    from populora_core.problems import check_answers, validate_proposals
    from populora_core.problems.demo import demo_answers
    from populora_core.sandbox import SandboxPool, SandboxUnavailable

    console = Console()
    items = _read_items(args, console)
    if items is None:
        return 2
    problems_cfg = ProblemsConfig()
    started = time.perf_counter()
    try:
        with SandboxPool(_sandbox_config(args)) as pool:
            with console.status(f"validating {len(items)} proposals in the '{args.backend}' sandbox"):
                results = validate_proposals(items, pool, problems_cfg)
            console.print(_proposals_table(items, results))
            if args.demo:
                pairs = demo_answers(results)
                console.print(_answers_table(pairs, check_answers(pairs, pool, problems_cfg)))
    except SandboxUnavailable as exc:
        console.print(f"[red]sandbox unavailable:[/red] {exc}")
        return 1
    console.print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from populora_core.models import EMBEDDED, EMBEDDED_PREFIX, ModelUnavailable, models_dir, resolve_model

    console = Console()
    if args.action == "list":
        table = Table(title=f"Embedded models (cache: {models_dir()})")
        for col in ("reference", "description", "cached"):
            table.add_column(col)
        for name, spec in EMBEDDED.items():
            cached = (models_dir() / name / "config.json").is_file()
            table.add_row(EMBEDDED_PREFIX + name, spec.description, "yes" if cached else "no")
        console.print(table)
        return 0
    try:
        path = resolve_model(args.ref, allow_download=True)
    except ModelUnavailable as exc:
        console.print(f"[red]{exc}")
        return 1
    console.print(f"{args.ref} -> {path}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from populora_core.evaluation.datasets import DATASETS, DataUnavailable, data_dir, download, is_present

    console = Console()
    directory = Path(args.dir) if args.dir else data_dir()
    if args.action == "list":
        table = Table(title=f"Datasets (directory: {directory})")
        for col in ("name", "description", "license", "files", "present"):
            table.add_column(col)
        for name, d in DATASETS.items():
            present = "yes" if is_present(name, directory) else "no"
            table.add_row(name, d.description, d.license, str(len(d.files)), present)
        console.print(table)
        return 0
    try:
        paths = download(args.names, directory, mirror=args.mirror)
    except DataUnavailable as exc:
        console.print(f"[red]{exc}")
        return 1
    console.print(f"{len(paths)} file(s) in {directory}, each matching its published SHA-256")
    return 0
