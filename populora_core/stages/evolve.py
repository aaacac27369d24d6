"""Evolve: the next generation's population.

Ratings applied to every member; on every k-th generation the weakest of each role
replaced by children of the strongest (``population.replacement``), made in LoRA
weight space by one operator of the configured mix, and each role's best kept in the
hall of fame (crossover partners of later rounds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from populora_core.config import RunConfig
from populora_core.population.adapters import HALL_DIR, Member, load_adapter, load_hall, save_population
from populora_core.population.lora import LoraAdapter
from populora_core.population.replacement import (
    hall_entry_adapter,
    is_evolution_generation,
    next_hall,
    replace_weakest,
)
from populora_core.rundir.artifacts import columns


def rated(members: Sequence[Member], ratings: pd.DataFrame) -> list[Member]:
    """``members`` with their μ and σ after this generation's matches."""
    by_id = ratings.set_index("adapter_id")
    return [
        replace(m, mu=float(by_id.loc[m.adapter_id, "mu"]), sigma=float(by_id.loc[m.adapter_id, "sigma"]))
        for m in members
    ]


def next_population(
    members: Sequence[Member],
    updated_dir: Path,
    config: RunConfig,
    generation: int,
    hall: Mapping[Member, Path] | None = None,
) -> tuple[list[Member], Mapping[str, LoraAdapter], pd.DataFrame]:
    """(members, adapters, lineage) of the next generation from the rated members and their
    updated adapters; ``hall`` (entry → its adapter directory) are crossover partners."""
    adapters = {m.adapter_id: load_adapter(Path(updated_dir) / m.adapter_id) for m in members}
    if not is_evolution_generation(generation, config.evolution) or config.population.single_agent:
        return list(members), adapters, pd.DataFrame(columns=columns("lineage"))
    hall = hall or {}
    partners = {h.adapter_id: load_adapter(path) for h, path in hall.items()}
    new_members, new_adapters, lineage = replace_weakest(
        members, {**adapters, **partners}, config.evolution, config.rating, generation, config.seed, list(hall)
    )
    return new_members, new_adapters, lineage[columns("lineage")]


def hall_of_fame(
    members: Sequence[Member], members_dir: Path, updated_dir: Path, config: RunConfig, generation: int
) -> tuple[dict[Member, Path], dict[Member, Path]]:
    """(the hall this round's parents are drawn from, the next snapshot's hall), each entry
    with the adapter directory its weights are linked from: carried entries from this
    snapshot's ``hall/``, a round's new entries from ``updated/``."""
    hall = {h: Path(members_dir) / HALL_DIR / h.adapter_id for h in load_hall(members_dir)}
    if config.population.single_agent or not is_evolution_generation(generation, config.evolution):
        return hall, hall
    by_id = {h.adapter_id: path for h, path in hall.items()}
    after = {
        h: by_id.get(h.adapter_id, Path(updated_dir) / hall_entry_adapter(h.adapter_id))
        for h in next_hall(list(hall), members, config.evolution, generation)
    }
    return hall, after


def evolve(
    *,
    members: Sequence[Member],
    members_dir: Path,
    updated_dir: Path,
    ratings: pd.DataFrame,
    next_members_dir: Path,
    config: RunConfig,
    generation: int,
) -> pd.DataFrame:
    """Writes the next generation's snapshot into ``next_members_dir`` (surviving members
    hard-linked from ``updated_dir`` with their optimizer states, children written, the hall
    of fame linked); returns the lineage of this generation's replacements."""
    members = rated(members, ratings)
    hall, kept = hall_of_fame(members, members_dir, updated_dir, config, generation)
    new_members, adapters, lineage = next_population(members, updated_dir, config, generation, hall)
    save_population(
        next_members_dir,
        generation + 1,
        new_members,
        adapters,
        base_model=config.model.name,
        link_from=updated_dir,
        hall=kept if kept or hall else None,
    )
    return lineage
