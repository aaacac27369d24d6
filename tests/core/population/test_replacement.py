"""Replacement of the weakest by children of the strongest."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd

from populora_core.config import EvolutionConfig, RatingConfig, load_config
from populora_core.population.adapters import (
    HALL_DIR,
    Member,
    load_adapter,
    load_hall,
    members_from_frame,
    save_adapter,
    save_population,
)
from populora_core.population.rating import update_ratings
from populora_core.population.replacement import (
    is_evolution_generation,
    is_hall_entry,
    next_hall,
    plan_replacements,
    replace_weakest,
)
from populora_core.rundir.artifacts import write_parquet_atomic
from populora_core.stages.evolve import evolve
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


def _play_alike(members: dict[str, Member], pair: tuple[str, str], teachers: list[str], generations: int) -> None:
    """``generations`` of matches in which both of ``pair`` meet the same teachers with the same
    outcomes (a win, a loss, a win per generation): they play exactly as well as each other."""
    ratings = {k: (m.mu, m.sigma) for k, m in members.items()}
    for g in range(generations):
        rows = [
            {"teacher_id": t, "student_id": s, "problem_id": f"g{g}-{t}-{i}", "solve_rate": float(i % 2 == 0)}
            for s in pair
            for t in teachers
            for i in range(3)
        ]
        ratings, _ = update_ratings(ratings, pd.DataFrame(rows), RatingConfig())
    for k, (mu, sigma) in ratings.items():
        members[k] = replace(members[k], mu=mu, sigma=sigma)


def test_a_child_that_plays_as_well_as_its_parent_survives_its_first_round():
    """A child starts with its parent's μ and σ + boost: by μ − 3σ it ranks below a parent it plays
    exactly as well as, so without a grace round it is culled for being new, not for being weak."""
    config = EvolutionConfig(every_k=2, replace_fraction=0.5, child_sigma_boost=1.0)
    parent = Member("student-p", "student", 0, 25.0, 2.0)
    child = Member("student-g0002-0", "student", 2, 25.0, 3.0, parents=("student-p",), operator="M1")
    teachers = [Member(f"teacher-{i}", "teacher", 0, 25.0, 2.0) for i in range(2)]
    members = {m.adapter_id: m for m in [parent, child, *teachers]}
    _play_alike(members, ("student-p", "student-g0002-0"), ["teacher-0", "teacher-1"], config.every_k)
    assert members["student-g0002-0"].conservative < members["student-p"].conservative  # still ranked below
    students = [members["student-p"], members["student-g0002-0"]]
    rng = np.random.default_rng(0)
    assert plan_replacements(students, config, 3, rng) == []  # spared, and nobody culled in its place
    no_grace = config.model_copy(update={"grace_rounds": 0})
    culled = plan_replacements(students, no_grace, 3, np.random.default_rng(0))
    assert [p.replaced.adapter_id for p in culled] == ["student-g0002-0"]  # the rule before grace rounds
    # one round later the child is ranked like everybody else
    assert [p.replaced.adapter_id for p in plan_replacements(students, config, 5, rng)] == ["student-g0002-0"]


def test_a_role_with_one_parent_crosses_with_its_hall_of_fame():
    """2 members a role: one parent. With the hall of fame a crossover's second parent is the best
    member of an earlier round; without it only mutations can be drawn."""
    members = [Member("teacher-a", "teacher", 0, 26.0, 2.0), Member("teacher-b", "teacher", 0, 24.0, 2.0)]
    crossovers = EvolutionConfig(every_k=1, replace_fraction=0.5, operator_mix={"X1": 1.0, "X3": 1.0, "M4": 1.0})
    hall = next_hall([], members, crossovers, 0)
    assert [h.adapter_id for h in hall] == ["teacher-a@g0001"] and hall[0].mu == 26.0
    ops = set()
    for seed in range(20):
        for plan in plan_replacements(members, crossovers, 1, np.random.default_rng(seed), hall):
            ops.add(plan.operator)
            assert plan.replaced.adapter_id == "teacher-b"
            if plan.operator.startswith("X"):
                assert {p.adapter_id for p in plan.parents} == {"teacher-a", "teacher-a@g0001"}
    assert ops == {"X1", "X3", "M4"}
    alone = {p.operator for s in range(20) for p in plan_replacements(members, crossovers, 1, np.random.default_rng(s))}
    assert alone == {"M4"}
    # the hall keeps the newest entries per role
    small = crossovers.model_copy(update={"hall_of_fame": 2})
    for g in range(1, 4):
        hall = next_hall(hall, members, small, g)
    assert [h.adapter_id for h in hall] == ["teacher-a@g0004", "teacher-a@g0003"]
    assert next_hall(hall, members, small.model_copy(update={"hall_of_fame": 0}), 5) == []


def test_a_two_plus_two_population_crosses_over_through_the_evolve_stage(tmp_path):
    """Four rounds of the evolve stage on a 2 + 2 population (random adapters, scripted ratings):
    the lineage holds crossovers, their hall parents' weights are in the snapshot, a child's
    buffer parent is a member."""
    config = load_config(preset="cpu-tiny", overrides=["evolution.every_k=1", "evolution.replace_fraction=0.5"])
    members = [Member(f"{r}-{i}", r, 0, 25.0, 8.0) for r in ("teacher", "student") for i in range(2)]
    adapters = {m.adapter_id: random_adapter(i) for i, m in enumerate(members)}
    current = tmp_path / "population" / "gen_0000"
    save_population(current, 0, members, adapters)
    operators, hall_parents = [], []
    for g in range(4):
        updated = tmp_path / f"updated_{g}"
        for m in members:  # "training": the snapshot's adapters, as updated/ holds them
            save_adapter(load_adapter(current / m.adapter_id), updated / m.adapter_id)
        # the newest member plays best, so the older one is culled and the child survives
        ratings = pd.DataFrame(
            {
                "adapter_id": [m.adapter_id for m in members],
                "mu": [25.0 + m.birth_generation for m in members],
                "sigma": 1.0,
            }
        )
        nxt = tmp_path / "population" / f"gen_{g + 1:04d}"
        lineage = evolve(
            members=members,
            members_dir=current,
            updated_dir=updated,
            ratings=ratings,
            next_members_dir=nxt,
            config=config,
            generation=g,
        )
        operators += list(lineage["operator"])
        hall = load_hall(nxt)
        assert {h.role for h in hall} == {"teacher", "student"}
        for h in hall:
            assert (nxt / HALL_DIR / h.adapter_id / "adapter_model.safetensors").is_file()
        for row in lineage.itertuples():
            assert not is_hall_entry(row.parents[0]) or not is_hall_entry(row.parents[-1])  # one is a member
            hall_parents += [p for p in row.parents if is_hall_entry(p)]
        members, current = members_from_frame(pd.read_parquet(nxt / "population.parquet")), nxt
    assert any(op.startswith("X") for op in operators), operators
    assert hall_parents  # a role of two crossed with its hall of fame


def test_a_child_whose_first_parent_is_a_hall_entry_inherits_its_member_parents_buffer():
    """A crossover's parents are ordered best first, so a hall-of-fame snapshot can come first;
    the child's problem buffer still comes from its parent that is a member."""
    from populora_core.rundir.artifacts import columns
    from populora_core.stages.measure import next_buffers

    config = load_config(preset="cpu-tiny")
    row = {
        "task_type": "code_o",
        "program": "def f(a):\n    return a",
        "inputs": ["1"],
        "outputs": ["1"],
        "message": "",
    }
    buffers = pd.DataFrame(
        [{"teacher_id": t, "problem_id": f"{t}-p", **row, "added_generation": 0} for t in ("teacher-a", "teacher-b")]
    )[columns("buffers")]
    lineage = pd.DataFrame(
        [{"child_id": "teacher-g0002-0", "parents": ["teacher-x@g0001", "teacher-a"], "operator": "X3"}]
    )
    problems = pd.DataFrame(columns=[*columns("problems"), "generation"]).astype({"valid": bool})
    members = [Member("teacher-a", "teacher", 0, 25.0, 2.0), Member("teacher-g0002-0", "teacher", 2, 25.0, 3.0)]
    out = next_buffers(buffers, problems, lineage, members, config, 1)
    assert out.loc[out["teacher_id"] == "teacher-g0002-0", "problem_id"].tolist() == ["teacher-a-p"]
