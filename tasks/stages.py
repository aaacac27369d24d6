"""The Prefect tasks of a generation: one generic task per entry of the stage table.

A task takes only ``(run_dir, generation)``; ``populora_core.stages.runner.run_stage``
reads the stage's inputs by path, calls its function, writes its artifacts
atomically and returns a small record (paths, row counts, seconds).

The artifacts are the cache: a task whose last artifact already exists returns at
once (``cached: true``) without recomputing, which is how a retried flow run or
``populora resume`` continues from the first incomplete stage. Keys are paths
inside the run directory, so two runs never share results.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from populora_core.rundir import storage
from populora_core.rundir.run import ATTEMPT_ID, RunDir, open_run
from populora_core.stages import runner, summary, table
from tasks.tracking import sync_run


@functools.cache
def stage_task(name: str) -> Callable[[str, int], dict]:
    """The Prefect task of stage ``name`` (made once per process)."""
    stage = table.get_stage(name)

    def run(run_dir: str, generation: int) -> dict:
        return runner.run_stage(open_run(run_dir), generation, name)

    run.__name__ = run.__qualname__ = f"{name}_task"
    run.__doc__ = stage.fn.__doc__
    # No tags (e.g. per heavy object, for concurrency limits): a tagged task run takes a
    # concurrency lease from the server (measured: ~2 s per stage here, +39% on a cpu-tiny generation).
    return task(name=name, task_run_name=f"{name}-gen{{generation}}", cache_policy=NO_CACHE)(run)


@task(name="finish", task_run_name="finish-gen{generation}", cache_policy=NO_CACHE)
def finish_generation(run_dir: str, generation: int, records: dict[str, dict], started: float) -> dict:
    """The generation's summary: published as the UI's table, then written into ``_SUCCESS``
    (last: the generation is complete only once it exists), then logged to the run's
    tracking (TensorBoard, MLflow; a failure there is a warning)."""
    from prefect.artifacts import create_markdown_artifact

    run = open_run(run_dir)
    record = summary.generation_summary(run, generation, records)
    # this process's wall-clock, plus the stages earlier (killed) processes finished
    earlier = sum(sum(a["stages"].values()) for a in record["attempts"] if a["attempt"] != ATTEMPT_ID)
    record["wall_seconds"] = time.time() - started + earlier
    create_markdown_artifact(
        key=summary.artifact_key(run.run_id, generation),
        markdown=summary.summary_markdown(run, generation, record),
        description=f"PopuLoRA {run.run_id} generation {generation}",
    )
    storage.seal(run.gen(generation), record)  # with each artifact's size and sha256
    # after the summary counted bytes_written (and after _SUCCESS: a kill in between leaves
    # them for the next generation's finish to drop)
    try:  # the generation is complete already: a failure here is a warning, not a failed generation
        for name in storage.drop_optimizer_states(run, run.config().storage.optimizer_snapshots):
            get_run_logger().debug("dropped optimizer state %s", name)
    except OSError as exc:
        get_run_logger().warning("could not drop old optimizer states (%s); the next generation retries", exc)
    line = summary.one_line(generation, record)
    print(line, flush=True)  # the CLI's live line; the UI gets it from the run logger
    get_run_logger().info(line)
    sync_run(run)  # after _SUCCESS: a process killed in between is caught up by the next sync
    return record


def stage_names() -> tuple[str, ...]:
    """The stages of a generation, in order (the stage table's)."""
    return table.stage_names()


def remove_damaged(run: RunDir, generation: int) -> list[str]:
    """Removes the outputs of every stage of ``generation`` with an unreadable artifact
    (``runner.remove_damaged``), before the generation's stages run; one line per file."""
    return runner.remove_damaged(run, generation)


@task(name="recompute", task_run_name="recompute-{ref}", cache_policy=NO_CACHE)
def recompute_artifact(run_dir: str, ref: str) -> str:
    """Recomputes one artifact ``gen_NNNN/<name>`` of a complete generation in place, nothing
    else touched (``runner.recompute``); returns its line."""
    run = open_run(run_dir)
    return runner.recompute(run, *runner.parse_artifact_ref(run, ref))


def check_intact(run: RunDir) -> None:
    """Raises DamagedArtifact for a damaged artifact of a complete generation, naming the
    command that recomputes it (``runner.check_intact``)."""
    runner.check_intact(run)
