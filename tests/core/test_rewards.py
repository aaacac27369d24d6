"""Rewards on every verdict kind."""

from __future__ import annotations

import pytest

from populora_core.config import RewardConfig
from populora_core.rewards import solve_rate, student_reward, teacher_reward

CFG = RewardConfig()


def test_student_rewards():
    assert [student_reward(v, CFG) for v in ("correct", "wrong", "format_error")] == [1.0, -0.5, -1.0]
    custom = RewardConfig(correct=2.0, wrong=0.0, format_error=-3.0)
    assert [student_reward(v, custom) for v in ("correct", "wrong", "format_error")] == [2.0, 0.0, -3.0]


def test_teacher_rewards():
    assert teacher_reward(True, 0.25, CFG) == 0.75
    assert teacher_reward(True, 0.0, CFG) == 1.0
    assert teacher_reward(True, 1.0, CFG) == 0.0
    assert teacher_reward(False, None, CFG) == -1.0
    assert teacher_reward(False, None, RewardConfig(invalid_proposal=-0.2)) == -0.2
    with pytest.raises(ValueError):
        teacher_reward(True, None, CFG)


def test_learnability_pays_nothing_for_a_problem_nobody_solves():
    azr = RewardConfig(teacher_rule="learnability")
    assert [teacher_reward(True, rho, azr) for rho in (0.0, 0.25, 0.75, 1.0)] == [0.0, 0.75, 0.25, 0.0]
    assert [teacher_reward(True, rho, CFG) for rho in (0.0, 0.25, 0.75, 1.0)] == [1.0, 0.75, 0.25, 0.0]


def test_absolute_zero_invalid_penalties_tell_format_from_failure():
    azr = RewardConfig(invalid_rule="absolute_zero")
    assert teacher_reward(False, None, azr, well_formatted=True) == -0.5
    assert teacher_reward(False, None, azr, well_formatted=False) == -1.0
    assert teacher_reward(False, None, CFG, well_formatted=True) == -1.0  # flat: the paper's −1 for any


def test_solve_rate():
    assert solve_rate(["correct", "wrong", "format_error", "correct"]) == 0.5
    with pytest.raises(ValueError):
        solve_rate([])
