"""TrueSkill ratings of teacher–student matches, and matchmaking.

A match is one teacher's problem against one student: the student wins when
its solve rate ρ exceeds ``RatingConfig.win_threshold``, else the teacher wins.
Ratings update match by match in a fixed order (sorted by teacher, student,
problem), so the same match table always gives the same ratings. Rank for
replacement is the conservative bound μ − 3σ.

Pairing (prioritised fictitious self-play): opponents near a 50% predicted
outcome are preferred. Pairing weights are
    p(s | t) = (1 − floor) · q(t, s)^power / Σ_s' q(t, s')^power + floor / n_students,
with q the TrueSkill match quality, so every opponent keeps at least
floor / n_students. Every teacher draws ``students_per_teacher`` opponents and
every student plays at least once. A teacher never faces itself unless it is
the single-agent baseline's one adapter, which solves its own problems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import trueskill

from populora_core.config import RatingConfig
from populora_core.population.adapters import Member


@dataclass(frozen=True)
class Pairing:
    teacher_id: str
    student_id: str
    match_quality: float


def environment(config: RatingConfig) -> trueskill.TrueSkill:
    """A TrueSkill environment of our own (never the package's global one); no draws."""
    return trueskill.TrueSkill(mu=config.mu, sigma=config.sigma, beta=config.beta, tau=config.tau, draw_probability=0.0)


def match_outcomes(matches: pd.DataFrame, config: RatingConfig) -> pd.DataFrame:
    """Adds ``student_wins`` (ρ > threshold) to a frame of teacher_id, student_id,
    problem_id, solve_rate, sorted into the order ratings are updated in."""
    frame = matches.sort_values(["teacher_id", "student_id", "problem_id"], kind="stable").reset_index(drop=True)
    return frame.assign(student_wins=frame["solve_rate"] > config.win_threshold)


def update_ratings(
    ratings: Mapping[str, tuple[float, float]], matches: pd.DataFrame, config: RatingConfig
) -> tuple[dict[str, tuple[float, float]], pd.DataFrame]:
    """New (μ, σ) per adapter after ``matches`` (teacher_id, student_id, problem_id,
    solve_rate), and the match table with outcomes and ratings after each match.

    A self-match (single-agent baseline) carries no rating information and is skipped.
    """
    env = environment(config)
    current = {k: env.create_rating(mu, sigma) for k, (mu, sigma) in ratings.items()}
    table = match_outcomes(matches, config)
    after_t, after_s = [], []
    for row in table.itertuples(index=False):
        t, s = row.teacher_id, row.student_id
        if t != s:
            if row.student_wins:
                current[s], current[t] = trueskill.rate_1vs1(current[s], current[t], env=env)
            else:
                current[t], current[s] = trueskill.rate_1vs1(current[t], current[s], env=env)
        after_t.append(current[t].mu)
        after_s.append(current[s].mu)
    table = table.assign(teacher_mu_after=after_t, student_mu_after=after_s)
    return {k: (r.mu, r.sigma) for k, r in current.items()}, table


def match_quality(a: Member, b: Member, env: trueskill.TrueSkill) -> float:
    """TrueSkill's draw-probability-based quality of a match, in (0, 1]; 1 is perfectly even."""
    return float(trueskill.quality_1vs1(env.create_rating(a.mu, a.sigma), env.create_rating(b.mu, b.sigma), env=env))


def pairing_probabilities(anchor: Member, opponents: Sequence[Member], config: RatingConfig) -> np.ndarray:
    """p(opponent | anchor) over ``opponents`` (see the module docstring)."""
    env = environment(config)
    q = np.array([match_quality(anchor, o, env) for o in opponents])
    w = q**config.quality_power
    w = w / w.sum() if w.sum() > 0 else np.full(len(opponents), 1.0 / len(opponents))
    p = (1.0 - config.pairing_floor) * w + config.pairing_floor / len(opponents)
    return p / p.sum()


def _pair(t: Member, s: Member, env: trueskill.TrueSkill) -> Pairing:
    return Pairing(t.adapter_id, s.adapter_id, match_quality(t, s, env))


def make_pairings(members: Sequence[Member], config: RatingConfig, rng: np.random.Generator) -> list[Pairing]:
    """This generation's teacher–student pairs; deterministic given ``rng``."""
    env = environment(config)
    teachers = [m for m in members if m.plays("teacher")]
    if not teachers or not any(m.plays("student") for m in members):
        raise ValueError("pairing needs at least one teacher and one student")
    pairs: list[Pairing] = []
    for t in teachers:
        students = [m for m in members if m.plays("student") and (m.adapter_id != t.adapter_id or len(members) == 1)]
        if not students:
            raise ValueError(f"teacher {t.adapter_id} has no student to play (a teacher never solves its own problems)")
        k = min(config.students_per_teacher, len(students))
        p = pairing_probabilities(t, students, config)
        pairs += [_pair(t, students[int(i)], env) for i in rng.choice(len(students), size=k, replace=False, p=p)]
    playing = {p.student_id for p in pairs}
    for s in (m for m in members if m.plays("student") and m.adapter_id not in playing):
        candidates = [t for t in teachers if t.adapter_id != s.adapter_id]
        t = candidates[int(rng.choice(len(candidates), p=pairing_probabilities(s, candidates, config)))]
        pairs.append(_pair(t, s, env))
    return pairs
