"""Intervals for the rates and means a run reports (pure functions): every per-generation
figure of a run is a proportion or a mean over a known, small number of samples, drawn with
its 95% interval so that a curve is read against its noise.

The intervals and tests are scipy's and statsmodels' (each function names its own and its
reference); this module keeps the run's conventions around them (NaN for no samples, a
zero-width interval for one, bounds exactly 0 and 1) and computes by hand only what neither
library gives: the AR(1) widening of a slope's interval and the design effect pooled over a
series. scipy and statsmodels are imported on first use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% interval and the number of samples behind it."""

    value: float
    low: float
    high: float
    n: int

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {prefix: self.value, f"{prefix}_low": self.low, f"{prefix}_high": self.high, f"{prefix}_n": self.n}


def _alpha(z: float) -> float:
    """The two-sided significance level whose normal quantile is ``z`` (0.05 for ``Z95``)."""
    from scipy import stats

    return float(2 * stats.norm.sf(z))


def wilson(k: float, n: float, z: float = Z95) -> Interval:
    """Wilson score interval of k successes in n trials (Wilson, 1927; statsmodels'
    ``proportion_confint``, method "wilson"): unlike the normal interval it stays inside
    [0, 1] and is sane at k = 0 or n, where it is exactly 0 and 1. n = 0 gives NaN. k and n
    may be effective counts (divided by a design effect), not whole numbers."""
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    low, high = proportion_confint(k, n, alpha=_alpha(z), method="wilson")
    low = 0.0 if k == 0 else float(low)  # exact at the bounds (rounding would leave 1e-17)
    high = 1.0 if k == n else float(high)
    return Interval(k / n, low, high, n)


def mean_interval(values: Sequence[float], z: float = Z95) -> Interval:
    """Mean ± z·s/√n (s the sample std; statsmodels' ``zconfint_mean``); one value gives a
    zero-width interval."""
    from statsmodels.stats.weightstats import DescrStatsW

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        mean = float(x.mean()) if x.size else float("nan")
        return Interval(mean, mean, mean, int(x.size))
    low, high = DescrStatsW(x).zconfint_mean(alpha=_alpha(z))
    return Interval(float(x.mean()), float(low), float(high), int(x.size))


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, rng: np.random.Generator, resamples: int = 10_000
) -> Interval:
    """mean(a − b) over paired items, with the 2.5–97.5 percentile interval of the mean over
    ``resamples`` resamples of the items with replacement (Efron & Tibshirani, 1993: resampling
    items keeps the pairing, the same item hard for both; scipy's ``bootstrap``, method
    "percentile", drawing from ``rng``)."""
    from scipy import stats

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if d.size < 2:  # scipy resamples two items or more; one item resamples to itself
        return mean_interval(d)
    ci = stats.bootstrap((d,), np.mean, n_resamples=resamples, method="percentile", rng=rng).confidence_interval
    return Interval(float(d.mean()), float(ci.low), float(ci.high), int(d.size))


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant items: ``only_a`` passed by A
    alone, ``only_b`` by B alone; under H0 each discordant item is A's with probability 1/2
    (statsmodels' ``mcnemar``, exact)."""
    from statsmodels.stats.contingency_tables import mcnemar

    return float(mcnemar([[0, only_a], [only_b, 0]], exact=True).pvalue)


@dataclass(frozen=True)
class ClusterRate:
    """k/n over answers in clusters: the rate, its cluster-robust standard error, the
    answers n and the clusters behind it."""

    rate: float
    se: float
    n: int
    clusters: int


def cluster_rate(successes: Sequence[int], sizes: Sequence[int]) -> ClusterRate:
    """Σk/Σn over clusters (k_c successes of n_c answers each) with the ratio estimator's
    cluster-robust variance C/(C−1) · Σ(k_c − r·n_c)² / (Σn)²: answers of one cluster count
    once for their shared difficulty. That is the HC1 variance of the clusters' rates' mean
    weighted by n_c (statsmodels' ``WLS``). One cluster gives a NaN standard error."""
    from statsmodels.regression.linear_model import WLS

    k = np.asarray(successes, dtype=float)
    n = np.asarray(sizes, dtype=float)
    total = float(n.sum())
    if total <= 0:
        return ClusterRate(float("nan"), float("nan"), 0, 0)
    rate, c = float(k.sum()) / total, k.size
    if c < 2:
        return ClusterRate(rate, float("nan"), int(total), c)
    rates = np.divide(k, n, out=np.zeros_like(k), where=n > 0)  # an empty cluster weighs 0
    se = float(WLS(rates, np.ones(c), weights=n).fit(cov_type="HC1").bse[0])
    return ClusterRate(rate, se, int(total), c)


def slope_interval(
    x: Sequence[float], y: Sequence[float], level: float = 0.95, *, autocorrelated: bool = False
) -> Interval:
    """The least-squares slope of y on x (NaN points dropped; scipy's ``linregress``) with its
    t interval (n − 2 degrees of freedom); fewer than 3 points give a NaN interval.
    ``autocorrelated``: the points are a series (one per generation, from slowly changing
    adapters), so the standard error is widened by √((1 + r)/(1 − r)), r the residuals' lag-1
    autocorrelation in x order when positive (capped at 0.9): the AR(1) correction of the
    effective number of points."""
    from scipy import stats

    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = ~(np.isnan(xs) | np.isnan(ys))
    order = np.argsort(xs[ok], kind="stable")
    xs, ys = xs[ok][order], ys[ok][order]
    if xs.size < 2 or np.ptp(xs) == 0:
        return Interval(float("nan"), float("nan"), float("nan"), int(xs.size))
    fit = stats.linregress(xs, ys)
    if xs.size < 3:
        return Interval(float(fit.slope), float("nan"), float("nan"), int(xs.size))
    se = fit.stderr
    residual = ys - (fit.slope * xs + fit.intercept)
    if autocorrelated and residual.size > 3 and residual[:-1].std() > 0 and residual[1:].std() > 0:
        r = min(0.9, float(np.corrcoef(residual[:-1], residual[1:])[0, 1]))
        se *= math.sqrt((1 + r) / (1 - r)) if r > 0 else 1.0
    half = float(stats.t.ppf(0.5 + level / 2, xs.size - 2)) * se  # not t.interval: it gives NaN for se = 0
    return Interval(float(fit.slope), float(fit.slope - half), float(fit.slope + half), int(xs.size))


def newcombe_difference(first: Interval, second: Interval) -> Interval:
    """second − first of two independent proportions (``wilson``'s 95% intervals: their counts
    are value · n), with Newcombe's hybrid score interval (1998, method 10; statsmodels'
    ``confint_proportions_2indep``, method "newcomb"): unlike the Wald interval it keeps its
    width at 0 → 0 and is not too narrow near 0 or 1."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    d = second.value - first.value
    if not (first.n > 0 and second.n > 0):
        return Interval(d, float("nan"), float("nan"), first.n + second.n)
    counts = (second.value * second.n, second.n, first.value * first.n, first.n)
    low, high = confint_proportions_2indep(*counts, method="newcomb", compare="diff")
    return Interval(d, float(low), float(high), first.n + second.n)


def design_effect(rates: Sequence[float], cluster_ses: Sequence[float], sizes: Sequence[int]) -> float:
    """Σ cluster-robust variances / Σ binomial variances p(1 − p)/n over a series of
    proportions (NaN entries skipped), at least 1: one design effect for the whole series,
    steadier than each point's own (a point's few clusters make its variance noisy).
    1 when nothing varies. ``wilson`` at the effective counts (k and n over it) widens a
    rate's interval by it."""
    p, se, n = (np.asarray(v, dtype=float) for v in (rates, cluster_ses, sizes))
    ok = ~np.isnan(p) & (n > 0)
    binomial = float((p[ok] * (1 - p[ok]) / n[ok]).sum())
    clustered = float((np.nan_to_num(se[ok]) ** 2).sum())
    return max(1.0, clustered / binomial) if binomial > 0 else 1.0
