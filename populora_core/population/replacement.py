"""Replacement every k generations: the weakest of each sub-population give way
to children of the strongest, made by one operator drawn from the configured mix.

Per role (teachers, students), with n members:
- the bottom max(1, ⌊replace_fraction·n⌋) by conservative rank μ − 3σ (ties by
  id) are replaced, keeping at least one member; a child still in its
  ``grace_rounds`` is spared (and nobody is culled in its place): it starts with a
  larger σ than its parents, so μ − 3σ ranks it below a parent it plays exactly as
  well as until its own matches have shrunk σ;
- parents come from the top max(1, ⌈parent_fraction·n⌉) of the survivors; a
  crossover's second parent may also be a **hall of fame** entry: the role's best
  member as it was at an earlier round (``hall_of_fame`` newest kept), so a role
  with a single parent can still cross;
- a child starts at μ = mean of its parents' μ and σ = min(σ₀, max parent σ + boost):
  close to its parents' skill but uncertain, so it is re-rated quickly.
Every replacement is a row of lineage.parquet; a hall entry is named
``<adapter id>@g<generation>`` there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

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


def in_grace(member: Member, generation: int, config: EvolutionConfig) -> bool:
    """A child (not a founder) born fewer than ``grace_rounds`` replacement rounds before the
    round after ``generation``: it has played ``generation + 1 − birth`` generations, k per round."""
    age = generation + 1 - member.birth_generation
    return member.operator != "init" and age <= config.grace_rounds * config.every_k


def hall_entry_id(adapter_id: str, generation: int) -> str:
    """The name of ``adapter_id``'s hall-of-fame snapshot taken for generation ``generation``."""
    return f"{adapter_id}@g{generation:04d}"


def is_hall_entry(adapter_id: str) -> bool:
    """Whether ``adapter_id`` names a hall-of-fame snapshot rather than a member."""
    return "@" in adapter_id


def hall_entry_adapter(entry_id: str) -> str:
    """The adapter a hall entry (or a member id, unchanged) was taken from."""
    return entry_id.split("@", 1)[0]


def next_hall(
    hall: Sequence[Member], members: Sequence[Member], config: EvolutionConfig, generation: int
) -> list[Member]:
    """The hall of fame after the round that ends ``generation``: each role's best member (by
    μ − 3σ) added as it is now (named by ``hall_entry_id``; its ``birth_generation`` is the
    generation the snapshot was taken for, generation + 1), newest ``hall_of_fame`` kept per role."""
    if config.hall_of_fame <= 0:
        return []
    out: list[Member] = []
    for role in ("teacher", "student"):
        group = [m for m in members if m.role == role]
        mine = [h for h in hall if h.role == role]
        if group:
            best = max(group, key=lambda m: (m.conservative, m.adapter_id))
            entry = replace(
                best, adapter_id=hall_entry_id(best.adapter_id, generation + 1), birth_generation=generation + 1
            )
            mine = [h for h in mine if h.adapter_id != entry.adapter_id] + [entry]
        out += sorted(mine, key=lambda h: (-h.birth_generation, h.adapter_id))[: config.hall_of_fame]
    return out


def _role_plans(
    group: list[Member], hall: list[Member], config: EvolutionConfig, generation: int, ops: list[str], rng
) -> list[ReplacementPlan]:
    """The plans of one role; ``group`` sorted weakest first."""
    n = len(group)
    n_replace = min(n - 1, max(1, math.floor(config.replace_fraction * n)))
    losers = [m for m in group[:n_replace] if not in_grace(m, generation, config)]
    survivors = [m for m in group if m not in losers]
    pool = survivors[::-1][: max(1, math.ceil(config.parent_fraction * n))]  # best first
    partners = pool + hall
    choices = [op for op in ops if op in MUTATIONS] if len(partners) == 1 else ops
    if not choices:
        choices = ops  # only crossovers configured and one parent: it is crossed with itself
    weights = np.array([config.operator_mix[op] for op in choices], dtype=float)
    plans = []
    for j, loser in enumerate(losers):
        op = choices[int(rng.choice(len(choices), p=weights / weights.sum()))]
        first = pool[int(rng.integers(len(pool)))]
        if op in MUTATIONS:
            parents: tuple[Member, ...] = (first,)
        else:
            others = [p for p in partners if p.adapter_id != first.adapter_id] or [first]
            second = others[int(rng.integers(len(others)))]
            parents = tuple(sorted((first, second), key=lambda m: -m.conservative))
        plans.append(ReplacementPlan(loser, f"{loser.role}-g{generation + 1:04d}-{j}", op, parents))
    return plans


def plan_replacements(
    members: Sequence[Member],
    config: EvolutionConfig,
    generation: int,
    rng: np.random.Generator,
    hall: Sequence[Member] = (),
) -> list[ReplacementPlan]:
    """Who is replaced, by whom, with which operator. Deterministic given ``rng``.
    ``hall``: the hall of fame of earlier rounds (``next_hall``), crossover partners only."""
    ops = sorted(op for op, w in config.operator_mix.items() if w > 0)
    plans: list[ReplacementPlan] = []
    for role in ("teacher", "student"):
        group = sorted((m for m in members if m.role == role), key=lambda m: (m.conservative, m.adapter_id))
        if len(group) < 2 or config.replace_fraction <= 0:
            continue
        plans += _role_plans(group, [h for h in hall if h.role == role], config, generation, ops, rng)
    return plans


def replace_weakest(
    members: Sequence[Member],
    adapters: Mapping[str, LoraAdapter],
    config: EvolutionConfig,
    rating: RatingConfig,
    generation: int,
    run_seed: int,
    hall: Sequence[Member] = (),
) -> tuple[list[Member], dict[str, LoraAdapter], pd.DataFrame]:
    """Applies one round of replacement. Returns the new members (same order,
    replaced ones swapped for their children), their adapters, and the lineage rows.
    ``adapters`` holds every member's and every ``hall`` entry's adapter."""
    rng = numpy_generator(run_seed, generation, "evolve-plan")
    plans = plan_replacements(members, config, generation, rng, hall)
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
