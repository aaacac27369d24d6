"""The `populora` parser: every command, its options and its help; ``main`` runs one."""

from __future__ import annotations

import argparse
import sys
from typing import get_args

from cli.common import configure
from cli.data import cmd_data, cmd_models, cmd_verify
from cli.experiment import cmd_experiment
from cli.inspection import cmd_analyze, cmd_crossplay, cmd_evaluate, cmd_runs, cmd_status
from cli.revive import cmd_revive
from cli.run import cmd_plan, cmd_prune, cmd_replay, cmd_resume, cmd_train
from populora_core.config import DEFAULT_MODEL, DEFAULT_PRESET, PRESETS, SandboxBackendName, SandboxConfig


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", help="where runs live (default ./runs or $POPULORA_RUNS)")


def _add_foreground(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--foreground",
        action="store_true",
        help="train in this process, not a supervised child (so `python -m pdb -m cli train --foreground ...` "
        "or a breakpoint() in a stage is reached; a SIGKILL is then not recorded)",
    )


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set population.teachers=2 --set rewards.wrong=-0.25 (repeatable)",
    )


def _add_cluster(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster",
        choices=["local", "ray"],
        help="where the heavy stages run: this process (local) or a Ray cluster (the config's `cluster.engine`)",
    )
    p.add_argument(
        "--address",
        help="Ray cluster to join (`auto`, `ray://host:10001`, `host:6379`; default: a private Ray on this "
        "machine); implies --cluster ray",
    )


def _add_run_parsers(sub) -> None:
    """train, resume, replay."""
    from populora_core.stages.table import stage_names

    stages = stage_names()
    train = sub.add_parser("train", help="create a run and train it", description="Create a run and train it.")
    train.add_argument(
        "--preset", choices=list(PRESETS), help=f"named configuration (default {DEFAULT_PRESET} when no --config)"
    )
    train.add_argument("--config", help="YAML run configuration (applied on top of --preset)")
    _add_set(train)
    train.add_argument("--generations", type=int, help="total generations (default: the config's `generations`)")
    train.add_argument("--run-id", help="name of the run directory (default <preset>-<time>-<random>)")
    _add_cluster(train)
    _add_foreground(train)
    _add_run_options(train)
    train.set_defaults(func=cmd_train)

    resume = sub.add_parser(
        "resume",
        help="continue a run from its first incomplete stage",
        description="Continue a run: completed stages are not recomputed.",
    )
    resume.add_argument("run", help="run directory or run id")
    resume.add_argument("--generations", type=int, help="total generations to reach (default: the run's config)")
    resume.add_argument(
        "--recompute",
        action="append",
        default=[],
        metavar="GEN/ARTIFACT",
        help="recompute this artifact of a complete generation in place first (e.g. gen_0001/verdicts, as "
        "`populora status` names a damaged one); repeatable",
    )
    _add_cluster(resume)
    _add_foreground(resume)
    _add_run_options(resume)
    resume.set_defaults(func=cmd_resume)

    replay = sub.add_parser(
        "replay",
        help="recompute stages from stored artifacts into a new run",
        description="Recompute one generation from a stage onwards, with changed settings, into a new run. "
        "Nothing upstream of the stage is regenerated.",
    )
    replay.add_argument("run", help="source run directory or run id")
    replay.add_argument("--from", dest="from_stage", required=True, choices=stages, help="first stage to recompute")
    replay.add_argument("--until", choices=stages, help="last stage to recompute (default: through measure)")
    replay.add_argument("--generation", type=int, default=0, help="generation to replay (default 0)")
    replay.add_argument("--out", required=True, help="new run (a path, or an id next to the source run)")
    _add_set(replay)
    _add_run_options(replay)
    replay.set_defaults(func=cmd_replay)


def _add_experiment_parser(sub) -> None:
    experiment = sub.add_parser(
        "experiment",
        help="run every (arm, seed) of an experiment file, registered before its first run",
        description="Registers the experiment file (its SHA-256 and a copy, in <runs-dir>/<name>/) before any "
        "run starts, then brings every (arm, seed) run to the experiment's generations, seed by seed; given the "
        "file (unchanged) or the experiment directory again, it continues: complete runs are skipped, the others "
        "resume. `populora analyze <experiment directory>` tests each claim across seeds.",
    )
    experiment.add_argument("file", help="experiment YAML file, or an experiment directory to continue")
    experiment.add_argument("--parallel", type=int, default=1, help="runs at once (default 1; more for the Ray engine)")
    _add_cluster(experiment)
    _add_run_options(experiment)
    experiment.set_defaults(func=cmd_experiment)
    revive = sub.add_parser(
        "revive",
        help="continue every unfinished run and experiment (after a reboot)",
        description="Continues, one after another, every run and experiment under the runs directory that has "
        "generations left and that no live process holds (a run being trained is left alone). Run at boot by "
        "the systemd unit `--systemd-unit` prints (docs/runs.md#long-runs).",
    )
    revive.add_argument("--dry-run", action="store_true", help="list what would be continued, and the commands")
    revive.add_argument(
        "--systemd-unit", action="store_true", help="print a systemd service that runs this at boot, and exit"
    )
    _add_run_options(revive)
    revive.set_defaults(func=cmd_revive)


def _add_plan_parser(sub) -> None:
    plan = sub.add_parser(
        "plan",
        help="the GPU memory plan of a configuration",
        description="What the trainer and vLLM need on each GPU, and where they go, computed from the config "
        "and the model's shapes without loading anything; exit status 2 when it cannot fit.",
    )
    plan.add_argument("--preset", choices=list(PRESETS), help="named configuration (default paper-7b when no --config)")
    plan.add_argument("--config", help="YAML run configuration (applied on top of --preset)")
    _add_set(plan)
    plan.add_argument("--gpus", type=int, help="GPUs of the node (default: this machine's)")
    plan.add_argument("--gpu-memory", type=float, help="GiB of each GPU, as torch reports it (default: this machine's)")
    plan.add_argument("--json", action="store_true", help="the plan as one JSON line")
    plan.set_defaults(func=cmd_plan)


def _add_inspection_parsers(sub) -> None:
    """status, analyze, evaluate, runs."""
    status = sub.add_parser("status", help="what a run has done", description="Generations and stages of a run.")
    status.add_argument("run", help="run directory or run id")
    status.add_argument("--wide", action="store_true", help="every column of the generation table")
    _add_run_options(status)
    status.set_defaults(func=cmd_status)

    analyze = sub.add_parser(
        "analyze",
        help="HTML report of one or more runs",
        description="A self-contained HTML report (plus PNG plots and summary.md) from run directories alone; "
        "several runs are drawn side by side.",
    )
    analyze.add_argument(
        "runs", nargs="+", help="run directories or ids, or one experiment directory (claims tested across seeds)"
    )
    analyze.add_argument("--out", help="report directory (default <first run>/report)")
    _add_run_options(analyze)
    analyze.set_defaults(func=cmd_analyze)
    _add_evaluate_parser(sub)
    crossplay = sub.add_parser(
        "crossplay",
        help="students of each generation against each generation's problems (a replay)",
        description="The arms race shown as the field shows it: the students of generation i answer the valid "
        "fresh problems of generation j (greedy, judged in the sandbox), from the run's stored adapters and "
        "problems; nothing is retrained. Writes a heatmap, the matrix with Wilson intervals and two slopes with "
        "bootstrap intervals (later students solve more; later teachers' problems are harder) to <run>/crossplay/.",
    )
    crossplay.add_argument("run", help="run directory or run id")
    crossplay.add_argument("--every", type=int, default=1, help="every K-th generation (and the last; default 1)")
    crossplay.add_argument("--problems", type=int, default=8, help="problems per teacher generation (default 8)")
    crossplay.add_argument("--out", help="output directory (default <run>/crossplay)")
    _add_run_options(crossplay)
    crossplay.set_defaults(func=cmd_crossplay)
    runs = sub.add_parser("runs", help="list runs", description="The runs under a directory.")
    _add_run_options(runs)
    runs.set_defaults(func=cmd_runs)


def _add_evaluate_parser(sub) -> None:
    from populora_core.evaluation.benchmarks import BENCHMARKS, get_benchmark
    from populora_core.evaluation.items import PROTOCOLS

    evaluate = sub.add_parser(
        "evaluate",
        help="pass@1 of the base model and a generation's adapters on held-out benchmarks",
        description="Greedy pass@1 of the base model and of every adapter of a generation, every program run in "
        "the sandbox; population mean, min and max per benchmark, code and math averages per adapter, and why "
        "each answer failed. Each run is evaluated (the base model once), then compared item by item with the "
        "base model (and a population with a baseline) in <first run>/eval/comparison.md and paired.md.",
    )
    evaluate.add_argument("runs", nargs="+", metavar="run", help="run directories or ids")
    evaluate.add_argument("--generation", type=int, help="population snapshot to evaluate (default the newest)")
    evaluate.add_argument(
        "--benchmarks",
        help="comma-separated subset (default every one whose files are in --data-dir): " + ",".join(BENCHMARKS),
    )
    evaluate.add_argument("--limit", type=int, help="first N items of each benchmark (default all)")
    evaluate.add_argument(
        "--data-dir",
        help="benchmark files in their published layout (default: $POPULORA_DATA, else "
        "~/.cache/populora/data; `populora data download` fills it)",
    )
    caps = ", ".join(f"{b} {get_benchmark(b).max_new_tokens}" for b in BENCHMARKS)
    evaluate.add_argument(
        "--max-new-tokens",
        type=int,
        help=f"token cap per answer for every benchmark (default each benchmark's own: {caps})",
    )
    evaluate.add_argument("--no-base", action="store_true", help="skip the base model")
    evaluate.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="standard",
        help="how answers are asked for: standard (each benchmark's prompt, one fenced block: the field's "
        "tables) or trained (the code benchmarks in the reply format the adapters were trained on, "
        "<think> then the block inside <answer>; results in eval/gen_NNNN-trained/)",
    )
    _add_run_options(evaluate)
    evaluate.set_defaults(func=cmd_evaluate)


def _add_prune_parser(sub) -> None:
    prune = sub.add_parser(
        "prune",
        help="remove old snapshots' adapter weights (artifacts stay)",
        description="Removes the adapter weights and optimizer states of a run's old population snapshots (and "
        "the updated/ adapters they were linked from), keeping the newest --keep-last and every --keep-every-th. "
        "Every Parquet artifact, each snapshot's population.parquet and the lineage stay, so analyze works "
        "unchanged; resume starts from the newest snapshot (always kept); replay and evaluate of a pruned "
        "generation say so.",
    )
    prune.add_argument("run", help="run directory or run id")
    prune.add_argument("--keep-last", type=int, default=2, help="newest snapshots kept (default 2, at least 1)")
    prune.add_argument("--keep-every", type=int, default=0, help="also keep every K-th snapshot (0 = none)")
    prune.add_argument("--dry-run", action="store_true", help="say what would be pruned, change nothing")
    prune.add_argument("--runs-dir", help="where runs live (default ./runs or $POPULORA_RUNS)")
    prune.set_defaults(func=cmd_prune)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="populora", description="Reasoning self-play with co-evolving LoRA populations."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_parsers(sub)
    _add_experiment_parser(sub)
    _add_plan_parser(sub)
    _add_inspection_parsers(sub)
    _add_prune_parser(sub)
    verify = sub.add_parser("verify", help="validate proposals and judge answers in the sandbox")
    verify.add_argument("file", nargs="?", help='JSON lines of {"task_type": ..., "completion": ...}')
    verify.add_argument("--demo", action="store_true", help="run built-in sample proposals and answers")
    sandbox = SandboxConfig()
    verify.add_argument(
        "--backend",
        default=sandbox.backend,
        choices=list(get_args(SandboxBackendName)),
        help=f"sandbox backend (default {sandbox.backend})",
    )
    verify.add_argument(
        "--workers", type=int, default=sandbox.workers, help=f"sandbox workers (default {sandbox.workers})"
    )
    verify.add_argument(
        "--timeout", type=float, default=sandbox.timeout_s, help=f"seconds per program (default {sandbox.timeout_s:g})"
    )
    verify.set_defaults(func=cmd_verify)
    models = sub.add_parser("models", help="list embedded models, or fetch one into the cache")
    models.add_argument(
        "action", choices=["list", "fetch"], help="list: what is embedded and cached; fetch: download one"
    )
    models.add_argument(
        "ref", nargs="?", default=DEFAULT_MODEL, help=f"model reference to fetch (default {DEFAULT_MODEL})"
    )
    models.set_defaults(func=cmd_models)
    data = sub.add_parser(
        "data",
        help="list the evaluation datasets, or download them into the data directory",
        description="Public evaluation and reference data, fetched from where their authors publish it and "
        "checked against the SHA-256 sums kept in the repository. Directory: $POPULORA_DATA, "
        "else ~/.cache/populora/data.",
    )
    data.add_argument("action", choices=["list", "download"])
    data.add_argument("names", nargs="*", help="datasets to download (default: all)")
    data.add_argument("--dir", help="data directory (default: $POPULORA_DATA or ~/.cache/populora/data)")
    data.add_argument("--mirror", help="a mirror serving each file under <mirror>/<host>/<path> of its address")
    data.set_defaults(func=cmd_data)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.verbose)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
