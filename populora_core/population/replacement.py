"""Replacement every k generations: the weakest of each sub-population give way
to children of the strongest, made by one operator drawn from the configured mix.

Per role (teachers, students), with n members:
- the bottom max(1, ⌊replace_fraction·n⌋) by conservative rank μ − 3σ (ties by
  id) are replaced, keeping at least one member;
- parents come from the top max(1, ⌈parent_fraction·n⌉) of the survivors;
- a child starts at μ = mean of its parents' μ and σ = min(σ₀, max parent σ + boost):
  close to its parents' skill but uncertain, so it is re-rated quickly.
Every replacement is a row of lineage.parquet.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from populora_core.config import EvolutionConfig, RatingConfig
from populora_core.population.adapters import Member
from populora_core.population.evolution.operators import MUTATIONS, apply_operator
from populora_core.population.lora import LoraAdapter
from populora_core.rundir.artifacts import columns
from populora_core.seeding import numpy_generator, torch_generator


@dataclass(frozen=True)
class ReplacementPlan:
    replaced: Member
    child_id: str
    operator: str
    parents: tuple[Member, ...]


def is_evolution_generation(generation: int, config: EvolutionConfig) -> bool:
    """Evolution runs after generations k−1, 2k−1, … (every k-th generation, 0-based)."""
    return (generation + 1) % config.every_k == 0


def plan_replacements(
    members: Sequence[Member], config: EvolutionConfig, generation: int, rng: np.random.Generator
) -> list[ReplacementPlan]:
    """Who is replaced, by whom, with which operator. Deterministic given ``rng``."""
    ops = sorted(op for op, w in config.operator_mix.items() if w > 0)
    plans: list[ReplacementPlan] = []
    for role in ("teacher", "student"):
        group = sorted((m for m in members if m.role == role), key=lambda m: (m.conservative, m.adapter_id))
        n = len(group)
        if n < 2 or config.replace_fraction <= 0:
            continue
        n_replace = min(n - 1, max(1, math.floor(config.replace_fraction * n)))
        survivors = group[n_replace:]
        pool = survivors[::-1][: max(1, math.ceil(config.parent_fraction * n))]  # best first
        choices = [op for op in ops if op in MUTATIONS] if len(pool) == 1 else ops
        if not choices:
            choices = ops  # only crossovers configured and one parent: it is crossed with itself
        weights = np.array([config.operator_mix[op] for op in choices], dtype=float)
        for j, loser in enumerate(group[:n_replace]):
            op = choices[int(rng.choice(len(choices), p=weights / weights.sum()))]
            if op in MUTATIONS:
                parents = (pool[int(rng.integers(len(pool)))],)
            else:
                idx = rng.choice(len(pool), size=2, replace=len(pool) < 2)
                parents = tuple(sorted((pool[int(i)] for i in idx), key=lambda m: -m.conservative))
            plans.append(ReplacementPlan(loser, f"{role}-g{generation + 1:04d}-{j}", op, parents))
    return plans


def replace_weakest(
    members: Sequence[Member],
    adapters: Mapping[str, LoraAdapter],
    config: EvolutionConfig,
    rating: RatingConfig,
    generation: int,
    run_seed: int,
) -> tuple[list[Member], dict[str, LoraAdapter], pd.DataFrame]:
    """Applies one round of replacement. Returns the new members (same order,
    replaced ones swapped for their children), their adapters, and the lineage rows."""
    plans = plan_replacements(members, config, generation, numpy_generator(run_seed, generation, "evolve-plan"))
    by_loser = {p.replaced.adapter_id: p for p in plans}
    new_members: list[Member] = []
    new_adapters: dict[str, LoraAdapter] = {}
    rows = []
    for m in members:
        plan = by_loser.get(m.adapter_id)
        if plan is None:
            new_members.append(m)
            new_adapters[m.adapter_id] = adapters[m.adapter_id]
            continue
        gen = torch_generator(run_seed, generation, plan.child_id, "evolve")
        child, params = apply_operator(
            plan.operator,
            [adapters[p.adapter_id] for p in plan.parents],
            gen,
            config.operator_params.get(plan.operator),
        )
        mu = float(np.mean([p.mu for p in plan.parents]))
        sigma = min(rating.sigma, max(p.sigma for p in plan.parents) + config.child_sigma_boost)
        parent_ids = tuple(p.adapter_id for p in plan.parents)
        new_members.append(
            Member(plan.child_id, m.role, generation + 1, mu, sigma, parents=parent_ids, operator=plan.operator)
        )
        new_adapters[plan.child_id] = child
        rows.append(
            {
                "child_id": plan.child_id,
                "role": m.role,
                "parents": list(parent_ids),
                "operator": plan.operator,
                "params": json.dumps(params, sort_keys=True),
                "replaced_id": m.adapter_id,
                "replaced_conservative": m.conservative,
                "child_mu": mu,
                "child_sigma": sigma,
            }
        )
    lineage = pd.DataFrame(rows, columns=columns("lineage"))
    return new_members, new_adapters, lineage
