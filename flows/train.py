"""A training run: generation flows (as subflows) until the target generation count.

Started with a preset or a YAML config it creates the run directory; given an
existing run it continues from the first incomplete generation (that generation
itself resumes at its first incomplete stage).
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from flows.generation import generation_flow
from populora_core.config import DEFAULT_PRESET, load_config
from populora_core.runs import create_run, default_runs_dir, open_run


@flow(name="populora-train")
def train_flow(
    preset: str | None = DEFAULT_PRESET,
    config_path: str | None = None,
    overrides: list[str] | None = None,
    run_id: str | None = None,
    generations: int | None = None,
    runs_dir: str | None = None,
) -> dict:
    """Creates run ``run_id`` (or continues it if it exists) and runs it to ``generations``.

    preset: a named configuration (cpu-tiny, cpu-small (default), paper-7b, …); config_path: a YAML
    file applied on top; overrides: `key=value` settings applied last; generations:
    total generations of the run (default: the config's).
    """
    root = Path(runs_dir) if runs_dir else default_runs_dir()
    if run_id and (root / run_id).exists():
        run = open_run(root / run_id)
    else:
        config = load_config(config_path, preset=preset, overrides=overrides or ())
        run = create_run(root, config, run_id=run_id, preset=preset)
        print(f"created run {run.root}")
    return continue_run(str(run.root), generations)


def subflows_without_heartbeat():
    """Settings under which generation subflows start no heartbeat thread of their own.

    The parent flow's heartbeat already covers the process, and Prefect joins a
    flow's heartbeat thread for up to a second when the flow ends: a fixed cost per
    generation otherwise. Enter it once around the loop (building the settings
    object costs ~0.15 s).
    """
    return temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def continue_run(run_dir: str, generations: int | None = None) -> dict:
    """Generation subflows from the first incomplete one up to ``generations`` in all."""
    run = open_run(run_dir)
    target = generations or run.config().generations
    summaries = {}
    with subflows_without_heartbeat():
        for g in range(run.next_generation(), target):
            summaries[g] = generation_flow(str(run.root), g)
    return {"run_dir": str(run.root), "generations": target, "ran": sorted(summaries)}


@flow(name="populora-resume")
def resume_flow(run_dir: str, generations: int | None = None) -> dict:
    """Continues an existing run (the CLI's `populora resume`)."""
    return continue_run(run_dir, generations)
