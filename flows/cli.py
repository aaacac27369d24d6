"""The `populora` command line.

    populora train [--preset P | --config FILE] [--set k=v ...] [--generations N]
                                           create a run and train it (a Prefect flow)
    populora resume RUN [--generations N]  continue a run from its first incomplete stage
    populora replay RUN --from STAGE --out NEW_RUN [--generation G] [--until STAGE] [--set k=v ...]
                                           recompute stages from stored artifacts into a new run
    populora status RUN                    what a run has done, generation by generation
    populora runs [--runs-dir DIR]         the runs under a directory
    populora analyze RUN [RUN ...]         HTML report (plots, summary) from run directories alone
    populora evaluate RUN [--limit N]      pass@1 on HumanEval(+), MBPP, CRUXEval, GSM8K, MATH-500
    populora verify --demo | FILE.jsonl    validate proposals and judge answers in the sandbox
    populora models list | fetch REF       embedded base models

Runs live under ./runs (or $POPULORA_RUNS, or --runs-dir). `populora COMMAND --help`
documents every option.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
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


# training runs ------------------------------------------------------------------
def _user_errors() -> tuple[type[BaseException], ...]:
    from populora_core.artifacts import ArtifactError
    from populora_core.config import ConfigError
    from populora_core.models import ModelUnavailable
    from populora_core.sandbox import SandboxUnavailable

    return (ConfigError, ModelUnavailable, SandboxUnavailable, ArtifactError)


def _error(console, message: object) -> int:
    """Prints a user error in one line; the exit status of a command that could not start."""
    console.print(f"[red]error:[/red] {message}")
    return 2


def _quiet_prefect(verbose: bool) -> None:
    """Prefect's INFO lines drown the progress bars; the CLI prints its own summary."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def _runs_dir(args: argparse.Namespace) -> Path:
    from populora_core.runs import default_runs_dir

    return Path(args.runs_dir) if args.runs_dir else default_runs_dir()


def _generations_table(run) -> object:
    from rich.table import Table

    from populora_core.runs import generation_summaries
    from populora_core.stages import updated_count

    table = Table(title=f"{run.run_id}: generations")
    for col in ("gen", "valid", "solved", "fmt err", "T reward", "updated", "cov/all", "repl", "sec", "resumed"):
        table.add_column(col, justify="right")
    for s in generation_summaries(run):
        rewards = list(s["teacher_reward"].values())
        table.add_row(
            str(s["generation"]),
            f"{s['valid_rate']:.0%}",
            f"{s['solve_rate']:.0%}",
            f"{s['format_error_rate']:.0%}",
            f"{sum(rewards) / len(rewards):+.2f}" if rewards else "",
            updated_count(s),
            f"{s['coverage']:.1%}/{s['cumulative_coverage']:.1%}",
            str(len(s["replaced"])),
            f"{s['seconds']:.0f}",
            ",".join(s.get("resumed_stages", [])) or "-",
        )
    return table


def _run_training(console, run, generations: int | None) -> int:
    from flows.train import resume_flow

    console.print(f"run directory: [bold]{run.root}[/bold]")
    resume_flow(str(run.root), generations)
    console.print(_generations_table(run))
    console.print(f"run directory: [bold]{run.root}[/bold]  (populora status {run.root})")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.config import load_config
    from populora_core.runs import create_run

    console = Console()
    preset = args.preset if args.preset or args.config else "cpu-small"
    try:
        overrides = [*args.set, *([f"generations={args.generations}"] if args.generations else [])]
        config = load_config(args.config, preset=preset, overrides=overrides)
        run = create_run(_runs_dir(args), config, run_id=args.run_id, preset=preset)
    except _user_errors() as exc:
        return _error(console, exc)
    return _run_training(console, run, args.generations)


def cmd_resume(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.runs import open_run, run_config

    console = Console()
    try:
        run = open_run(args.run, _runs_dir(args))
        run_config(run)
    except _user_errors() as exc:
        return _error(console, exc)
    return _run_training(console, run, args.generations)


def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from flows.generation import generation_flow
    from populora_core.replay import prepare_replay
    from populora_core.runs import open_run

    console = Console()
    try:
        source = open_run(args.run, _runs_dir(args))
        out = Path(args.out) if "/" in args.out else source.root.parent / args.out
        new = prepare_replay(source, out, from_stage=args.from_stage, generation=args.generation, overrides=args.set)
    except _user_errors() as exc:
        return _error(console, exc)
    console.print(f"replaying generation {args.generation} of {source.root} from '{args.from_stage}' into {new.root}")
    generation_flow(str(new.root), args.generation, until=args.until)
    if args.until is None:
        console.print(_generations_table(new))
    console.print(f"run directory: [bold]{new.root}[/bold]")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.runs import open_run, run_status

    console = Console()
    try:
        run = open_run(args.run, _runs_dir(args))
        st = run_status(run)
    except _user_errors() as exc:
        return _error(console, exc)
    console.print(f"run [bold]{st.run_id}[/bold] at {st.path}  (preset {st.preset}, model {st.model})")
    console.print(f"complete generations: {len(st.complete)} of {st.target_generations}")
    if len(st.complete) < st.target_generations:
        done = ", ".join(st.next_stages_done) or "none"
        console.print(f"generation {st.next_generation}: stages done: {done}  (`populora resume {st.path}`)")
    console.print(_generations_table(run))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from populora_core.runs import list_runs, run_status

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
        state = "complete" if len(st.complete) >= st.target_generations else f"resumable at gen {st.next_generation}"
        table.add_row(st.run_id, str(st.preset), st.model, f"{len(st.complete)}/{st.target_generations}", state)
    console.print(table)
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from rich.console import Console

    from populora_core.analysis.data import load_run
    from populora_core.analysis.report import write_report
    from populora_core.runs import open_run

    console = Console()
    try:
        data = [load_run(open_run(r, _runs_dir(args)).root) for r in args.runs]
    except _user_errors() as exc:
        return _error(console, exc)
    out = Path(args.out) if args.out else data[0].run.root / "report"
    with console.status(f"drawing the report of {len(data)} run(s)"):
        written = write_report(data, out)
    console.print(written["summary"].read_text().split("\n## ")[0])
    console.print(f"report: [bold]{written['html']}[/bold] (plots and summary.md beside it)")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from flows.evaluate import DEFAULT_DATA_DIR, evaluate_flow
    from populora_core.evaluation.benchmarks import BENCHMARKS
    from populora_core.runs import open_run

    console = Console()
    benchmarks = args.benchmarks.split(",") if args.benchmarks else list(BENCHMARKS)
    unknown = [b for b in benchmarks if b not in BENCHMARKS]
    data_dir = Path(args.data_dir) if args.data_dir else DEFAULT_DATA_DIR
    try:
        run = open_run(args.run, _runs_dir(args))
    except _user_errors() as exc:
        return _error(console, exc)
    if unknown:
        return _error(console, f"unknown benchmarks {unknown}; benchmarks: {', '.join(BENCHMARKS)}")
    if not data_dir.is_dir():
        return _error(console, f"no benchmark data at {data_dir} (--data-dir)")
    out = evaluate_flow(
        str(run.root),
        args.generation,
        benchmarks,
        args.limit,
        str(data_dir),
        args.max_new_tokens,
        not args.no_base,
    )
    console.print(out["table"])
    console.print(f"results: {out['results']}")
    return 0


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", help="where runs live (default ./runs or $POPULORA_RUNS)")


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set population.teachers=2 --set rewards.wrong=-0.25 (repeatable)",
    )


def _add_training_parsers(sub) -> None:
    from populora_core.config import PRESETS
    from populora_core.evaluation.benchmarks import BENCHMARKS
    from populora_core.stages import STAGES

    train = sub.add_parser("train", help="create a run and train it", description="Create a run and train it.")
    train.add_argument(
        "--preset", choices=list(PRESETS), help="named configuration (default cpu-small when no --config)"
    )
    train.add_argument("--config", help="YAML run configuration (applied on top of --preset)")
    _add_set(train)
    train.add_argument("--generations", type=int, help="total generations (default: the config's `generations`)")
    train.add_argument("--run-id", help="name of the run directory (default <preset>-<time>-<random>)")
    _add_run_options(train)
    train.set_defaults(func=cmd_train)

    resume = sub.add_parser(
        "resume",
        help="continue a run from its first incomplete stage",
        description="Continue a run: completed stages are not recomputed.",
    )
    resume.add_argument("run", help="run directory or run id")
    resume.add_argument("--generations", type=int, help="total generations to reach (default: the run's config)")
    _add_run_options(resume)
    resume.set_defaults(func=cmd_resume)

    replay = sub.add_parser(
        "replay",
        help="recompute stages from stored artifacts into a new run",
        description="Recompute one generation from a stage onwards, with changed settings, into a new run. "
        "Nothing upstream of the stage is regenerated.",
    )
    replay.add_argument("run", help="source run directory or run id")
    replay.add_argument("--from", dest="from_stage", required=True, choices=STAGES, help="first stage to recompute")
    replay.add_argument("--until", choices=STAGES, help="last stage to recompute (default: through measure)")
    replay.add_argument("--generation", type=int, default=0, help="generation to replay (default 0)")
    replay.add_argument("--out", required=True, help="new run (a path, or an id next to the source run)")
    _add_set(replay)
    _add_run_options(replay)
    replay.set_defaults(func=cmd_replay)

    status = sub.add_parser("status", help="what a run has done", description="Generations and stages of a run.")
    status.add_argument("run", help="run directory or run id")
    _add_run_options(status)
    status.set_defaults(func=cmd_status)

    analyze = sub.add_parser(
        "analyze",
        help="HTML report of one or more runs",
        description="A self-contained HTML report (plus PNG plots and summary.md) from run directories alone; "
        "several runs are drawn side by side.",
    )
    analyze.add_argument("runs", nargs="+", help="run directories or ids")
    analyze.add_argument("--out", help="report directory (default <first run>/report)")
    _add_run_options(analyze)
    analyze.set_defaults(func=cmd_analyze)

    evaluate = sub.add_parser(
        "evaluate",
        help="pass@1 of the base model and a generation's adapters on held-out benchmarks",
        description="Greedy pass@1 of the base model and of every adapter of a generation, every program run in "
        "the sandbox; population mean, min and max per benchmark.",
    )
    evaluate.add_argument("run", help="run directory or run id")
    evaluate.add_argument("--generation", type=int, help="population snapshot to evaluate (default the newest)")
    evaluate.add_argument("--benchmarks", help="comma-separated subset (default all): " + ",".join(BENCHMARKS))
    evaluate.add_argument("--limit", type=int, help="first N items of each benchmark (default all)")
    evaluate.add_argument("--data-dir", help="benchmark files in their published layout (default ../shared/data)")
    evaluate.add_argument("--max-new-tokens", type=int, default=512, help="token cap per answer (default 512)")
    evaluate.add_argument("--no-base", action="store_true", help="skip the base model")
    _add_run_options(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)

    runs = sub.add_parser("runs", help="list runs", description="The runs under a directory.")
    _add_run_options(runs)
    runs.set_defaults(func=cmd_runs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="populora", description="Reasoning self-play with co-evolving LoRA populations."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_training_parsers(sub)
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
    _quiet_prefect(args.verbose)
    if not args.verbose:  # transformers 5 renames (gradient -> activation checkpointing) warn on every update
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
