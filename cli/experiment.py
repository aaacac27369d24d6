"""`populora experiment FILE`: register an experiment (its file's hash, before any run) and run
every (arm, seed) as an ordinary run, or continue it."""

from __future__ import annotations

import argparse

from cli.common import error, runs_dir, user_errors


def cmd_experiment(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cli.run import cluster_settings
    from flows.automations import heartbeats
    from flows.experiment import parallel_experiment_flow
    from populora_core.experiment import is_experiment, open_experiment, start

    console = Console()
    try:
        # an experiment directory continues as registered; a file is registered (or checked unchanged)
        directory = open_experiment(args.file)[1] if is_experiment(args.file) else start(args.file, runs_dir(args))
        cluster = cluster_settings(args) or None
    except user_errors() as exc:
        return error(console, exc)
    spec = open_experiment(directory)[0]
    console.print(
        f"experiment [bold]{spec.name}[/bold]: {len(spec.arms)} arms × {len(spec.seeds)} seeds, "
        f"{spec.generations} generations each, in {directory} (registered: {directory / 'experiment.json'})"
    )
    try:
        with heartbeats():
            parallel_experiment_flow(args.parallel)(str(directory.resolve()), cluster)
    except RuntimeError as exc:
        return error(console, exc)
    console.print(f"done: `populora analyze {directory}` tests each claim across seeds")
    return 0
