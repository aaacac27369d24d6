"""The claim statistics on hand-made runs whose answer is known: clustered answers widen the
window comparison's interval, swings beyond sampling noise are caught and noise is not,
slopes and trivial shares move where the programs do, and the verdict rules read them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from populora_core.analysis.claims import (
    claim_verdicts,
    cycle_test,
    fresh_answers,
    oscillation_test,
    per_generation_rates,
    problem_icc,
    run_statistics,
    window_change,
)
from populora_core.analysis.data import RunData, learning_curves
from populora_core.metrics.dynamics import oscillation
from populora_core.metrics.stats import cluster_rate, wilson
from populora_core.run import RunDir

TRIVIAL = "def f(a):\n    return a"
REAL = (
    "def f(n):\n    total = 0\n    for i in range(n):\n        if i % 3 == 0:\n            total += i\n    return total"
)


def _data(tmp_path, generations: list[list[list[int]]], programs: list[str] | None = None) -> RunData:
    """generations[g][i]: the answers (1 correct, 0 wrong) to fresh problem i of generation g,
    whose program is ``programs[g]`` (default REAL)."""
    problems, verdicts = [], []
    for g, answers in enumerate(generations):
        program = programs[g] if programs else REAL
        for i, outcomes in enumerate(answers):
            pid = f"g{g}p{i}"
            problems.append(
                {
                    "generation": g,
                    "teacher_id": "t0",
                    "source": "fresh",
                    "problem_id": pid,
                    "program": program,
                    "valid": True,
                    "ast_depth": 5.0 if program == TRIVIAL else 8.0 + g,
                    "cyclomatic": 1.0,
                    "loc": 2.0,
                    "halstead": 1.0,
                }
            )
            verdicts += [
                {"generation": g, "teacher_id": "t0", "problem_id": pid, "status": "correct" if ok else "wrong"}
                for ok in outcomes
            ]
        problems.append(  # a top-up, always solved: never counted as fresh
            {"generation": g, "teacher_id": "t0", "source": "buffer", "problem_id": "seed", "program": TRIVIAL}
            | {"valid": True, "ast_depth": 5.0, "cyclomatic": 1.0, "loc": 2.0, "halstead": 1.0}
        )
        verdicts += [{"generation": g, "teacher_id": "t0", "problem_id": "seed", "status": "correct"}] * 4
    summaries = pd.DataFrame({"generation": range(len(generations))})
    rewards = pd.DataFrame(columns=["generation", "kind", "adapter_id", "reward"])
    frames = {"problems": pd.DataFrame(problems), "verdicts": pd.DataFrame(verdicts), "rewards": rewards}
    return RunData(RunDir(tmp_path), "hand-made", summaries, frames)


def _all_or_nothing(solved: int, problems: int = 8, g: int = 4) -> list[list[int]]:
    return [[1] * g if i < solved else [0] * g for i in range(problems)]


def test_the_window_change_counts_problems_not_answers_when_answers_agree(tmp_path):
    gens = [_all_or_nothing(2)] * 5 + [_all_or_nothing(6)] * 5
    change = window_change(_data(tmp_path, gens))
    assert change["first"]["rate"] == 0.25 and change["last"]["rate"] == 0.75
    assert change["first"]["n"] == 160 and change["first"]["problems"] == 40  # top-ups excluded
    diff = change["difference"]
    assert diff["value"] == 0.5 and diff["low"] > 0.3
    # every problem all right or all wrong: ICC 1, each answer counts a quarter
    assert change["icc"] == pytest.approx(1.0)
    assert change["design_effect"] == pytest.approx(4.0, rel=0.05)
    assert diff["high"] - diff["low"] > 1.9 * 2 * 1.96 * change["difference_binomial_se"]


def test_the_fresh_solve_rate_band_widens_with_the_clustering_of_answers(tmp_path):
    clustered = learning_curves(_data(tmp_path / "c", [_all_or_nothing(2)] * 6)).set_index(["curve", "generation"])
    mixed = learning_curves(_data(tmp_path / "m", [_mixed(0.25, 8)] * 6)).set_index(["curve", "generation"])
    a, b = clustered.loc[("fresh_solve_rate", 0)], mixed.loc[("fresh_solve_rate", 0)]
    assert a["value"] == b["value"] == 0.25 and a["n"] == b["n"] == 32
    plain = wilson(8, 32)
    assert b["low"] == pytest.approx(plain.low) and b["high"] == pytest.approx(plain.high)  # no clustering
    assert a["high"] - a["low"] > 1.7 * (plain.high - plain.low)  # design effect ~4: about twice as wide


def test_answers_that_vary_within_each_problem_have_no_intra_problem_correlation(tmp_path):
    gens = [[[1, 0, 1, 0]] * 8] * 6
    answers = fresh_answers(_data(tmp_path, gens))
    # no problem differs from another: the estimator's floor, −1/(n0 − 1) with n0 = 4
    assert len(answers) == 6 * 8 * 4 and problem_icc(answers) == pytest.approx(-1 / 3)
    # a rate that moves between generations is not agreement within problems
    moving = fresh_answers(_data(tmp_path / "m", [[[1, 1, 1, 0]] * 8, [[0, 0, 0, 1]] * 8]))
    assert problem_icc(moving) == pytest.approx(-1 / 3)


def test_a_short_run_compares_its_halves_and_a_generation_without_fresh_answers_is_skipped(tmp_path):
    gens = [_mixed(0.25), [], _mixed(0.5), _mixed(0.5), _mixed(0.75), _mixed(0.75)]
    data = _data(tmp_path, gens)
    change = window_change(data)
    assert change["window"] == 3 and change["first_generations"] == [0, 2] and change["last_generations"] == [3, 5]
    assert change["first"]["n"] == 80 and change["last"]["rate"] == pytest.approx(2 / 3)  # gen 1: no fresh answer
    rates = per_generation_rates(data)
    assert rates["n"].tolist() == [40, 0, 40, 40, 40, 40] and np.isnan(rates["rate"][1])
    assert oscillation_test(rates)["df"] == 3  # five generations with answers
    assert np.isnan(oscillation_test(rates.head(4))["p_value"])  # three with answers: too few
    assert np.isnan(window_change(_data(tmp_path / "one", gens[:1]))["difference"]["value"])


def test_a_constant_rate_of_clustered_answers_is_rejected_at_about_the_nominal_rate():
    # 400 runs of 30 generations, 8 problems of 4 answers each, every problem's own rate drawn
    # from Beta(0.7, 1.633): mean 0.3, intra-problem correlation 0.3; no generation differs
    rng = np.random.default_rng(7)
    rejected = []
    for _ in range(400):
        rows = []
        for g in range(30):
            k = rng.binomial(4, rng.beta(0.7, 1.633, size=8))
            r = cluster_rate(k, [4] * 8)
            rows.append({"generation": g, "rate": r.rate, "se": r.se, "n": r.n})
        rejected.append(oscillation_test(pd.DataFrame(rows))["p_value"] < 0.05)
    assert 0.01 <= np.mean(rejected) <= 0.09, np.mean(rejected)


def test_swings_beyond_sampling_noise_are_caught_and_steady_noise_is_not(tmp_path):
    swinging = [_mixed(0.2 if g % 2 else 0.7) for g in range(20)]
    swing = oscillation_test(per_generation_rates(_data(tmp_path / "a", swinging)))
    assert swing["df"] == 18 and swing["p_value"] < 1e-6 and swing["ratio"] > 5
    # rates of 15/40 and 16/40 alternating: far inside binomial noise at n = 40
    steady = [_mixed(0.375 if g % 2 else 0.4) for g in range(20)]
    calm = oscillation_test(per_generation_rates(_data(tmp_path / "b", steady)))
    assert calm["p_value"] > 0.9 and calm["ratio"] < 0.5


def _mixed(rate: float, problems: int = 10, g: int = 4) -> list[list[int]]:
    """``problems`` problems whose answers mix right and wrong, ``rate`` of all answers right."""
    k = round(rate * problems * g)
    flat = [1 if j < k else 0 for j in range(problems * g)]
    return [flat[i::problems] for i in range(problems)]


def test_slopes_and_trivial_shares_follow_the_programs(tmp_path):
    gens = [_mixed(0.5)] * 10
    programs = [TRIVIAL] * 5 + [REAL] * 5
    stats = run_statistics(_data(tmp_path, gens, programs), single_agent=False)
    assert stats["slopes"]["ast_depth"]["low"] > 0  # 5 then 13..17
    assert stats["slopes"]["cyclomatic"]["value"] == pytest.approx(0.0, abs=1e-12)
    trivial = stats["trivial_change"]["identity_or_constant"]
    assert trivial["first"]["value"] == 1.0 and trivial["last"]["value"] == 0.0
    assert trivial["difference"]["high"] < 0 and stats["fresh_per_generation_answers"]["median"] == 40


def _stats(single: bool, change=(0.0, -0.1, 0.1), trivial=(0.0, -0.1, 0.1), depth=(0.0, -0.1, 0.1), **kw) -> dict:
    def iv(t):
        return {"value": t[0], "low": t[1], "high": t[2], "n": 100}

    return {
        "single_agent": single,
        "fresh_window_change": {"difference": iv(change)},
        "trivial_change": {"identity_or_constant": {"difference": iv(trivial)}},
        "slopes": {"ast_depth": iv(depth), "coverage": iv(kw.get("coverage", (0.0, -0.1, 0.1)))},
        "fresh_cycles": {"p_value": kw.get("p", 0.5), "period": 4.0},
    }


def test_the_verdict_rules_read_each_claim_from_its_intervals():
    up, down = (0.2, 0.1, 0.3), (-0.2, -0.3, -0.1)
    assert claim_verdicts(_stats(True)) == {"collapse": "cannot tell"}
    assert claim_verdicts(_stats(True, change=up, trivial=up)) == {"collapse": "supports"}
    assert claim_verdicts(_stats(True, change=up, depth=down)) == {"collapse": "supports"}
    assert claim_verdicts(_stats(True, change=down)) == {"collapse": "contradicts"}
    assert claim_verdicts(_stats(True, depth=up)) == {"collapse": "contradicts"}
    growing = {"depth": up, "coverage": up}
    assert claim_verdicts(_stats(False, p=0.01, **growing)) == {"arms_race": "supports"}
    assert claim_verdicts(_stats(False, p=0.2, **growing)) == {"arms_race": "cannot tell"}
    assert claim_verdicts(_stats(False, coverage=down)) == {"arms_race": "contradicts"}
    assert claim_verdicts(_stats(False, p=0.01, depth=down, coverage=up)) == {"arms_race": "contradicts"}


def _clustered_series(rng, means, problems: int = 8, g: int = 4, icc: float = 0.3) -> pd.DataFrame:
    """Per generation, ``problems`` problems of ``g`` answers, each problem's rate drawn from a
    Beta of mean ``means[t]`` and intra-problem correlation ``icc``."""
    rows = []
    for t, m in enumerate(means):
        a, b = m * (1 / icc - 1), (1 - m) * (1 / icc - 1)
        r = cluster_rate(rng.binomial(g, rng.beta(a, b, size=problems)), [g] * problems)
        rows.append({"generation": t, "rate": r.rate, "se": r.se, "n": r.n})
    return pd.DataFrame(rows)


def test_the_cycle_test_sees_a_slow_cycle_the_lag1_rule_cannot():
    """A swing with a period of 6 generations has a positive lag-1 autocorrelation, so the old
    rule (p < 0.05 and lag-1 < 0) read it "cannot tell"; the cycle test finds it and its period,
    and rejects a constant rate at about the nominal 5%."""
    rng = np.random.default_rng(3)
    means = [0.3 + 0.2 * np.sin(2 * np.pi * t / 6) for t in range(30)]
    found, lag1 = [], []
    for _ in range(50):
        rates = _clustered_series(rng, means, problems=16)
        found.append(cycle_test(rates))
        lag1.append(oscillation(rates["rate"].tolist())["lag1_autocorr"])
    assert np.mean([f["p_value"] < 0.05 for f in found]) > 0.8
    assert np.median([f["period"] for f in found]) == 6.0 and np.mean(lag1) > 0
    null = [cycle_test(_clustered_series(rng, [0.3] * 30))["p_value"] < 0.05 for _ in range(300)]
    assert 0.0 <= np.mean(null) <= 0.08, np.mean(null)
    assert np.isnan(cycle_test(_clustered_series(rng, [0.3] * 3))["p_value"])
