"""Replay: a new run that reuses a run's stored artifacts up to a stage.

``prepare_replay`` builds NEW_RUN from RUN: the configuration with overrides
applied, every generation before ``generation`` and, in ``generation``, the
artifacts of the stages before ``from_stage`` (hard links: artifacts are never
modified in place, only replaced). Running the generation flow on NEW_RUN then
recomputes ``from_stage`` onwards (e.g. rewards under another teacher reward,
ratings under another threshold, evolution with another operator mix) without
regenerating anything upstream.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path

from populora_core.artifacts import TMP_MARK, RunDir, artifact_path
from populora_core.config import ConfigError, config_to_yaml, load_config
from populora_core.runs import check_run_id
from populora_core.stages import STAGE_OUTPUTS, STAGES


def _link_tree(src: Path, dst: Path) -> None:
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link)


def _link_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def prepare_replay(
    source: RunDir,
    out: Path,
    *,
    from_stage: str,
    generation: int,
    overrides: list[str] | tuple[str, ...] = (),
) -> RunDir:
    """Creates run ``out`` ready to recompute ``generation`` from ``from_stage``; returns it."""
    if from_stage not in STAGES:
        raise ConfigError(f"unknown stage {from_stage!r}; stages: {', '.join(STAGES)}")
    out = Path(out)
    check_run_id(out.name)
    if out.exists():
        raise ConfigError(f"{out} already exists; choose another --out")
    if generation < 0 or not source.members_dir(generation).is_dir():
        raise ConfigError(f"run {source.root} has no generation {generation}")
    config = load_config(source.config_file, overrides=overrides)
    first = STAGES.index(from_stage)
    for stage in STAGES[:first]:
        last = STAGE_OUTPUTS[stage][-1]
        if not artifact_path(source.gen(generation), last).is_file():
            raise ConfigError(
                f"generation {generation} of {source.root} has no {last}.parquet: stage {stage!r} never completed"
            )

    tmp = out.with_name(f".{out.name}{TMP_MARK}{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        new = RunDir(tmp)
        new.config_file.write_text(config_to_yaml(config))
        info = source.info() | {
            "run_id": out.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "replay_of": str(source.root.resolve()),
            "replay_from": {"stage": from_stage, "generation": generation, "overrides": list(overrides)},
        }
        new.run_file.write_text(json.dumps(info, indent=2))
        if source.centroids_file.is_file():
            _link_file(source.centroids_file, new.centroids_file)
        for g in range(generation + 1):
            _link_tree(source.members_dir(g), new.members_dir(g))
        for g in range(generation):
            _link_tree(source.gen(g), new.gen(g))
        for stage in STAGES[:first]:
            for name in STAGE_OUTPUTS[stage]:
                _link_file(artifact_path(source.gen(generation), name), artifact_path(new.gen(generation), name))
            if stage == "update":
                _link_tree(source.updated(generation), new.updated(generation))
            if stage == "evolve":
                _link_tree(source.members_dir(generation + 1), new.members_dir(generation + 1))
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return RunDir(out)
