"""Replay: a new run that reuses a run's stored artifacts up to a stage.

``prepare_replay`` builds NEW_RUN from RUN: the configuration with overrides
applied, every generation before ``generation`` and, in ``generation``, what the
stages before ``from_stage`` left (their artifacts and adapter directories, as
the stage table declares them; hard links: artifacts are never modified in place,
only replaced). Running the generation flow on NEW_RUN then recomputes
``from_stage`` onwards (e.g. rewards under another teacher reward, ratings under
another threshold, evolution with another operator mix) without regenerating
anything upstream.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from populora_core.config import ConfigError, load_config
from populora_core.runs import RunDir, build_run, check_run_id
from populora_core.stages import runner, table


def _link(src: Path, dst: Path) -> None:
    """Hard links of ``src`` (a file or a tree) at ``dst``; copies where linking fails."""

    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    dst.parent.mkdir(parents=True, exist_ok=True)
    if Path(src).is_dir():
        shutil.copytree(src, dst, copy_function=link)
    else:
        link(str(src), str(dst))


def prepare_replay(
    source: RunDir,
    out: Path,
    *,
    from_stage: str,
    generation: int,
    overrides: list[str] | tuple[str, ...] = (),
) -> RunDir:
    """Creates run ``out`` ready to recompute ``generation`` from ``from_stage``; returns it."""
    names = table.stage_names()
    if from_stage not in names:
        raise ConfigError(f"unknown stage {from_stage!r}; stages: {', '.join(names)}")
    out = Path(out)
    check_run_id(out.name)
    if out.exists():
        raise ConfigError(f"{out} already exists; choose another --out")
    if generation < 0 or not source.members_dir(generation).is_dir():
        raise ConfigError(f"run {source.root} has no generation {generation}")
    config = load_config(source.config_file, overrides=overrides)
    upstream = table.TABLE[: names.index(from_stage)]
    for stage in upstream:
        if not runner.is_done(source, generation, stage):
            raise ConfigError(
                f"generation {generation} of {source.root} has no {stage.outputs[-1]}.parquet: "
                f"stage {stage.name!r} never completed"
            )

    def fill(new: RunDir) -> None:
        for path in (source.centroids_file, source.calibration_file):
            if path.is_file():
                _link(path, new.root / path.name)
        for g in range(generation + 1):
            _link(source.members_dir(g), new.members_dir(g))
        for g in range(generation):
            _link(source.gen(g), new.gen(g))
        for stage in upstream:
            for src, dst in zip(
                runner.stage_paths(source, generation, stage), runner.stage_paths(new, generation, stage), strict=True
            ):
                _link(src, dst)

    info = {k: v for k, v in source.info().items() if k != "run_id"} | {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "replay_of": str(source.root.resolve()),
        "replay_from": {"stage": from_stage, "generation": generation, "overrides": list(overrides)},
    }
    return build_run(out, config, info, fill)
