"""Stage functions that need no model: sample budgets."""

from __future__ import annotations


def test_a_match_with_few_problems_gets_the_full_sample_budget():
    from populora_core.problems import SEED_PROBLEM
    from populora_core.stages import _samples_per_problem

    work = [("t", "s", SEED_PROBLEM)] * 2 + [("t2", "s", SEED_PROBLEM)] * 4
    assert _samples_per_problem(work, per_match=3, g=4) == [6, 6, 4, 4, 4, 4]
    work = [("t", "s", SEED_PROBLEM)] * 5
    assert sum(_samples_per_problem(work, per_match=12, g=4)) == 48
