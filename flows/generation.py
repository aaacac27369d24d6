"""One generation as a Prefect flow: its preparation, one task per entry of the stage
table, then its finish (the summary and the completeness marker) and its tracking.

    prepare → pair → propose → validate → solve → probe → verify → reward → update → rate → evolve
    → measure → finish (_SUCCESS) → tracking

Run it alone (deployment ``populora-generation``, ``populora replay``) or as a subflow of
``flows/train.py``. A retried flow run skips every stage whose artifact exists; an
artifact of this generation that is unreadable (truncated by a crash, damaged on disk)
is deleted first, with its stage's other outputs, and recomputed. The flow run is named
``<run_id>/gen_NNNN``. Run alone, it takes the run's lock and first sets what a dead
process left Running to Crashed; as a subflow its parent did both.
"""

from __future__ import annotations

import time
from pathlib import Path

from prefect import flow
from prefect.runtime import flow_run

from populora_core.config import ConfigError
from populora_core.run import RunDir, default_runs_dir, open_run
from populora_core.rundir.lock import process_command
from populora_core.stages.table import stage_names
from tasks.orphans import crash_orphans
from tasks.stages import finish, prepare, stage_task
from tasks.tracking import sync_tracking


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
    """What the run lock records as its holder: the process's command and the flow run."""
    return f"{process_command()}; {flow_run.get_flow_name()} flow run {flow_run.get_name()}"


@flow(name="populora-generation", flow_run_name=_generation_run_name)
def generation_flow(run_dir: str, generation: int | None = None, until: str | None = None) -> dict:
    """Runs (or finishes) one generation of a run; returns its summary.

    run_dir: the run directory, or a run id under the runs directory; generation: which
    one (default: the first incomplete); until: stop after this stage (a partial
    replay), leaving the generation incomplete.
    """
    run = open_run(run_dir, default_runs_dir())
    if flow_run.get_parent_flow_run_id() is not None:  # the training flow holds the lock
        return run_generation(run, generation, until)
    with run.lock(lock_holder()):
        started = time.time()
        crash_orphans(run)
        record = run_generation(run, generation, until)
        crash_orphans(run, attempt_started=started)  # what the server recorded late (tasks.orphans)
        return record


def run_generation(run: RunDir, generation: int | None = None, until: str | None = None) -> dict:
    """The generation's tasks, in the flow that holds the run's lock."""
    generation = run.next_generation() if generation is None else generation
    if run.is_complete(generation):
        return run.success(generation)
    before = prepare(run, generation)
    started = time.time()
    names = stage_names()
    last = names.index(until) if until else len(names) - 1
    records = {}
    for name in names[: last + 1]:  # each waits for the one before: the UI draws the table's chain
        before = records[name] = stage_task(name)(run, generation, wait_for=[before])
    if until and until != names[-1]:
        return {"stopped_after": until, "stages": records}
    record = finish(run, generation, records, started)
    sync_tracking(run, wait_for=[record])  # after _SUCCESS: a process killed in between is caught up next sync
    return record
