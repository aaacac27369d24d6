"""One Prefect task per stage of a generation.

Each task takes only ``(run_dir, generation)``, reads its inputs from the run's
Parquet artifacts, calls one function of ``populora_core.stages``, writes its
artifact(s) atomically and returns a small record (paths, row counts, seconds).

The artifacts are the cache: a task whose artifact already exists returns at once
(``cached: true``) without recomputing, which is how a retried flow run or
``populora resume`` continues from the first incomplete stage. Keys are paths
inside the run directory, so two runs never share results.

``POPULORA_FAULT=<stage>@<generation>`` makes the process SIGKILL itself while
writing that stage's artifact (half a temp file on disk): the crash tests use it
to kill the flow during each stage in turn. With ``POPULORA_FAULT_ONCE=<file>`` it
fires only the first time (the file records it), so a retried flow run gets through.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NO_CACHE

from populora_core import stages
from populora_core.artifacts import (
    TMP_MARK,
    RunDir,
    artifact_path,
    read_artifact,
    to_table,
    write_artifact,
)
from populora_core.config import RunConfig
from populora_core.population.adapters import POPULATION_TABLE, members_from_frame, save_population
from populora_core.runs import load_or_make_centroids, run_config
from populora_core.runtime import get_runtime

FAULT_ENV = "POPULORA_FAULT"
FAULT_ONCE_ENV = "POPULORA_FAULT_ONCE"


@functools.lru_cache(maxsize=32)
def _run_settings(config_file: str, mtime_ns: int) -> tuple[RunConfig, Path]:
    """A run's config and model path, parsed once per process (keyed by the file's mtime)."""
    run = RunDir(Path(config_file).parent)
    return run_config(run), Path(run.info()["model_path"])


def _fault_armed() -> bool:
    """With POPULORA_FAULT_ONCE=<file>, the fault fires only while the file does not exist
    (it is created first): a retried run then gets through."""
    once = os.environ.get(FAULT_ONCE_ENV)
    if not once:
        return True
    try:
        Path(once).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


class StageContext:
    """What a stage task needs: the run's paths and config, readers and a writer."""

    def __init__(self, run_dir: str | Path, generation: int, stage: str) -> None:
        self.run = RunDir(run_dir)
        self.generation = generation
        self.stage = stage
        self.dir = self.run.gen(generation)
        self._members: dict[int, list] = {}
        self.config, self.model_path = _run_settings(str(self.run.config_file), self.run.config_file.stat().st_mtime_ns)

    def read(self, name: str, generation: int | None = None) -> pd.DataFrame:
        return read_artifact(self.run.gen(self.generation if generation is None else generation), name)

    def write(self, name: str, frame: pd.DataFrame) -> Path:
        if os.environ.get(FAULT_ENV) == f"{self.stage}@{self.generation}" and _fault_armed():
            self._die_mid_write(name, frame)
        return write_artifact(frame, self.dir, name, run_id=self.run.run_id, generation=self.generation)

    def _die_mid_write(self, name: str, frame: pd.DataFrame) -> None:
        table = to_table(frame, name, run_id=self.run.run_id, generation=self.generation)
        self.dir.mkdir(parents=True, exist_ok=True)
        partial = self.dir / f".{name}.parquet{TMP_MARK}fault"
        pq.write_table(table, partial)
        with open(partial, "r+b") as fh:
            fh.truncate(max(1, partial.stat().st_size // 2))
        os.kill(os.getpid(), signal.SIGKILL)

    def members(self, generation: int | None = None):
        """The members of a population snapshot (this generation's by default), read once per task."""
        g = self.generation if generation is None else generation
        if g not in self._members:
            self._members[g] = members_from_frame(pd.read_parquet(self.run.members_dir(g) / POPULATION_TABLE))
        return self._members[g]

    def buffers(self) -> pd.DataFrame:
        """The teachers' buffers this generation draws from (seed problems at generation 0)."""
        if self.generation == 0:
            return stages.seed_buffers([m.adapter_id for m in self.members() if m.plays("teacher")])
        return self.read("buffers", self.generation - 1)

    def centroids(self) -> np.ndarray:
        """The run's CVT centroids, computed from the run seed on first use and stored."""
        return load_or_make_centroids(self.run, self.config)

    def runtime(self):
        return get_runtime(self.config, self.model_path)

    def serve_members(self):
        """The runtime, with the backend holding exactly this generation's adapters."""
        runtime = self.runtime()
        runtime.serve(stages.served_adapters(self.run.members_dir(self.generation), self.members()))
        return runtime

    def done(self) -> bool:
        return artifact_path(self.dir, stages.STAGE_OUTPUTS[self.stage][-1]).is_file()

    def record(self, *, cached: bool, seconds: float) -> dict:
        outputs = {}
        for name in stages.STAGE_OUTPUTS[self.stage]:
            path = artifact_path(self.dir, name)
            outputs[name] = {"path": str(path), "rows": pq.ParquetFile(path).metadata.num_rows}
        return {
            "stage": self.stage,
            "generation": self.generation,
            "cached": cached,
            "seconds": round(seconds, 3),
            "artifacts": outputs,
        }


def stage_task(name: str) -> Callable:
    """Makes a Prefect task of ``body(ctx)``: skipped when its artifact exists."""

    def wrap(body: Callable[[StageContext], None]):
        def run(run_dir: str, generation: int) -> dict:
            ctx = StageContext(run_dir, generation, name)
            started = time.perf_counter()
            if ctx.done():
                return ctx.record(cached=True, seconds=time.perf_counter() - started)
            body(ctx)
            return ctx.record(cached=False, seconds=time.perf_counter() - started)

        run.__doc__ = body.__doc__
        run.__name__ = run.__qualname__ = f"{name}_task"
        return task(name=name, task_run_name=f"{name}-gen{{generation}}", cache_policy=NO_CACHE)(run)

    return wrap


@stage_task("pair")
def pair(ctx: StageContext) -> None:
    """Teacher–student pairings from the generation's ratings."""
    ctx.write("pairings", stages.pair(ctx.members(), ctx.config, ctx.generation))


@stage_task("propose")
def propose(ctx: StageContext) -> None:
    """Teachers sample proposals with references from their buffers."""
    runtime = ctx.serve_members()
    frame = stages.propose(ctx.members(), ctx.buffers(), runtime.backend, ctx.config, ctx.generation)
    ctx.write("proposals", frame)


@stage_task("validate")
def validate(ctx: StageContext) -> None:
    """Proposals run in the sandbox; gold outputs; top-ups from the buffers."""
    proposals, pool = ctx.read("proposals"), ctx.runtime().pool
    frame = stages.validate(proposals, ctx.buffers(), pool, ctx.config, ctx.generation, ctx.centroids())
    ctx.write("problems", frame)


@stage_task("solve")
def solve(ctx: StageContext) -> None:
    """Students sample G solutions per problem of their paired teacher."""
    runtime = ctx.serve_members()
    frame = stages.solve(ctx.read("problems"), ctx.read("pairings"), runtime.backend, ctx.config, ctx.generation)
    ctx.write("rollouts", frame)


@stage_task("verify")
def verify(ctx: StageContext) -> None:
    """Solutions judged in the sandbox."""
    ctx.write("verdicts", stages.verify(ctx.read("rollouts"), ctx.read("problems"), ctx.runtime().pool, ctx.config))


@stage_task("reward")
def reward(ctx: StageContext) -> None:
    """Student and teacher rewards, advantages."""
    frame = stages.reward(
        ctx.read("proposals"), ctx.read("problems"), ctx.read("rollouts"), ctx.read("verdicts"), ctx.config
    )
    ctx.write("rewards", frame)


@stage_task("update")
def update(ctx: StageContext) -> None:
    """One GRPO update per adapter into gen_N/updated/."""
    frame = stages.update(
        ctx.members(),
        ctx.run.members_dir(ctx.generation),
        ctx.read("rewards"),
        ctx.read("proposals"),
        ctx.read("rollouts"),
        ctx.runtime().trainer,
        ctx.config,
        ctx.run.updated(ctx.generation),
        generation=ctx.generation,
        base_model=str(ctx.model_path),
    )
    ctx.write("train_metrics", frame)


@stage_task("rate")
def rate(ctx: StageContext) -> None:
    """TrueSkill updates from this generation's matches."""
    ratings, matches = stages.rate(ctx.members(), ctx.read("verdicts"), ctx.config)
    ctx.write("matches", matches)
    ctx.write("ratings", ratings)


@stage_task("evolve")
def evolve(ctx: StageContext) -> None:
    """The next generation's population (replacements every k generations)."""
    updated = ctx.run.updated(ctx.generation)
    members, adapters, lineage = stages.evolve(ctx.members(), updated, ctx.read("ratings"), ctx.config, ctx.generation)
    save_population(
        ctx.run.population,
        ctx.generation + 1,
        members,
        adapters,
        base_model=str(ctx.model_path),
        carry_optimizer_from=updated,
    )
    ctx.write("lineage", lineage)


@stage_task("measure")
def measure(ctx: StageContext) -> None:
    """Buffers carried to the next generation; per-teacher validity, solve rate, complexity."""
    problems = ctx.read("problems")
    buffers = stages.next_buffers(
        ctx.buffers(), problems, ctx.read("lineage"), ctx.members(ctx.generation + 1), ctx.config, ctx.generation
    )
    ctx.write("buffers", buffers)
    earlier = [ctx.read("problems", g) for g in range(ctx.generation)]
    cells = [e.loc[e["valid"] & (e["source"] == "fresh"), ["teacher_id", "cvt_cell"]] for e in earlier]
    earlier_cells = pd.concat(cells, ignore_index=True) if cells else pd.DataFrame(columns=["teacher_id", "cvt_cell"])
    summary = stages.summarize(problems, ctx.read("verdicts"), earlier_cells, ctx.config.coverage.cells)
    ctx.write("coverage", summary)


STAGE_TASKS = {
    "pair": pair,
    "propose": propose,
    "validate": validate,
    "solve": solve,
    "verify": verify,
    "reward": reward,
    "update": update,
    "rate": rate,
    "evolve": evolve,
    "measure": measure,
}
assert tuple(STAGE_TASKS) == stages.STAGES
