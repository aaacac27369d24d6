"""Intervals: Wilson's against known values, the bootstrap keeps the pairing."""

from __future__ import annotations

import numpy as np
import pytest

from populora_core.metrics.stats import mean_interval, paired_bootstrap, wilson


def test_wilson_matches_published_values_and_stays_in_bounds():
    # Newcombe (1998), table I: 81/263 -> 0.2553 to 0.3662; 0/10 -> 0 to 0.2775
    iv = wilson(81, 263)
    assert iv.low == pytest.approx(0.2553, abs=1e-4) and iv.high == pytest.approx(0.3662, abs=1e-4)
    zero = wilson(0, 10)
    assert zero.low == 0.0 and zero.high == pytest.approx(0.2775, abs=1e-4)
    assert wilson(10, 10).high == 1.0 and np.isnan(wilson(0, 0).value)


def test_mean_interval_shrinks_with_samples():
    rng = np.random.default_rng(0)
    small, large = mean_interval(rng.normal(size=16)), mean_interval(rng.normal(size=1600))
    assert (large.high - large.low) < (small.high - small.low) / 5
    assert large.low < 0 < large.high


def test_paired_bootstrap_sees_a_gain_that_unpaired_noise_would_hide():
    rng = np.random.default_rng(1)
    hard = rng.random(200) < 0.5  # items either model solves only when easy
    control = (~hard).astype(float)
    trained = control.copy()
    trained[np.flatnonzero(hard)[:20]] = 1.0  # 20 more items solved, none lost
    gain = paired_bootstrap(trained, control, rng=np.random.default_rng(0))
    assert gain.value == pytest.approx(0.1) and gain.low > 0.05
    none = paired_bootstrap(control, control, rng=np.random.default_rng(0))
    assert none.value == none.low == none.high == 0.0


def test_mcnemar_exact_counts_only_the_discordant_items():
    from populora_core.metrics.stats import mcnemar_exact

    # 1 vs 9 discordant: 2 · (C(10,0) + C(10,1)) / 2^10
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0


def test_cluster_rate_counts_a_problem_once_when_its_answers_agree():
    from populora_core.metrics.stats import cluster_rate

    # 20 problems of 4 answers: all right or all wrong (perfectly clustered) vs mixed within
    agree = cluster_rate([4] * 10 + [0] * 10, [4] * 20)
    mixed = cluster_rate([2] * 20, [4] * 20)
    binomial = (0.5 * 0.5 / 80) ** 0.5
    assert agree.rate == mixed.rate == 0.5 and agree.n == 80 and agree.clusters == 20
    # perfectly clustered: the SE of 20 independent coin flips (design effect 4), not of 80
    assert agree.se == pytest.approx((20 / 19) ** 0.5 * (0.5 * 0.5 / 20) ** 0.5)
    assert agree.se > 1.9 * binomial and mixed.se == 0.0
    assert np.isnan(cluster_rate([1], [4]).se)


def test_slope_interval_matches_the_t_interval_of_least_squares():
    from scipy import stats

    from populora_core.metrics.stats import slope_interval

    rng = np.random.default_rng(3)
    x = np.arange(30, dtype=float)
    y = 0.02 * x + rng.normal(0, 0.1, 30)
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.975, 28) * fit.stderr
    iv = slope_interval(x, y)
    assert iv.value == pytest.approx(fit.slope) and iv.low == pytest.approx(fit.slope - half)
    assert iv.low > 0 and iv.n == 30
    flat = slope_interval(x, rng.normal(0, 0.1, 30))
    assert flat.low < 0 < flat.high
    assert np.isnan(slope_interval([0, 1], [0, 1]).low) and np.isnan(slope_interval([1, 1, 1], [0, 1, 2]).value)


def test_a_slope_of_an_autocorrelated_series_gets_a_wider_interval():
    from populora_core.metrics.stats import slope_interval

    rng = np.random.default_rng(5)
    walk = np.cumsum(rng.normal(0, 0.1, 30))  # a random walk: residuals strongly autocorrelated
    x = np.arange(30)
    plain, widened = slope_interval(x, walk), slope_interval(x, walk, autocorrelated=True)
    assert widened.value == plain.value and widened.high - widened.low > 2 * (plain.high - plain.low)
    noise = rng.normal(0, 0.1, 30)
    assert slope_interval(x, noise, autocorrelated=True).high - slope_interval(x, noise).high < 0.01


def test_newcombe_difference_matches_the_published_example():
    from populora_core.metrics.stats import newcombe_difference

    # Newcombe (1998), table II, example (e): 56/70 − 48/80 → 0.0524 to 0.3339 (method 10)
    d = newcombe_difference(wilson(48, 80), wilson(56, 70))
    assert d.value == pytest.approx(0.2) and d.low == pytest.approx(0.0524, abs=1e-4)
    assert d.high == pytest.approx(0.3339, abs=1e-4)
    still = newcombe_difference(wilson(0, 40), wilson(0, 40))  # 0 → 0 keeps a width, unlike Wald's
    assert still.value == 0.0 and still.low < -0.05 and still.high > 0.05


def test_the_design_effect_pools_the_series_and_never_narrows():
    from populora_core.metrics.stats import design_effect

    # two points at p = 0.5, n = 40: binomial variance 1/160 each; cluster-robust twice that
    se = (2 / 160) ** 0.5
    assert design_effect([0.5, 0.5], [se, se], [40, 40]) == pytest.approx(2.0)
    assert design_effect([0.5, 0.5], [0.01, 0.01], [40, 40]) == 1.0  # below binomial: floored
    assert design_effect([0.0, float("nan")], [0.0, float("nan")], [40, 0]) == 1.0  # nothing varies
