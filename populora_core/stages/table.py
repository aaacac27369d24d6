"""The stage table: what each stage of a generation reads, writes, needs and computes.

Resume, replay, status, the Prefect tasks and the UI all read ``TABLE``; a new
stage is one entry here and one function. A stage's function is called with
keyword arguments, one per name in ``inputs`` and ``needs``, plus ``config`` and
``generation``; it returns its output frames, in ``outputs`` order (a single
frame for one output). The names an input can take are ``runner.INPUTS`` (the
population, the buffers, paths of the run directory) or any artifact name (that
artifact of the same generation).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Need = Literal["backend", "pool", "trainer"]
"""Heavy objects a stage is handed (``runtime.Runtime``): a generation ``inference.base.GenerationBackend``
serving this generation's adapters, a ``sandbox.SandboxPool``, a ``training.trainer.TrainerPool``
(``Trainer`` in this process, ``cluster.RayTrainer`` on Ray)."""


@dataclass(frozen=True)
class Stage:
    """One stage of a generation."""

    name: str
    impl: Callable[..., object] | str
    """Computes the outputs from the inputs (plain frames, members, paths): the function, or
    ``"module.function"`` in ``populora_core.stages``, imported when ``fn`` is first read so that
    reading the table (the CLI's help, its subcommands' choices) does not import torch."""
    inputs: tuple[str, ...]
    """What ``fn`` reads (keyword arguments)."""
    outputs: tuple[str, ...]
    """Artifacts written, in order; the last one marks the stage done."""
    dirs: tuple[str, ...] = ()
    """Directories of the run ``fn`` writes adapters into (inputs naming paths), written
    before the artifacts: replay links them with the outputs."""
    needs: tuple[Need, ...] = ()
    """The heavy objects ``fn`` is handed; where they run (this process, or the Ray
    cluster's nodes with what ``cluster.<key>`` asks for) is the engine's business."""

    @property
    def fn(self) -> Callable[..., object]:
        """The stage's function."""
        if not isinstance(self.impl, str):
            return self.impl
        module, name = self.impl.rsplit(".", 1)
        return getattr(importlib.import_module(f"populora_core.stages.{module}"), name)


TABLE: tuple[Stage, ...] = (
    Stage("pair", "play.pair", ("members",), ("pairings",)),
    Stage("propose", "play.propose", ("members", "start_buffers"), ("proposals",), needs=("backend",)),
    Stage(
        "validate",
        "play.validate",
        ("proposals", "start_buffers", "centroids", "calibration"),
        ("problems",),
        needs=("pool",),
    ),
    Stage("solve", "play.solve", ("problems", "pairings"), ("rollouts",), needs=("backend",)),
    Stage("probe", "probe.probe", ("members", "base_probes"), ("probes",), needs=("backend", "pool")),
    Stage("verify", "play.verify", ("rollouts", "problems"), ("verdicts",), needs=("pool",)),
    Stage("reward", "learn.reward", ("proposals", "problems", "rollouts", "verdicts"), ("rewards",)),
    Stage(
        "update",
        "learn.update",
        ("members", "members_dir", "rewards", "proposals", "rollouts", "updated_dir"),
        ("train_metrics",),
        dirs=("updated_dir",),
        needs=("trainer",),
    ),
    Stage("rate", "learn.rate", ("members", "verdicts"), ("matches", "ratings")),
    Stage(
        "evolve",
        "evolve.evolve",
        ("members", "members_dir", "updated_dir", "ratings", "next_members_dir"),
        ("lineage",),
        dirs=("next_members_dir",),
    ),
    Stage(
        "measure",
        "measure.measure",
        ("start_buffers", "problems", "verdicts", "lineage", "next_members", "earlier_cells"),
        ("buffers", "coverage"),
    ),
)
"""pair → propose → validate → solve → probe → verify → reward → update → rate → evolve → measure"""


def stage_names() -> tuple[str, ...]:
    return tuple(s.name for s in TABLE)


def get_stage(name: str) -> Stage:
    """The stage called ``name``; a miss lists the stages."""
    for stage in TABLE:
        if stage.name == name:
            return stage
    raise KeyError(f"unknown stage {name!r}; stages: {', '.join(stage_names())}")


def stage_of(artifact: str) -> Stage:
    """The stage that writes ``artifact``."""
    for stage in TABLE:
        if artifact in stage.outputs:
            return stage
    raise KeyError(f"no stage writes {artifact!r}")
