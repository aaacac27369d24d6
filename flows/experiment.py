"""An experiment (``populora_core.experiment``) as a Prefect flow: one task per (arm, seed),
each an ordinary run trained by its own `populora train` (or `populora resume`) process.

The parent flow run `populora-experiment` is named after the experiment; each task run after
its run (`<arm>-seed<seed>`), and each run is also its own `populora-train` flow run in the
UI. Started again (after a kill, a reboot, a failed run), the flow skips the runs that are
complete, resumes the ones that are not and starts the rest: every run resumes on its own.
``parallel_experiment_flow(n)`` runs n at once (threads, each waiting on its process): on one
machine keep 1, the runs would share its cores; on the Ray engine (``cluster``) each run sends
its heavy stages to the cluster, and several runs keep it busy.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from tasks.experiment import experiment_runs, run_arm_seed


def _experiment_name() -> str:
    return Path(flow_run.get_parameters()["experiment_dir"]).name


@flow(name="populora-experiment", flow_run_name=_experiment_name, task_runner=ThreadPoolTaskRunner(max_workers=1))
def experiment_flow(experiment_dir: str, cluster: dict | None = None) -> dict:
    """Every (arm, seed) run of the registered experiment in ``experiment_dir``, seed by seed,
    one at a time (``parallel_experiment_flow`` for more); ``cluster``: where each run's heavy
    stages go (``{engine: ray, address: auto}``). Returns the runs and whether each ran now."""
    futures = [run_arm_seed.submit(experiment_dir, arm, seed, cluster) for arm, seed in experiment_runs(experiment_dir)]
    return {"experiment": experiment_dir, "runs": [f.result() for f in futures]}


def parallel_experiment_flow(parallel: int):
    """``experiment_flow`` running ``parallel`` runs at once."""
    return experiment_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=max(1, parallel)))
