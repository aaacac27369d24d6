"""A training run: generation flows (as subflows) until the target generation count.

Started with a preset or a YAML config (the `train` deployment) it creates the run
directory (``run.new_run``, as `populora train` does before it starts the flow on the new
run); given an existing run it continues from the first incomplete generation (that
generation itself resumes at its first incomplete stage). `populora train`, `populora
resume` and the `train` and `resume` deployments all run this one flow (`populora-train`),
its flow run named after the run; each generation is a subflow run named
`<run_id>/gen_NNNN`. It holds the run's lock while it trains (`populora resume --cluster`
takes it only a moment before, to write the placement) and first sets what a dead process
left Running in the Prefect UI to Crashed (``tasks.orphans``); until then the server's
automation does, once the dead runs' heartbeats stop (``flows.automations``).
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from flows.generation import generation_flow, lock_holder
from populora_core.config import DEFAULT_PRESET, ConfigError
from populora_core.run import RunDir, default_runs_dir, find_run, new_run
from tasks.orphans import crash_orphans
from tasks.stages import check_intact, recompute_artifact
from tasks.tracking import sync_tracking


def _train_run_name() -> str:
    """The flow run's name: the run id (a new run is renamed once it has one)."""
    params = flow_run.get_parameters()
    run_id = params.get("run_id")
    return Path(run_id).name if run_id else f"new {params.get('preset') or 'run'}"


def _rename(run: RunDir) -> None:
    from prefect.client.orchestration import get_client

    current = flow_run.get_id()
    if current and flow_run.get_name() != run.run_id:
        with get_client(sync_client=True) as client:
            client.update_flow_run(current, name=run.run_id)


@flow(name="populora-train", flow_run_name=_train_run_name)
def train_flow(
    preset: str | None = DEFAULT_PRESET,
    config_path: str | None = None,
    overrides: list[str] | None = None,
    run_id: str | None = None,
    generations: int | None = None,
    runs_dir: str | None = None,
    recompute: list[str] | None = None,
    cluster: dict | None = None,
) -> dict:
    """Creates run ``run_id`` (or continues it if it exists) and runs it to ``generations``.

    preset: a named configuration (cpu-tiny, cpu-small (default), paper-7b, …); config_path: a YAML
    file applied on top; overrides: `key=value` settings applied last; run_id: the run's id
    under runs_dir, or an existing run's directory; generations: total generations of the
    run (default: the config's); recompute: artifacts of complete generations to recompute
    in place first (`gen_0001/verdicts`: what `populora status` names as damaged); cluster:
    where the heavy stages run, the config's `cluster:` (e.g. `{engine: ray, address: auto}`),
    for a new run or from now on for an existing one.
    """
    root = Path(runs_dir) if runs_dir else default_runs_dir()
    run = find_run(run_id, root) if run_id else None
    existing = run is not None
    if not existing:
        if preset is None and config_path is None:  # the `resume` deployment: never a new run
            raise ConfigError(f"no run {run_id!r} to resume in {root}; give run_id (a run id or directory)")
        run = new_run(
            root, preset=preset, config_path=config_path, overrides=overrides or (), cluster=cluster, run_id=run_id
        )
        print(f"created run {run.root}")
    with run.lock(lock_holder()):
        _rename(run)
        if existing and cluster:  # under the lock: a running process would re-read config.yaml
            run.set_cluster(cluster)
        return _continue(run, generations or run.config().generations, recompute or [])


def _continue(run: RunDir, target: int, recompute: list[str]) -> dict:
    """Generation subflows from the first incomplete one up to ``target`` in all, after
    crashing what a dead process left Running, recomputing the artifacts ``recompute``
    names and checking that no complete generation's artifact is damaged (it would name
    the command that recomputes it)."""
    started = time.time()
    crashed = crash_orphans(run)
    if crashed:
        print(f"set to Crashed (their process died): {', '.join(crashed)}")
    for ref in recompute:
        print(recompute_artifact(run, ref))
    check_intact(run)
    sync_tracking(run)  # generations complete but not yet logged (a kill in between)
    ran = []
    for g in range(run.next_generation(), target):  # each beats as its parent does (flows.automations)
        generation_flow(str(run.root), g)
        ran.append(g)
    crash_orphans(run, attempt_started=started)  # what the server recorded late (tasks.orphans)
    return {"run_dir": str(run.root), "generations": target, "ran": ran}
