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

import time
from pathlib import Path

from populora_core.config import ConfigError, load_config
from populora_core.run import RunDir, build_run, check_run_id
from populora_core.rundir.links import link_tree
from populora_core.rundir.storage import optimizer_dropped
from populora_core.stages import runner, table


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
    # on this machine unless the overrides say otherwise: a replay is offline analysis
    config = load_config(source.config_file, overrides=["cluster.engine=local", "cluster.address=''", *overrides])
    upstream = table.TABLE[: names.index(from_stage)]
    require_weights(source, generation, table.TABLE[names.index(from_stage) :])
    for stage in upstream:
        if not runner.is_done(source, generation, stage):
            raise ConfigError(
                f"generation {generation} of {source.root} has no {stage.outputs[-1]}.parquet: "
                f"stage {stage.name!r} never completed"
            )

    def fill(new: RunDir) -> None:
        for path in (source.centroids_file, source.calibration_file):
            if path.is_file():
                link_tree(path, new.root / path.name)
        for g in range(generation + 1):
            link_tree(source.members_dir(g), new.members_dir(g))
        for g in range(generation):
            link_tree(source.gen(g), new.gen(g))
        for stage in upstream:
            for src, dst in zip(
                runner.stage_paths(source, generation, stage), runner.stage_paths(new, generation, stage), strict=True
            ):
                link_tree(src, dst)

    # a replay is a new run: its own tracking runs (populora_core/tracking.py), not the source's
    info = {k: v for k, v in source.info().items() if k not in ("run_id", "tracking")} | {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "replay_of": str(source.root.resolve()),
        "replay_from": {"stage": from_stage, "generation": generation, "overrides": list(overrides)},
    }
    return build_run(out, config, info, fill)


def require_weights(source: RunDir, generation: int, stages: list[table.Stage]) -> None:
    """Raises PrunedSnapshot when the stages to recompute need adapter weights of ``source``
    that `populora prune` removed (``runner.require_weights`` per stage, up to the stage that
    writes ``updated/`` itself: later ones read the replay's own)."""
    for stage in stages:
        runner.require_weights(source, generation, stage, f"replaying generation {generation} from {stages[0].name!r}")
        if "updated_dir" in stage.dirs:
            break


def replay_warnings(source: RunDir, generation: int, from_stage: str) -> list[str]:
    """What a replay cannot reproduce exactly: an update from a snapshot whose optimizer
    state was not kept starts AdamW afresh."""
    names = table.stage_names()
    keep = f"storage.optimizer_snapshots: {source.config().storage.optimizer_snapshots}"
    if names.index(from_stage) <= names.index("update") and optimizer_dropped(source, generation):
        return [
            f"snapshot gen_{generation:04d} keeps no optimizer state ({keep}): the replayed update starts AdamW "
            "afresh, so its adapters differ from the original run's; keep every snapshot's with "
            "storage.optimizer_snapshots=0"
        ]
    if names.index(from_stage) > names.index("update") and optimizer_dropped(source, generation + 1):
        return [
            f"the updated adapters of generation {generation} keep no optimizer state ({keep}): a later "
            "`populora resume` of the replayed run starts AdamW afresh"
        ]
    return []
