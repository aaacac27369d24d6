"""The Prefect tasks of a generation: its preparation, one task per entry of the stage
table, its finish; and of a run: recomputing one artifact, checking the complete ones. Each wraps one call of
``populora_core.stages`` and takes the flow's ``RunDir``.

The artifacts are the cache: a stage task whose last artifact already exists returns at
once (``cached: true``) without recomputing, which is how a retried flow run or
``populora resume`` continues from the first incomplete stage. Keys are paths inside the
run directory, so two runs never share results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from populora_core.run import RunDir
from populora_core.stages import generation as gen
from populora_core.stages import runner, summary, table
from tasks.tracking import warn
from tasks.ui import artifact_key


@task(name="prepare", task_run_name="prepare-gen{generation}", cache_policy=NO_CACHE)
def prepare(run: RunDir, generation: int) -> list[str]:
    """Readies the generation for its stages (``stages.generation.prepare_generation``);
    prints a line per damaged artifact it removed."""
    lines = gen.prepare_generation(run, generation)
    for line in lines:
        print(line, flush=True)
    return lines


@functools.cache
def stage_task(name: str) -> Callable[[RunDir, int], dict]:
    """The Prefect task of stage ``name`` (made once per process): ``runner.run_stage``."""
    stage = table.get_stage(name)

    def run(run: RunDir, generation: int) -> dict:
        return runner.run_stage(run, generation, name)

    run.__name__ = run.__qualname__ = f"{name}_task"
    run.__doc__ = stage.fn.__doc__
    # No tags (e.g. per heavy object, for concurrency limits): a tagged task run takes a
    # concurrency lease from the server (measured: ~2 s per stage here, +39% on a cpu-tiny generation).
    return task(name=name, task_run_name=f"{name}-gen{{generation}}", cache_policy=NO_CACHE)(run)


@task(name="finish", task_run_name="finish-gen{generation}", cache_policy=NO_CACHE)
def finish(run: RunDir, generation: int, records: dict[str, dict], started: float) -> dict:
    """Completes the generation (``stages.generation.finish_generation``), publishes its
    summary as the UI's table and prints its line; returns the summary."""
    from prefect.artifacts import create_markdown_artifact

    done = gen.finish_generation(run, generation, records, started)
    logger = get_run_logger()
    for name in done.dropped:
        logger.debug("dropped optimizer state %s", name)
    warn(done.warnings)
    create_markdown_artifact(
        key=artifact_key(run.run_id, generation),
        markdown=summary.summary_markdown(run, generation, done.summary),
        description=f"PopuLoRA {run.run_id} generation {generation}",
    )
    line = summary.one_line(generation, done.summary)
    print(line, flush=True)  # the CLI's live line; the UI gets it from the run logger
    logger.info(line)
    return done.summary


@task(name="recompute", task_run_name="recompute-{ref}", cache_policy=NO_CACHE)
def recompute_artifact(run: RunDir, ref: str) -> str:
    """Recomputes one artifact ``gen_NNNN/<name>`` of a complete generation in place, nothing
    else touched (``runner.recompute``); returns its line."""
    return runner.recompute(run, *runner.parse_artifact_ref(run, ref))


@task(name="check", task_run_name="check-intact", cache_policy=NO_CACHE)
def check_intact(run: RunDir) -> None:
    """Raises DamagedArtifact for a damaged artifact of a complete generation, naming the
    command that recomputes it (``runner.check_intact``)."""
    runner.check_intact(run)
