"""`populora experiment FILE`: register an experiment (its file's hash, before any run) and run
every (arm, seed) as an ordinary run, or continue it.

Each run is supervised (``cli.supervise``) and waits out an outage of the Prefect server on
its own. The experiment's own flow run needs the server when it starts, between runs and when
it ends: when a call of it fails on a lost connection, this process says so in one line,
waits for the server (``outages.prefect_wait_s``'s default) and starts the flow again, which
skips the complete runs and continues the others (``cli/outages.py``).
"""

from __future__ import annotations

import argparse
import time

from cli import outages
from cli.common import error, runs_dir, user_errors


def cmd_experiment(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cli.run import cluster_settings
    from flows.automations import heartbeats
    from flows.experiment import parallel_experiment_flow
    from populora_core.config.run import OutagesConfig
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
    api, limit_s = outages.api_url(), OutagesConfig().prefect_wait_s
    outages.quiet_outages()
    while True:
        try:
            with heartbeats():
                parallel_experiment_flow(args.parallel)(str(directory.resolve()), cluster)
            break
        except Exception as exc:
            if not (api and outages.lost_connection(exc)):
                if isinstance(exc, RuntimeError):  # a run failed: its task says which and what to do
                    return error(console, exc)
                raise
            down = time.monotonic()
            console.print(outages.waiting_line(api, limit_s, "experiment"), soft_wrap=True)
            if (waited := outages.wait_until_back(api, down, limit_s)) is None:
                console.print(outages.gave_up_line(api, limit_s, directory, "experiment"), soft_wrap=True)
                return 1
            console.print(
                f"the Prefect server at {api} answers again after {outages.duration(waited)}; "
                "the experiment goes on (its complete runs are skipped)",
                soft_wrap=True,
            )
    console.print(f"done: `populora analyze {directory}` tests each claim across seeds")
    return 0
