"""The experiment flow's task: one (arm, seed) run brought to the experiment's generations by
its own `populora` process (``populora_core.experiment.run_command``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from prefect import task

from populora_core.experiment import open_experiment, run_command, runs_dir_of
from populora_core.run import RunDir

_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0); "  # PR_SET_PDEATHSIG
    "os.getppid() == 1 and sys.exit(1); os.execv(sys.argv[1], sys.argv[1:])"
)
"""Runs its arguments as a command that gets a SIGTERM when the experiment's process dies (its
supervisor then stops the training as Ctrl-C would), so a killed experiment leaves no run
behind (a ``preexec_fn`` would do the same, but is unsafe beside the task runner's threads)."""


def experiment_runs(experiment_dir: str) -> list[tuple[str, int]]:
    """Every (arm, seed) of the registered experiment, seed by seed."""
    return open_experiment(experiment_dir)[0].runs()


@task(name="run", task_run_name="{arm}-seed{seed}")
def run_arm_seed(experiment_dir: str, arm: str, seed: int, cluster: dict | None = None) -> dict:
    """Brings one run to the experiment's generations in its own process; fails naming the run
    and the command that continues the experiment when that process fails."""
    directory = Path(experiment_dir)
    spec, _ = open_experiment(directory)
    run = RunDir(runs_dir_of(directory) / spec.run_id(arm, seed))
    if run.exists() and run.next_generation() >= spec.generations:
        return {"run": str(run.root), "ran": False}
    command = run_command(directory, arm, seed, cluster)
    status = subprocess.run([sys.executable, "-c", _DIE_WITH_PARENT, *command], check=False).returncode
    if status != 0:
        raise RuntimeError(
            f"run {run.root.name} of experiment {spec.name} ended with status {status}; "
            f"`populora experiment {directory}` continues it (and the runs after it)"
        )
    return {"run": str(run.root), "ran": True}
