"""Rewards of students and teachers (PopuLoRA paper, after Absolute Zero Reasoner).

Student, per answer: +1 correct, −0.5 well-formatted but wrong, −1 format error.
Teacher, per proposal, for a valid problem whose paired student solves it with
rate ρ over its G samples (``RewardConfig.teacher_rule``):
    one_minus_rho (PopuLoRA's population):  1 − ρ if ρ < 1, else 0
    learnability (Absolute Zero Reasoner):  1 − ρ if 0 < ρ < 1, else 0
An invalid proposal earns a penalty (``invalid_rule``): `flat` −1 whatever the
reason; `absolute_zero` −0.5 when well formatted (it parsed, then failed in the
sandbox, used a banned name, or repeated a problem) and −1 when badly formatted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from populora_core.config import RewardConfig

Verdict = Literal["correct", "wrong", "format_error"]
"""A judged answer: what a student's reward is a function of (``problems.types`` re-exports it)."""


def student_reward(verdict: Verdict, config: RewardConfig) -> float:
    """Reward of one student answer."""
    return {"correct": config.correct, "wrong": config.wrong, "format_error": config.format_error}[verdict]


def solve_rate(verdicts: Sequence[Verdict]) -> float:
    """ρ: the fraction of a student's samples judged correct."""
    if not verdicts:
        raise ValueError("solve_rate of no samples")
    return sum(v == "correct" for v in verdicts) / len(verdicts)


def teacher_reward(valid: bool, rho: float | None, config: RewardConfig, *, well_formatted: bool = False) -> float:
    """Reward of one proposal (module docstring)."""
    if not valid:
        if config.invalid_rule == "absolute_zero" and well_formatted:
            return config.invalid_formatted
        return config.invalid_proposal
    if rho is None:
        raise ValueError("a valid proposal needs its solve rate ρ")
    if rho >= 1.0 or (config.teacher_rule == "learnability" and rho <= 0.0):
        return 0.0
    return 1.0 - rho
