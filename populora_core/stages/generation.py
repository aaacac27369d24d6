"""What a generation does around its stages: the preparation before them (the previous
generation complete, a killed writer's partial files and damaged artifacts removed) and the
finish after them (the summary, ``_SUCCESS``, old optimizer states dropped)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import NamedTuple

from populora_core.run import ATTEMPT_ID, RunDir
from populora_core.rundir import storage
from populora_core.stages import runner, summary


def prepare_generation(run: RunDir, generation: int) -> list[str]:
    """Readies incomplete ``generation`` for its stages: raises if the generation before is
    not complete; removes the partial files a killed writer left and the outputs of every
    stage with an unreadable artifact (so that it runs again); one line per removed artifact."""
    if generation > 0 and not run.is_complete(generation - 1):
        raise RuntimeError(f"generation {generation - 1} of {run.root} is not complete; run it first")
    run.remove_partials(generation)
    return runner.remove_damaged(run, generation)


class Finished(NamedTuple):
    summary: dict  # what _SUCCESS holds
    warnings: list[str]  # what went wrong after _SUCCESS (the generation is complete regardless)
    dropped: list[str]  # optimizer states removed


def finish_generation(run: RunDir, generation: int, records: Mapping[str, dict], started: float) -> Finished:
    """Completes ``generation`` once its stages ran (``records``: their records; ``started``:
    when this process began it): its summary, with the wall-clock seconds of this process and
    of the stages killed processes finished, sealed into ``_SUCCESS`` with each artifact's size
    and sha256 (last: the generation is complete only once it exists); then optimizer states
    older than ``storage.optimizer_snapshots`` snapshots are dropped and the retention policy
    (``storage.keep_last``, ``keep_every``) prunes old snapshots' weights (after the summary
    counted the bytes written; a kill in between leaves them to the next generation's finish);
    a warning when the free space is less than ``storage.warn_generations`` generations need."""
    record = summary.generation_summary(run, generation, records)
    earlier = sum(sum(a["stages"].values()) for a in record["attempts"] if a["attempt"] != ATTEMPT_ID)
    record["wall_seconds"] = time.time() - started + earlier
    storage.seal(run.gen(generation), record)
    warnings, dropped = [], []
    policy = run.config().storage
    try:
        dropped = [str(p) for p in storage.apply_policy(run, policy)]
    except OSError as exc:
        warnings.append(f"could not apply the storage policy ({exc}); the next generation retries")
    warnings += storage.space_warnings(run, policy.warn_generations, record.get("bytes_written", 0))
    return Finished(record, warnings, dropped)
