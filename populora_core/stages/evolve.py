"""Evolve: the next generation's population.

Ratings applied to every member; on every k-th generation the weakest of each role
replaced by children of the strongest (``population.replacement``), made in LoRA
weight space by one operator of the configured mix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from populora_core.config import RunConfig
from populora_core.population.adapters import Member, load_adapter, save_population
from populora_core.population.lora import LoraAdapter
from populora_core.population.replacement import is_evolution_generation, replace_weakest
from populora_core.rundir.artifacts import columns


def next_population(
    members: Sequence[Member], updated_dir: Path, ratings: pd.DataFrame, config: RunConfig, generation: int
) -> tuple[list[Member], Mapping[str, LoraAdapter], pd.DataFrame]:
    """(members, adapters, lineage) of the next generation, from the updated adapters."""
    rated = ratings.set_index("adapter_id")
    members = [
        replace(m, mu=float(rated.loc[m.adapter_id, "mu"]), sigma=float(rated.loc[m.adapter_id, "sigma"]))
        for m in members
    ]
    adapters = {m.adapter_id: load_adapter(Path(updated_dir) / m.adapter_id) for m in members}
    if not is_evolution_generation(generation, config.evolution) or config.population.single_agent:
        return members, adapters, pd.DataFrame(columns=columns("lineage"))
    new_members, new_adapters, lineage = replace_weakest(
        members, adapters, config.evolution, config.rating, generation, config.seed
    )
    return new_members, new_adapters, lineage[columns("lineage")]


def evolve(
    *,
    members: Sequence[Member],
    updated_dir: Path,
    ratings: pd.DataFrame,
    next_members_dir: Path,
    config: RunConfig,
    generation: int,
) -> pd.DataFrame:
    """Writes the next generation's snapshot into ``next_members_dir`` (surviving members
    hard-linked from ``updated_dir`` with their optimizer states, children written);
    returns the lineage of this generation's replacements."""
    new_members, adapters, lineage = next_population(members, updated_dir, ratings, config, generation)
    save_population(
        next_members_dir,
        generation + 1,
        new_members,
        adapters,
        base_model=config.model.name,
        link_from=updated_dir,
    )
    return lineage
