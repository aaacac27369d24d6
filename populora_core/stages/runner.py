"""Running a stage of the table against a run directory, and what a run has done.

``run_stage`` is everything a stage's execution does, whoever calls it (a Prefect
task, a Ray task, a benchmark): skip when its last artifact exists, resolve its
inputs and heavy objects, call its function, write its outputs atomically, return
a small record. ``stages_done`` and ``run_status`` read the same table.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from populora_core.problems import seed_buffers
from populora_core.run import ATTEMPT_ID, RunDir
from populora_core.rundir import attempts, links, storage
from populora_core.rundir.artifacts import DamagedArtifact, artifact_path, damage
from populora_core.stages import table


def _buffers(run: RunDir, g: int) -> pd.DataFrame:
    """The buffers generation ``g`` draws from: generation g−1's, or the seed problems at 0."""
    if g == 0:
        return seed_buffers([m.adapter_id for m in run.members(0) if m.plays("teacher")])
    return run.read(g - 1, "buffers")


def _earlier_cells(run: RunDir, g: int) -> pd.DataFrame:
    """(teacher_id, cvt_cell) of the valid fresh problems of every generation before ``g``."""
    frames = [run.read(e, "problems") for e in range(g)]
    cells = [f.loc[f["valid"] & (f["source"] == "fresh"), ["teacher_id", "cvt_cell"]] for f in frames]
    return pd.concat(cells, ignore_index=True) if cells else pd.DataFrame(columns=["teacher_id", "cvt_cell"])


def _base_probes(run: RunDir, g: int) -> pd.DataFrame:
    """The probes of the latest generation before ``g`` that was probed (the base's answers are
    read from them), or an empty frame."""
    for e in range(g - 1, -1, -1):
        path = artifact_path(run.gen(e), "probes")
        if path.is_file():
            frame = run.read(e, "probes")
            if len(frame):
                return frame
    return pd.DataFrame(columns=["adapter_id", "problem_id"])


INPUTS: dict[str, Callable[[RunDir, int], object]] = {
    "base_probes": _base_probes,
    "members": lambda run, g: run.members(g),
    "next_members": lambda run, g: run.members(g + 1),
    "start_buffers": _buffers,
    "centroids": lambda run, g: run.centroids(),
    "calibration": lambda run, g: run.calibration(),
    "earlier_cells": _earlier_cells,
    "members_dir": lambda run, g: run.members_dir(g),
    "updated_dir": lambda run, g: run.updated(g),
    "next_members_dir": lambda run, g: run.members_dir(g + 1),
}
"""Inputs that are not an artifact of the stage's generation; any other input name is one."""


def resolve_input(run: RunDir, generation: int, name: str) -> object:
    provider = INPUTS.get(name)
    return provider(run, generation) if provider else run.read(generation, name)


def _heavy(run: RunDir, generation: int, need: str) -> object:
    """A stage's heavy object from the process's runtime; a backend serves this generation's adapters."""
    from populora_core.engine import runtime_of

    runtime = runtime_of(run.config(), run.model_path)
    if need == "backend":
        runtime.serve(run.adapter_dirs(generation))
    return getattr(runtime, need)


def is_done(run: RunDir, generation: int, stage: table.Stage) -> bool:
    """The stage's last artifact is there and readable (it is written last)."""
    path = artifact_path(run.gen(generation), stage.outputs[-1])
    return path.is_file() and damage(path) is None


def damaged(run: RunDir, generation: int) -> dict[str, str]:
    """Artifact name → what is wrong with it, for every damaged artifact of ``generation``:
    unreadable, or (a complete generation) not the size and sha256 its ``_SUCCESS`` recorded
    (``storage.artifact_damage``)."""
    return storage.artifact_damage(run, generation, [o for stage in table.TABLE for o in stage.outputs])


def remove_damaged(run: RunDir, generation: int) -> list[str]:
    """Deletes the outputs of every stage of an incomplete ``generation`` with an unreadable
    artifact, so that its stage runs again; returns one line per file removed."""
    lines = []
    for name, reason in damaged(run, generation).items():
        stage = table.stage_of(name)
        for output in stage.outputs:
            artifact_path(run.gen(generation), output).unlink(missing_ok=True)
        lines.append(f"removed damaged {run.gen(generation).name}/{name}.parquet ({reason}): recomputing {stage.name}")
    return lines


def _compute(run: RunDir, generation: int, stage: table.Stage, dirs: dict[str, Path] | None = None) -> tuple:
    """The stage's output frames, from its inputs (``dirs``: other paths for its directories)."""
    kwargs = {i: (dirs or {}).get(i) or resolve_input(run, generation, i) for i in stage.inputs}
    kwargs |= {n: _heavy(run, generation, n) for n in stage.needs}
    result = stage.fn(**kwargs, config=run.config(), generation=generation)
    frames = (result,) if len(stage.outputs) == 1 else tuple(result)
    if len(frames) != len(stage.outputs):
        raise TypeError(f"stage {stage.name!r} returned {len(frames)} frames for outputs {stage.outputs}")
    return frames


def run_stage(run: RunDir, generation: int, name: str) -> dict:
    """Computes stage ``name`` of ``generation`` unless its last artifact exists; returns
    its record: stage, generation, cached, seconds, and each output's path and rows."""
    stage = table.get_stage(name)
    started = time.perf_counter()
    cached = is_done(run, generation, stage)
    if not cached:
        require_weights(run, generation, stage, f"stage {name!r} of generation {generation}")
        with attempts.stage(run.attempts_file(generation), ATTEMPT_ID, name):  # where a killed attempt was
            frames = _compute(run, generation, stage)
            attempts.note("writing", "its artifacts")
            for output, frame in zip(stage.outputs, frames, strict=True):
                run.write(generation, output, frame)
        run.log_stage(generation, name, time.perf_counter() - started)
    return {
        "stage": name,
        "generation": generation,
        "cached": cached,
        "seconds": round(time.perf_counter() - started, 3),
        "artifacts": {
            o: {"path": str(p), "rows": pq.ParquetFile(p).metadata.num_rows}
            for o in stage.outputs
            for p in [artifact_path(run.gen(generation), o)]
        },
    }


def stage_paths(run: RunDir, generation: int, stage: table.Stage) -> list[Path]:
    """Everything a done stage left in the run: its artifacts, then the directories it wrote."""
    dirs = [resolve_input(run, generation, d) for d in stage.dirs]
    return [*(artifact_path(run.gen(generation), o) for o in stage.outputs), *dirs]


def stages_done(run: RunDir, generation: int) -> list[str]:
    """The stages of ``generation`` whose outputs are complete, in table order."""
    return [s.name for s in table.TABLE if is_done(run, generation, s)]


@dataclass(frozen=True)
class RunStatus:
    run_id: str
    path: Path
    preset: str | None
    model: str
    target_generations: int
    complete: list[int]
    next_generation: int
    next_stages_done: list[str]
    stages: tuple[str, ...]
    damaged: dict[str, str]  # "gen_NNNN/<artifact>" -> why it cannot be read
    holder: str | None  # the live process working on the run, if any
    stopped: attempts.AttemptEnd | None  # how the last attempt at the next generation stopped unfinished


def run_status(run: RunDir) -> RunStatus:
    """What a run has done: complete generations, and the stages done of the next one."""
    config, info = run.config(), run.info()
    nxt = run.next_generation()
    return RunStatus(
        run_id=info["run_id"],
        path=run.root,
        preset=info.get("preset"),
        model=config.model.name,
        target_generations=config.generations,
        complete=run.complete_generations(),
        next_generation=nxt,
        next_stages_done=stages_done(run, nxt),
        stages=table.stage_names(),
        damaged={f"{run.gen(g).name}/{name}": why for g in run.generations() for name, why in damaged(run, g).items()},
        holder=holder.describe() if (holder := run.holder()) else None,
        stopped=None if holder else run.last_attempt(nxt),
    )


def parse_artifact_ref(run: RunDir, ref: str) -> tuple[int, str]:
    """``gen_0001/verdicts`` (or ``gen_0001/verdicts.parquet``) → (1, "verdicts"), checked."""
    from populora_core.config import ConfigError

    gen_name, _, name = ref.strip("/").removesuffix(".parquet").partition("/")
    outputs = [o for s in table.TABLE for o in s.outputs]
    if not re.fullmatch(r"gen_\d{4}", gen_name) or name not in outputs:
        raise ConfigError(f"--recompute {ref!r}: expected gen_NNNN/<artifact>, an artifact of {', '.join(outputs)}")
    generation = int(gen_name[4:])
    if not run.is_complete(generation):
        raise ConfigError(f"--recompute {ref}: generation {generation} is not complete; a resume recomputes it anyway")
    return generation, name


def recompute(run: RunDir, generation: int, name: str) -> str:
    """Recomputes artifact ``name`` of a complete generation from its stage's inputs and
    replaces only that file: the stage's other outputs and the adapter directories it
    writes are left as they are (those are written into a scratch directory, removed
    after). Records the new digest in ``_SUCCESS``; returns one line saying whether the
    content equals what ``_SUCCESS`` had recorded."""
    stage = table.stage_of(name)
    require_weights(run, generation, stage, f"--recompute {run.gen(generation).name}/{name}")
    recorded = run.success(generation).get("artifacts", {}).get(name, {}).get("sha256")
    scratch = run.root / f".recompute{storage.TMP_MARK}{generation}-{name}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        for d in stage.dirs:  # a copy made of links: the stage reads what is done there, writes elsewhere
            if Path(source := resolve_input(run, generation, d)).is_dir():
                links.link_tree(source, scratch / d)
        frames = _compute(run, generation, stage, {d: scratch / d for d in stage.dirs})
        path = run.write(generation, name, frames[stage.outputs.index(name)])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    storage.reseal(run, generation, [name])
    same = storage.file_digest(path)["sha256"] == recorded
    verdict = "identical to the content _SUCCESS recorded" if same else "differs from the sha256 _SUCCESS recorded"
    return f"recomputed {run.gen(generation).name}/{name}.parquet (stage {stage.name}): {verdict}"


def require_weights(run: RunDir, generation: int, stage: table.Stage, purpose: str) -> None:
    """Raises PrunedSnapshot when ``stage`` of ``generation`` needs adapter weights that
    `populora prune` removed: snapshot ``generation`` (a backend, the trainer, the members'
    directory) or the ``updated/`` directory it reads and does not write itself (pruned with
    the next snapshot; the update stage writes it)."""
    if {"backend", "trainer"} & set(stage.needs) or "members_dir" in stage.inputs:
        storage.require_snapshot(run, generation, purpose)
    if "updated_dir" in stage.inputs and "updated_dir" not in stage.dirs and not run.updated(generation).is_dir():
        storage.require_snapshot(run, generation + 1, purpose)
        raise storage.PrunedSnapshot(f"{purpose} needs {run.updated(generation)}, which is missing")


def damaged_complete(run: RunDir) -> dict[str, str]:
    """``gen_NNNN/<artifact>`` → what is wrong, over the run's complete generations."""
    return {f"{run.gen(g).name}/{n}": why for g in run.complete_generations() for n, why in damaged(run, g).items()}


def check_intact(run: RunDir, recompute: list[str] | tuple[str, ...] = ()) -> None:
    """Raises DamagedArtifact naming the first damaged artifact of a complete generation and
    the command that recomputes it (and how many more there are); artifacts ``recompute``
    names (``gen_0001/verdicts``, checked) are left out: they are about to be recomputed."""
    skip = {f"{run.gen(g).name}/{n}" for g, n in (parse_artifact_ref(run, ref) for ref in recompute)}
    found = {ref: why for ref, why in damaged_complete(run).items() if ref not in skip}
    if found:
        ref, why = next(iter(found.items()))
        more = f" ({len(found) - 1} more: populora status {run.root})" if len(found) > 1 else ""
        generation, name = int(ref[4:8]), ref.split("/", 1)[1]
        path = artifact_path(run.gen(generation), name)
        raise DamagedArtifact(path, why, run.recompute_command(generation, name) + more)
