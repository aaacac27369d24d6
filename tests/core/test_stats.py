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
