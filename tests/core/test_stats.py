"""Intervals: against published values (Newcombe, 1998) and other libraries' figures for the
same thing (to 1e-12); the bootstrap keeps the pairing and its seed's resamples."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats

from populora_core.metrics.stats import (
    Z95,
    cluster_rate,
    design_effect,
    mcnemar_exact,
    mean_interval,
    newcombe_difference,
    paired_bootstrap,
    slope_interval,
    wilson,
)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)],
)
def test_wilson_matches_published_values(k, n, low, high):
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", table I, method 3
    iv = wilson(k, n)
    assert iv.value == k / n and iv.n == n
    assert iv.low == pytest.approx(low, abs=1e-4) and iv.high == pytest.approx(high, abs=1e-4)


def test_wilson_is_exact_at_the_bounds_and_nan_without_trials():
    assert wilson(0, 10).low == 0.0 and wilson(10, 10).high == 1.0 and wilson(2.5, 2.5).high == 1.0
    assert wilson(0, 10).high == pytest.approx(0.2775, abs=1e-4)
    assert all(np.isnan(v) for v in (wilson(0, 0).value, wilson(0, 0).low, wilson(0, 0).high))


@pytest.mark.parametrize(("k", "n", "deff"), [(25, 73, 10.0), (3, 7, 2.0), (0, 32, 3.2), (40, 40, 1.7)])
def test_wilson_at_effective_counts_is_wilson_widened_by_the_design_effect(k, n, deff):
    # (k/d, n/d) at z is (k, n) at z·√d: the score interval sees n only through z²/n
    at_effective, widened = wilson(k / deff, n / deff), wilson(k, n, z=Z95 * deff**0.5)
    assert at_effective.value == pytest.approx(widened.value, abs=1e-12)
    assert at_effective.low == pytest.approx(widened.low, abs=1e-12)
    assert at_effective.high == pytest.approx(widened.high, abs=1e-12)
    assert at_effective.high - at_effective.low > wilson(k, n).high - wilson(k, n).low


def test_mean_interval_is_the_normal_interval_of_the_mean():
    for values in ([1.0, 2.0, 3.0, 4.0, 5.0], [0.1, 0.5], list(np.random.default_rng(0).normal(size=16))):
        low, high = stats.norm.interval(0.95, loc=np.mean(values), scale=stats.sem(values))
        iv = mean_interval(values)
        assert iv.low == pytest.approx(low, abs=1e-12) and iv.high == pytest.approx(high, abs=1e-12)
    one, none = mean_interval([0.3]), mean_interval([])
    assert one.low == one.value == one.high == 0.3 and one.n == 1 and np.isnan(none.value) and none.n == 0


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


def test_paired_bootstrap_draws_its_resamples_from_the_seed():
    # a seed's figures are those of its draws: items by rng.integers(0, n, (R, n)), then the
    # 2.5 and 97.5 percentiles of the resampled means (as the project drew them before scipy)
    rng = np.random.default_rng(1)
    a, b = (rng.random(50) < 0.6).astype(float), (rng.random(50) < 0.4).astype(float)
    d = a - b
    means = d[np.random.default_rng(7).integers(0, d.size, size=(2000, d.size))].mean(axis=1)
    iv = paired_bootstrap(a, b, rng=np.random.default_rng(7), resamples=2000)
    low, high = np.percentile(means, [2.5, 97.5])
    assert iv.low == pytest.approx(low, abs=1e-12) and iv.high == pytest.approx(high, abs=1e-12)
    assert iv.value == d.mean() and iv.n == 50
    one = paired_bootstrap([1.0], [0.0], rng=np.random.default_rng(0))
    assert one.value == one.low == one.high == 1.0 and np.isnan(paired_bootstrap([], [], rng=rng).value)


def test_mcnemar_exact_counts_only_the_discordant_items():
    # 1 vs 9 discordant: 2 · (C(10,0) + C(10,1)) / 2^10
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    # scipy's exact binomial test of the discordant items agrees
    for only_a, only_b in ((0, 12), (3, 17), (40, 60), (200, 260)):
        assert mcnemar_exact(only_a, only_b) == pytest.approx(
            stats.binomtest(only_a, only_a + only_b).pvalue, rel=1e-12
        )


def test_cluster_rate_counts_a_problem_once_when_its_answers_agree():
    # 20 problems of 4 answers: all right or all wrong (perfectly clustered) vs mixed within
    agree = cluster_rate([4] * 10 + [0] * 10, [4] * 20)
    mixed = cluster_rate([2] * 20, [4] * 20)
    binomial = (0.5 * 0.5 / 80) ** 0.5
    assert agree.rate == mixed.rate == 0.5 and agree.n == 80 and agree.clusters == 20
    # perfectly clustered: the SE of 20 independent coin flips (design effect 4), not of 80
    assert agree.se == pytest.approx((20 / 19) ** 0.5 * (0.5 * 0.5 / 20) ** 0.5)
    assert agree.se > 1.9 * binomial and mixed.se == 0.0
    assert np.isnan(cluster_rate([1], [4]).se)


@pytest.mark.parametrize(("k", "n"), [([1, 3, 0, 5], [2, 4, 3, 8]), ([0, 3], [2, 3]), ([4] * 10 + [0] * 10, [4] * 20)])
def test_cluster_rate_is_the_cluster_robust_mean_of_the_answers(k, n):
    # statsmodels: the mean of the 0/1 answers with standard errors clustered by problem
    answers = np.concatenate([np.r_[np.ones(a), np.zeros(b - a)] for a, b in zip(k, n, strict=True)])
    groups = np.repeat(np.arange(len(n)), n)
    fit = sm.OLS(answers, np.ones(answers.size)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    r = cluster_rate(k, n)
    assert r.rate == pytest.approx(fit.params[0], abs=1e-12) and r.se == pytest.approx(fit.bse[0], abs=1e-12)


def test_slope_interval_matches_the_t_interval_of_least_squares():
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


@pytest.mark.parametrize("level", [0.95, 0.9])
def test_slope_interval_is_statsmodels_ols_interval(level):
    rng = np.random.default_rng(3)
    x = rng.permutation(30).astype(float)
    y = 0.02 * x + rng.normal(0, 0.1, 30)
    y[[3, 7]] = np.nan  # dropped
    ok = ~np.isnan(y)
    low, high = sm.OLS(y[ok], sm.add_constant(x[ok])).fit().conf_int(alpha=1 - level)[1]
    iv = slope_interval(x, y, level)
    assert iv.low == pytest.approx(low, abs=1e-12) and iv.high == pytest.approx(high, abs=1e-12) and iv.n == 28
    exact = slope_interval([0, 1, 2, 3], [1, 3, 5, 7], autocorrelated=True)  # no residual: no width
    assert exact.value == exact.low == exact.high == 2.0


def test_a_slope_of_an_autocorrelated_series_gets_a_wider_interval():
    rng = np.random.default_rng(5)
    walk = np.cumsum(rng.normal(0, 0.1, 30))  # a random walk: residuals strongly autocorrelated
    x = np.arange(30)
    plain, widened = slope_interval(x, walk), slope_interval(x, walk, autocorrelated=True)
    assert widened.value == plain.value and widened.high - widened.low > 2 * (plain.high - plain.low)
    noise = rng.normal(0, 0.1, 30)
    assert slope_interval(x, noise, autocorrelated=True).high - slope_interval(x, noise).high < 0.01


@pytest.mark.parametrize(
    ("second", "first", "low", "high"),
    [
        ((56, 70), (48, 80), 0.0524, 0.3339),
        ((9, 10), (3, 10), 0.1705, 0.8090),
        ((5, 56), (0, 29), -0.0381, 0.1926),
        ((0, 10), (0, 20), -0.1611, 0.2775),
        ((0, 10), (0, 10), -0.2775, 0.2775),
        ((10, 10), (0, 20), 0.6791, 1.0),
        ((10, 10), (0, 10), 0.6075, 1.0),
    ],
)
def test_newcombe_difference_matches_the_published_examples(second, first, low, high):
    # Newcombe (1998), "Interval estimation for the difference between independent proportions", table II, method 10
    d = newcombe_difference(wilson(*first), wilson(*second))
    assert d.value == pytest.approx(second[0] / second[1] - first[0] / first[1])
    assert d.low == pytest.approx(low, abs=1e-4) and d.high == pytest.approx(high, abs=1e-4)


def test_newcombe_difference_keeps_a_width_at_zero_and_nan_without_trials():
    still = newcombe_difference(wilson(0, 40), wilson(0, 40))  # 0 → 0 keeps a width, unlike Wald's
    assert still.value == 0.0 and still.low < -0.05 and still.high > 0.05
    assert np.isnan(newcombe_difference(wilson(0, 0), wilson(3, 5)).low)


def test_the_design_effect_pools_the_series_and_never_narrows():
    # two points at p = 0.5, n = 40: binomial variance 1/160 each; cluster-robust twice that
    se = (2 / 160) ** 0.5
    assert design_effect([0.5, 0.5], [se, se], [40, 40]) == pytest.approx(2.0)
    assert design_effect([0.5, 0.5], [0.01, 0.01], [40, 40]) == 1.0  # below binomial: floored
    assert design_effect([0.0, float("nan")], [0.0, float("nan")], [40, 0]) == 1.0  # nothing varies
