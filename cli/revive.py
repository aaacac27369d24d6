"""`populora revive`: after a reboot (or any stop), continue every run and experiment under a
runs directory that is neither finished nor worked on by a live process. One that a person
stopped with Ctrl-C is left alone (and listed) until `populora resume` or `populora experiment`
continues it.

Why a systemd unit (``--systemd-unit`` prints one) and not a Prefect schedule: after a reboot
the Prefect server and its worker are down too, and only the init system starts anything; a
schedule would itself need them brought back first, then poll. The unit runs `revive` once at
boot (after `scripts/prefect_server.sh start` when the runs report to a server), and a run
that another process already holds is left alone, so starting it twice is harmless.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from cli.common import runs_dir


def unfinished(root: Path, *, stopped: list[tuple[str, Path, dict]] | None = None) -> list[tuple[str, Path]]:
    """("experiment" | "run", directory) for each experiment and run directly under ``root``
    that has generations left, no live holder and was not stopped by a person (Ctrl-C: those
    are appended to ``stopped`` with how), in name order (a run inside an experiment is
    continued by its experiment)."""
    from populora_core.experiment import is_experiment, open_experiment, runs_dir_of
    from populora_core.run import RunDir

    todo: list[tuple[str, Path]] = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if is_experiment(path):
            spec, _ = open_experiment(path)
            runs = [RunDir(runs_dir_of(path) / spec.run_id(arm, seed)) for arm, seed in spec.runs()]
            runs = [r for r in runs if r.exists()]
            left = len(runs) < len(spec.runs()) or any(r.next_generation() < spec.generations for r in runs)
            open_runs = [r for r in runs if r.next_generation() < spec.generations]  # a complete run's mark is old
            how = next((h for r in open_runs if (h := r.stopped_by_person())), None)
            if left and how and stopped is not None:
                stopped.append(("experiment", path, how))
            elif left and not how and not any(r.holder() for r in runs):
                todo.append(("experiment", path))
            continue
        run = RunDir(path)
        if not (run.exists() and run.next_generation() < run.config().generations):
            continue
        if how := run.stopped_by_person():
            if stopped is not None:
                stopped.append(("run", path, how))
        elif run.holder() is None:
            todo.append(("run", path))
    return todo


def command(kind: str, path: Path) -> list[str]:
    """The `populora` command that continues ``path``."""
    cli = [sys.executable, "-P", "-m", "cli"]
    return [*cli, "experiment", str(path)] if kind == "experiment" else [*cli, "resume", str(path)]


def systemd_unit(root: Path, api_url: str | None) -> str:
    """A systemd service that runs `populora revive` on ``root`` at boot (after the local Prefect
    server when ``api_url`` is one), as this user, from this checkout."""
    repo = Path(__file__).resolve().parents[1]
    exe = Path(sys.executable).parent / "populora"
    before = f"ExecStartPre={repo / 'scripts' / 'prefect_server.sh'} start\n" if api_url else ""
    env = f"Environment=PREFECT_API_URL={api_url}\n" if api_url else ""
    return (
        "[Unit]\n"
        "Description=PopuLoRA: continue the runs and experiments a reboot stopped\n"
        "After=network-online.target docker.service\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"WorkingDirectory={repo}\n"
        "Environment=HF_HUB_OFFLINE=1\n"
        f"{env}{before}"
        f"ExecStart={shlex.join([str(exe), 'revive', '--runs-dir', str(root.resolve())])}\n"
        "Restart=on-failure\n"
        "RestartSec=60\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def cmd_revive(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cli.outages import api_url

    console = Console()
    root = runs_dir(args)
    if args.systemd_unit:
        print(systemd_unit(root, api_url()), end="")
        return 0
    stopped: list[tuple[str, Path, dict]] = []
    todo = unfinished(root, stopped=stopped)
    for kind, path, how in stopped:
        console.print(
            f"left alone: {kind} {path} was stopped with {how['how']} at {how['at']} "
            f"(`populora {shlex.join(command(kind, path)[4:])}` continues it)",
            soft_wrap=True,
            highlight=False,
        )
    if not todo:
        console.print(f"nothing to continue under {root}: every run and experiment is finished or held", soft_wrap=True)
        return 0
    for kind, path in todo:
        said = f"{kind} {path}: `populora {shlex.join(command(kind, path)[4:])}`" if args.dry_run else f"{kind} {path}"
        console.print(said, soft_wrap=True, highlight=False)
    if args.dry_run:
        return 0
    failed = []
    for kind, path in todo:  # one after another: each uses the whole machine
        status = subprocess.run(command(kind, path), check=False).returncode
        if status != 0:
            failed.append(f"{path.name} (status {status})")
    if failed:
        console.print(
            f"[red]error:[/red] not finished: {', '.join(failed)}; `populora revive` tries again", soft_wrap=True
        )
        return 1
    return 0
