"""Rewards of students and teachers (PopuLoRA paper, after Absolute Zero Reasoner).

Student, per answer: +1 correct, −0.5 well-formatted but wrong, −1 format error.
Teacher, per proposal: for a valid problem whose paired student solves it with
rate ρ over its G samples, 1 − ρ if ρ < 1 and 0 if ρ = 1 (a problem nobody can
fail teaches nothing); a configurable penalty (−1) for an invalid proposal.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora_core.config import RewardConfig
from populora_core.problems.types import Verdict


def student_reward(verdict: Verdict, config: RewardConfig) -> float:
    """Reward of one student answer."""
    return {"correct": config.correct, "wrong": config.wrong, "format_error": config.format_error}[verdict]


def solve_rate(verdicts: Sequence[Verdict]) -> float:
    """ρ: the fraction of a student's samples judged correct."""
    if not verdicts:
        raise ValueError("solve_rate of no samples")
    return sum(v == "correct" for v in verdicts) / len(verdicts)


def teacher_reward(valid: bool, rho: float | None, config: RewardConfig) -> float:
    """Reward of one proposal: the invalid penalty, else 1 − ρ (0 when ρ = 1)."""
    if not valid:
        return config.invalid_proposal
    if rho is None:
        raise ValueError("a valid proposal needs its solve rate ρ")
    return 0.0 if rho >= 1.0 else 1.0 - rho
