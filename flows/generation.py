"""One generation as a Prefect flow: one task per entry of the stage table, then the
summary and the completeness marker.

    pair → propose → validate → solve → probe → verify → reward → update → rate → evolve → measure → _SUCCESS

Run it alone (deployment ``populora-generation``) or as a subflow of ``flows/train.py``.
A retried flow run skips every stage whose artifact exists (see ``tasks/stages.py``);
an artifact of this generation that is unreadable (truncated by a crash, damaged on
disk) is deleted first, with its stage's other outputs, and recomputed. The flow run
is named ``<run_id>/gen_NNNN``; it holds the run's lock (re-entrant: a training flow
already holds it), and when it is not a subflow it first sets what a dead process
left Running to Crashed.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from populora_core.config import ConfigError
from populora_core.rundir.run import default_runs_dir, open_run
from tasks.orphans import crash_orphans
from tasks.stages import finish_generation, remove_damaged, stage_names, stage_task


def _generation_run_name() -> str:
    """``<run_id>/gen_NNNN`` (the first incomplete generation when none is given)."""
    params = flow_run.get_parameters()
    run, g = Path(params["run_dir"]).name, params.get("generation")
    if g is None:
        try:
            g = open_run(params["run_dir"], default_runs_dir()).next_generation()
        except ConfigError:
            return f"{run}/next"
    return f"{run}/gen_{g:04d}"


def lock_holder() -> str:
    """What the run lock records as its holder when a flow (not the CLI) takes it."""
    return f"{flow_run.get_flow_name()} flow run {flow_run.get_name()}"


@flow(name="populora-generation", flow_run_name=_generation_run_name)
def generation_flow(run_dir: str, generation: int | None = None, until: str | None = None) -> dict:
    """Runs (or finishes) one generation of a run; returns its summary.

    run_dir: the run directory, or a run id under the runs directory; generation: which
    one (default: the first incomplete); until: stop after this stage (a partial
    replay), leaving the generation incomplete.
    """
    run = open_run(run_dir, default_runs_dir())
    with run.lock(lock_holder()):
        if flow_run.get_parent_flow_run_id() is None:
            crash_orphans(run)
        return _generation(run, generation, until)


def _generation(run, generation: int | None, until: str | None) -> dict:
    generation = run.next_generation() if generation is None else generation
    if run.is_complete(generation):
        return run.success(generation)
    if generation > 0 and not run.is_complete(generation - 1):
        raise RuntimeError(f"generation {generation - 1} of {run.root} is not complete; run it first")
    run.remove_partials(generation)
    for line in remove_damaged(run, generation):
        print(line, flush=True)
    started = time.time()
    names = stage_names()
    last = names.index(until) if until else len(names) - 1
    records = {name: stage_task(name)(str(run.root), generation) for name in names[: last + 1]}
    if until and until != names[-1]:
        return {"stopped_after": until, "stages": records}
    return finish_generation(str(run.root), generation, records, started)
