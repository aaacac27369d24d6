"""Replacement of the weakest by children of the strongest."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from populora_core.config import EvolutionConfig, RatingConfig
from populora_core.population.adapters import Member
from populora_core.population.replacement import is_evolution_generation, plan_replacements, replace_weakest
from populora_core.rundir.artifacts import write_parquet_atomic
from tests.core.population.conftest import random_adapter


def population():
    members = [Member(f"teacher-{i}", "teacher", 0, 20.0 + i, 2.0) for i in range(4)]
    members += [Member(f"student-{i}", "student", 0, 30.0 - i, 1.0 + i) for i in range(4)]
    return members, {m.adapter_id: random_adapter(i) for i, m in enumerate(members)}


def test_replacement_picks_the_lowest_conservative_ranks():
    members, _ = population()
    plans = plan_replacements(members, EvolutionConfig(replace_fraction=0.5), 3, np.random.default_rng(0))
    replaced = {p.replaced.adapter_id for p in plans}
    assert replaced == {"teacher-0", "teacher-1", "student-3", "student-2"}
    for plan in plans:
        assert all(parent.role == plan.replaced.role for parent in plan.parents)
        assert not {parent.adapter_id for parent in plan.parents} & replaced


def test_evolve_writes_lineage_and_rates_children_by_the_rule(tmp_path):
    members, adapters = population()
    config = EvolutionConfig(replace_fraction=0.25, child_sigma_boost=1.0)
    new_members, new_adapters, lineage = replace_weakest(members, adapters, config, RatingConfig(), 3, run_seed=0)
    assert len(lineage) == 2 and set(lineage["role"]) == {"teacher", "student"}
    ids = {m.adapter_id for m in members}
    by_id = {m.adapter_id: m for m in members}
    for row in lineage.itertuples():
        assert row.replaced_id in ids and set(row.parents) <= ids and row.child_id not in ids
        assert row.operator in config.operator_mix and isinstance(json.loads(row.params), dict)
        parents = [by_id[p] for p in row.parents]
        assert row.child_mu == np.mean([p.mu for p in parents])
        assert row.child_sigma == min(25 / 3, max(p.sigma for p in parents) + 1.0)
        child = next(m for m in new_members if m.adapter_id == row.child_id)
        assert child.birth_generation == 4 and child.parents == tuple(row.parents)
        assert row.child_id in new_adapters and row.replaced_id not in new_adapters
    assert len(new_members) == len(members)
    again = replace_weakest(members, adapters, config, RatingConfig(), 3, run_seed=0)[2]
    assert again.drop(columns=["params"]).equals(lineage.drop(columns=["params"]))
    path = write_parquet_atomic(lineage, tmp_path / "lineage.parquet")
    stored = pd.read_parquet(path)
    assert stored["child_id"].tolist() == lineage["child_id"].tolist()
    assert stored["parents"].map(list).tolist() == lineage["parents"].tolist()


def test_operator_mix_is_respected_and_single_agent_is_never_replaced():
    members, adapters = population()
    config = EvolutionConfig(replace_fraction=0.5, operator_mix={"X4": 1.0})
    _, _, lineage = replace_weakest(members, adapters, config, RatingConfig(), 1, run_seed=5)
    assert set(lineage["operator"]) == {"X4"}
    agent = [Member("agent", "teacher", 0, 25.0, 8.0, roles=("teacher", "student"))]
    assert plan_replacements(agent, EvolutionConfig(), 1, np.random.default_rng(0)) == []


def test_evolution_schedule():
    config = EvolutionConfig(every_k=2)
    assert [g for g in range(6) if is_evolution_generation(g, config)] == [1, 3, 5]
