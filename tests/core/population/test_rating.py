"""TrueSkill updates, conservative rank and matchmaking."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from populora_core.config import RatingConfig
from populora_core.population.adapters import Member
from populora_core.population.rating import make_pairings, pairing_probabilities, update_ratings

CFG = RatingConfig()


def member(adapter_id, role, mu=25.0, sigma=25 / 3, roles=()):
    return Member(adapter_id, role, 0, mu, sigma, roles=roles)


def matches(rows):
    return pd.DataFrame(rows, columns=["teacher_id", "student_id", "problem_id", "solve_rate"])


def test_a_student_that_always_wins_rises():
    ratings = {"t0": (25.0, 25 / 3), "t1": (25.0, 25 / 3), "s0": (25.0, 25 / 3), "s1": (25.0, 25 / 3)}
    for gen in range(5):
        rows = [
            ("t0", "s0", f"p{gen}a", 1.0),
            ("t1", "s0", f"p{gen}b", 0.75),
            ("t0", "s1", f"p{gen}c", 0.0),
            ("t1", "s1", f"p{gen}d", 0.25),
        ]
        ratings, table = update_ratings(ratings, matches(rows), CFG)
    assert ratings["s0"][0] > 30 > 20 > ratings["s1"][0]
    assert ratings["s0"][1] < 25 / 3  # uncertainty shrinks with play
    assert table["student_wins"].tolist() == [True, False, True, False]  # sorted order t0s0, t0s1, t1s0, t1s1


def test_updates_do_not_depend_on_row_order():
    rows = [("t0", "s0", "a", 0.9), ("t1", "s0", "b", 0.1), ("t0", "s1", "c", 0.6), ("t1", "s1", "d", 0.3)]
    start = dict.fromkeys(["t0", "t1", "s0", "s1"], (25.0, 25 / 3))
    first, _ = update_ratings(start, matches(rows), CFG)
    second, _ = update_ratings(start, matches(rows[::-1]), CFG)
    assert first == second


def test_threshold_decides_who_wins():
    start = {"t": (25.0, 25 / 3), "s": (25.0, 25 / 3)}
    lenient, _ = update_ratings(start, matches([("t", "s", "p", 0.3)]), RatingConfig(win_threshold=0.25))
    strict, _ = update_ratings(start, matches([("t", "s", "p", 0.3)]), RatingConfig(win_threshold=0.5))
    assert lenient["s"][0] > 25 > strict["s"][0]


def test_conservative_rank():
    assert member("x", "teacher", mu=30, sigma=2).conservative == pytest.approx(24)


def test_every_teacher_and_every_student_plays():
    members = [member(f"t{i}", "teacher") for i in range(4)] + [member(f"s{i}", "student") for i in range(6)]
    pairs = make_pairings(members, CFG, np.random.default_rng(0))
    assert {p.teacher_id for p in pairs} == {f"t{i}" for i in range(4)}
    assert {p.student_id for p in pairs} == {f"s{i}" for i in range(6)}
    assert all(0 < p.match_quality <= 1 for p in pairs)
    again = make_pairings(members, CFG, np.random.default_rng(0))
    assert pairs == again


def test_pairing_frequencies_follow_match_quality():
    teacher = member("t", "teacher", mu=25, sigma=2)
    students = [
        member("even", "student", mu=25, sigma=2),
        member("close", "student", mu=28, sigma=2),
        member("far", "student", mu=40, sigma=2),
    ]
    config = RatingConfig(pairing_floor=0.1)
    p = pairing_probabilities(teacher, students, config)
    assert p[0] > p[1] > p[2] >= 0.1 / 3 - 1e-12
    rng = np.random.default_rng(0)
    # the teacher's own draw comes first; later pairs only make sure every student plays
    draws = Counter(make_pairings([teacher, *students], config, rng)[0].student_id for _ in range(4000))
    freq = np.array([draws["even"], draws["close"], draws["far"]]) / 4000
    np.testing.assert_allclose(freq, p, atol=0.03)


def test_teachers_never_solve_their_own_problems_but_the_baseline_does():
    pop = [member("a", "teacher"), member("b", "student")]
    assert all(p.teacher_id != p.student_id for p in make_pairings(pop, CFG, np.random.default_rng(1)))
    agent = [member("agent", "teacher", roles=("teacher", "student"))]
    [pair] = make_pairings(agent, CFG, np.random.default_rng(1))
    assert pair.teacher_id == pair.student_id == "agent"
    ratings, table = update_ratings({"agent": (25.0, 25 / 3)}, matches([("agent", "agent", "p", 1.0)]), CFG)
    assert ratings["agent"] == (25.0, 25 / 3) and len(table) == 1
