"""One generation as a Prefect flow: one task per entry of the stage table, then the
summary and the completeness marker.

    pair → propose → validate → solve → verify → reward → update → rate → evolve → measure → _SUCCESS

Run it alone (deployment ``populora-generation``) or as a subflow of ``flows/train.py``.
A retried flow run skips every stage whose artifact exists (see ``tasks/stages.py``).
"""

from __future__ import annotations

import time

from prefect import flow

from populora_core.runs import default_runs_dir, open_run
from tasks.stages import finish_generation, stage_names, stage_task


@flow(name="populora-generation")
def generation_flow(run_dir: str, generation: int | None = None, until: str | None = None) -> dict:
    """Runs (or finishes) one generation of a run; returns its summary.

    run_dir: the run directory, or a run id under the runs directory; generation: which
    one (default: the first incomplete); until: stop after this stage (a partial
    replay), leaving the generation incomplete.
    """
    run = open_run(run_dir, default_runs_dir())
    generation = run.next_generation() if generation is None else generation
    if run.is_complete(generation):
        return run.success(generation)
    if generation > 0 and not run.is_complete(generation - 1):
        raise RuntimeError(f"generation {generation - 1} of {run.root} is not complete; run it first")
    run.remove_partials(generation)
    started = time.time()
    names = stage_names()
    last = names.index(until) if until else len(names) - 1
    records = {name: stage_task(name)(str(run.root), generation) for name in names[: last + 1]}
    if until and until != names[-1]:
        return {"stopped_after": until, "stages": records}
    return finish_generation(str(run.root), generation, records, started)
