"""The statistics that can support or contradict the paper's claims about a run, each with
its interval, from the run's artifacts alone.

- The fresh solve rate of a window of generations, with a cluster-robust standard error:
  a problem's G answers share its difficulty, so problems are the clusters
  (``metrics.stats.cluster_rate``). The intra-problem correlation (ICC) and the design
  effect say how much the clustering costs against the binomial count.
- The change between the first and the last window (default 5 generations each).
- Oscillation beyond sampling noise: the fresh solve rate's departures from its trend,
  each over the variance sampling alone gives it (binomial at the trend times the run's
  design effect), summed: χ² with G − 2 degrees of freedom. A constant rate is rejected
  at about the nominal 5% (``tests/core/test_claims.py`` simulates it); an arms race that
  swings the rate gives a small p.
- Cycles: the same standardized departures' periodogram at periods of 2 to 10 generations
  (``cycle_test``), so a slow arms race (students catching up over a few evolution rounds)
  is seen, not only a flip-flop every generation; calibrated by simulation
  (``benchmarks/cycle_calibration.py``).
- Slopes per generation, with t intervals widened for autocorrelated residuals: mean
  complexity of the valid fresh programs and the calibrated CVT coverage of each
  generation, rarefied to a fixed number of valid programs.
- The trivial-program share (identity or constant functions; shallow, AST depth ≤ 6) of
  the first and the last window.

``claim_verdicts`` reads the first two claims from these (the third, held-out, is
``evaluation.paired``'s): *supports*, *contradicts* or *cannot tell*, by the rules
written in ``CLAIM_RULES``.
"""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pandas as pd

from populora_core.analysis.data import (
    RunData,
    calibrated_coverage,
    complexity_trends,
    fresh_answers,
    per_generation_rates,
    problem_clusters,
)
from populora_core.metrics.dynamics import trivial_flags
from populora_core.metrics.stats import (
    Z95,
    Interval,
    cluster_rate,
    design_effect,
    newcombe_difference,
    slope_interval,
    wilson,
)

WINDOW = 5
"""Generations per window of ``window_change``."""
COMPLEXITY = ("ast_depth", "cyclomatic", "loc", "halstead")


def _rate(clusters: pd.DataFrame) -> dict[str, float]:
    """The rate of ``clusters`` with its cluster-robust standard error floored at the
    binomial one (an estimated design effect below 1 is noise), answers and problems."""
    r = cluster_rate(clusters["k"], clusters["n"])
    binomial = math.sqrt(r.rate * (1 - r.rate) / r.n) if r.n else float("nan")
    se = max(r.se, binomial) if r.se == r.se else binomial
    return {"rate": r.rate, "se": se, "binomial_se": binomial, "n": r.n, "problems": r.clusters}


def problem_icc(answers: pd.DataFrame) -> float:
    """ANOVA estimate of the intra-problem correlation of correctness (unequal cluster sizes;
    Donner, 1986), problems compared with their own generation's rate (a rate that moves
    across generations is not counted as agreement within problems); NaN with no
    between-problem degrees of freedom or no variance."""
    c = problem_clusters(answers)
    problems, total, gens = len(c), int(c["n"].sum()), c["generation"].nunique()
    if problems - gens < 1 or total <= problems:
        return float("nan")
    n, p_c = c["n"].to_numpy(dtype=float), (c["k"] / c["n"]).to_numpy()
    per_gen = c.groupby("generation")[["k", "n"]].transform("sum")
    p_g, n_g = (per_gen["k"] / per_gen["n"]).to_numpy(), per_gen["n"].to_numpy(dtype=float)
    msb = float((n * (p_c - p_g) ** 2).sum()) / (problems - gens)
    msw = float((n * p_c * (1 - p_c)).sum()) / (total - problems)
    n0 = (total - float((n**2 / n_g).sum())) / (problems - gens)
    denom = msb + (n0 - 1) * msw
    return (msb - msw) / denom if denom > 0 else float("nan")


def window_rate(answers: pd.DataFrame, generations: list[int]) -> dict[str, float]:
    """The fresh solve rate over ``generations``: rate, standard errors (cluster-robust,
    floored at the binomial, and the binomial), answers and problems."""
    return _rate(problem_clusters(answers[answers["generation"].isin(generations)]))


def _windows(gens: list[int], window: int) -> tuple[list[int], list[int]]:
    """The first and the last ``window`` generations; halves when the run is shorter than two
    windows (empty when it has one generation)."""
    window = min(window, len(gens) // 2)
    return (gens[:window], gens[-window:]) if window else ([], [])


def window_change(data: RunData, window: int = WINDOW, answers: pd.DataFrame | None = None) -> dict:
    """The fresh solve rate of the first and the last ``window`` generations and their
    difference (last − first) with its 95% interval from the windows' standard errors. A run
    shorter than two windows gets two halves (``window`` says the length used); one
    generation gives NaN. ``answers``: the run's ``fresh_answers``, if already computed."""
    gens = data.generations
    first, last = _windows(gens, window)
    window = len(first)
    answers = fresh_answers(data) if answers is None else answers
    if not window:
        a = b = {"rate": float("nan"), "se": float("nan"), "binomial_se": float("nan"), "n": 0, "problems": 0}
        first = last = gens[:1]
    else:
        a, b = window_rate(answers, first), window_rate(answers, last)
    diff = b["rate"] - a["rate"]
    se = math.sqrt(a["se"] ** 2 + b["se"] ** 2)
    binomial_se = math.sqrt(a["binomial_se"] ** 2 + b["binomial_se"] ** 2)
    return {
        "window": window,
        "first_generations": [first[0], first[-1]],
        "last_generations": [last[0], last[-1]],
        "first": a,
        "last": b,
        "difference": asdict(Interval(diff, diff - Z95 * se, diff + Z95 * se, a["n"] + b["n"])),
        "difference_binomial_se": binomial_se,
        "icc": problem_icc(answers),
        "design_effect": (se / binomial_se) ** 2 if binomial_se > 0 else float("nan"),
    }


def _standardized_residuals(rates: pd.DataFrame) -> tuple[np.ndarray, float] | None:
    """The per-generation rates' departures from their trend, each over the standard deviation
    sampling alone gives it, and the design effect used; None with fewer than 4 generations.

    The trend is a weighted least-squares line (weights √n). Each generation's variance is
    the binomial one at the trend, p(1 − p)/n, times one design effect for the whole run:
    Σ cluster-robust variances / Σ binomial variances over the generations, at least 1.
    (Each generation's own cluster-robust variance, from its few problems, is too noisy to
    divide by: the test then rejects a constant rate 20–30% of the time.) Generations
    without fresh answers are skipped."""
    r = rates.dropna(subset=["rate"])
    r = r[r["n"] > 0]
    if len(r) < 4:
        return None
    x, y, n = (r[c].to_numpy(dtype=float) for c in ("generation", "rate", "n"))
    trend = np.polyval(np.polyfit(x, y, 1, w=np.sqrt(n)), x)
    p = np.clip(trend, 0.5 / n, 1 - 0.5 / n)
    deff = design_effect(y, r["se"], n)
    return (y - trend) / np.sqrt(deff * p * (1 - p) / n), deff


def oscillation_test(rates: pd.DataFrame) -> dict[str, float]:
    """χ² of the per-generation rates around their trend, over what sampling alone gives
    (``_standardized_residuals``): Σ z², G − 2 degrees of freedom. Any excess variance, periodic
    or not. Returns χ², df, p-value, the ratio χ²/df (about 1 for sampling noise) and the
    design effect used."""
    from scipy import stats

    nan = {"chi2": float("nan"), "df": 0, "p_value": float("nan"), "ratio": float("nan"), "design_effect": float("nan")}
    found = _standardized_residuals(rates)
    if found is None:
        return nan
    z, deff = found
    chi2, df = float((z**2).sum()), len(z) - 2
    return {
        "chi2": chi2,
        "df": df,
        "p_value": float(stats.chi2.sf(chi2, df)),
        "ratio": chi2 / df,
        "design_effect": deff,
    }


CYCLE_PERIODS = (2.0, 10.0)
"""Periods, in generations, the cycle test looks for: a flip-flop every generation to a swing
every ten (an arms race whose students catch up within a few evolution rounds)."""


def cycle_test(rates: pd.DataFrame, periods: tuple[float, float] = CYCLE_PERIODS) -> dict[str, float]:
    """A periodic swing of the per-generation rates beyond sampling noise, of any period in
    ``periods`` (generations), slow cycles included.

    Statistic: the periodogram of the standardized residuals z_t (``_standardized_residuals``)
    at each Fourier frequency k/G whose period G/k lies in ``periods``:
    S_k = (2/G)·[(Σ z_t cos 2πkt/G)² + (Σ z_t sin 2πkt/G)²], χ² with 2 degrees of freedom under
    sampling noise alone (1 at the period of 2, G even). The p-value is the smallest
    ordinate's, corrected for the K frequencies looked at (Šidák: 1 − (1 − p_min)^K). Unlike
    a negative lag-1 autocorrelation, which only a flip-flop every generation has, a period
    of 4 or more generations shows up here. ``benchmarks/cycle_calibration.py`` measures its
    false positives on stationary clustered binomial series of the runs' sizes and its power
    per period (docs/benchmarks.md#cycle-test). Returns the p-value, the period and amplitude
    (in rate units) of the strongest cycle, K, and the design effect used."""
    from scipy import stats

    nan = {"p_value": float("nan"), "period": float("nan"), "amplitude": float("nan"), "frequencies": 0}
    found = _standardized_residuals(rates)
    if found is None:
        return {**nan, "design_effect": float("nan")}
    z, deff = found
    g, t = len(z), np.arange(len(z), dtype=float)
    ks = [k for k in range(1, g // 2 + 1) if periods[0] <= g / k <= periods[1]]
    if not ks:
        return {**nan, "design_effect": deff}
    best = (2.0, 0, 0.0)  # (p, k, ordinate)
    for k in ks:
        c, s_ = np.cos(2 * np.pi * k * t / g) @ z, np.sin(2 * np.pi * k * t / g) @ z
        nyquist = 2 * k == g
        ordinate = c**2 / g if nyquist else 2.0 / g * (c**2 + s_**2)
        p = float(stats.chi2.sf(ordinate, 1 if nyquist else 2))
        best = min(best, (p, k, ordinate))
    p_min, k, ordinate = best
    r = rates.dropna(subset=["rate"])
    r = r[r["n"] > 0]
    scale = float(np.sqrt(deff * (r["rate"] * (1 - r["rate"]) / r["n"]).mean()))  # one z in rate units
    return {
        "p_value": float(1 - (1 - p_min) ** len(ks)),
        "period": g / k,
        "amplitude": float(np.sqrt(2 * ordinate / g)) * scale,
        "frequencies": len(ks),
        "design_effect": deff,
    }


def slopes(data: RunData) -> dict[str, dict]:
    """Per-generation slopes with 95% t intervals: mean complexity of the valid fresh
    programs (each metric) and the calibrated CVT coverage of each generation's programs: the
    expected cells among ``rarefied_to`` valid programs (``data.calibrated_coverage``; so validity
    alone cannot raise it), per generation; ``coverage_raw``: the share of cells of every valid
    program, as before."""
    trends = complexity_trends(data)
    out = {}
    for metric in COMPLEXITY:
        part = trends[trends["metric"] == metric]
        out[metric] = asdict(slope_interval(part["generation"], part["mean"], autocorrelated=True))
    cov = calibrated_coverage(data)
    out["coverage"] = asdict(slope_interval(cov["generation"], cov["rarefied"], autocorrelated=True))
    out["coverage"]["rarefied_to"] = int(cov["rarefied_to"].iloc[0]) if len(cov) else 0
    out["coverage_raw"] = asdict(slope_interval(cov["generation"], cov["coverage"], autocorrelated=True))
    return out


def trivial_change(data: RunData, window: int = WINDOW) -> dict[str, dict]:
    """Shares of identity-or-constant and of shallow programs among the valid fresh programs
    of the first and the last window (as ``window_change`` sizes them; Wilson intervals),
    and last − first with Newcombe's hybrid score interval."""
    p = data["problems"]
    valid = p[(p["source"] == "fresh") & p["valid"]]
    first, last = _windows(data.generations, window)
    out = {}
    parts = [valid[valid["generation"].isin(first)], valid[valid["generation"].isin(last)]]
    flags = [trivial_flags(list(part["program"]), part["ast_depth"]) for part in parts]
    for f in flags:
        f["identity_or_constant"] = f["identity"] | f["constant"]
    for name in ("identity_or_constant", "shallow"):
        a, b = (wilson(int(f[name].sum()), int(f[name].size)) for f in flags)
        out[name] = {"first": asdict(a), "last": asdict(b), "difference": asdict(newcombe_difference(a, b))}
    return out


def run_statistics(data: RunData, window: int = WINDOW, single_agent: bool | None = None) -> dict:
    """Every statistic above for one run (JSON-ready: intervals as dicts). ``single_agent``:
    whether the run is a single-agent baseline (default: ``RunData.single_agent``)."""
    answers = fresh_answers(data)
    rates = per_generation_rates(data, answers)
    return {
        "run": data.label,
        "single_agent": data.single_agent if single_agent is None else bool(single_agent),
        "generations": len(data.generations),
        "fresh_window_change": window_change(data, window, answers),
        "fresh_oscillation": oscillation_test(rates),
        "fresh_cycles": cycle_test(rates),
        "fresh_per_generation_answers": {
            "median": float(rates["n"].median()),
            "min": int(rates["n"].min()),
            "max": int(rates["n"].max()),
        },
        "slopes": slopes(data),
        "trivial_change": trivial_change(data, window),
    }


CLAIM_RULES: dict[str, str] = {
    "collapse": "The single agent's fresh solve rate climbs while its programs simplify. Supports: the "
    "last-minus-first window change of the fresh solve rate has its 95% interval above 0, and the "
    "identity-or-constant share's change has its interval above 0 or the AST-depth slope its interval "
    "below 0. Contradicts: the solve-rate change's interval is below 0, or the AST-depth slope's is above 0 "
    "while the trivial share's change is not above 0. Otherwise: cannot tell.",
    "arms_race": "The population's fresh solve rate oscillates while complexity and coverage grow. Supports: "
    "the cycle test (a periodic swing of any period from 2 to 10 generations beyond sampling noise) has "
    "p < 0.05, and the AST-depth and (rarefied) coverage slopes both have their intervals above 0. Contradicts: the "
    "AST-depth or the coverage slope has its interval below 0. Otherwise: cannot tell.",
}
"""How ``claim_verdicts`` reads each claim (stated in the report below the verdicts)."""


def _above(iv: dict) -> bool:
    return iv["low"] > 0


def _below(iv: dict) -> bool:
    return iv["high"] < 0


def claim_verdicts(stats: dict) -> dict[str, str]:
    """The claim this run speaks to (``collapse`` for a single agent, ``arms_race`` for a
    population) → "supports", "contradicts" or "cannot tell", by ``CLAIM_RULES``."""
    depth = stats["slopes"]["ast_depth"]
    if stats["single_agent"]:
        change = stats["fresh_window_change"]["difference"]
        trivial = stats["trivial_change"]["identity_or_constant"]["difference"]
        if _above(change) and (_above(trivial) or _below(depth)):
            return {"collapse": "supports"}
        if _below(change) or (_above(depth) and not _above(trivial)):
            return {"collapse": "contradicts"}
        return {"collapse": "cannot tell"}
    coverage = stats["slopes"]["coverage"]
    if _below(depth) or _below(coverage):
        return {"arms_race": "contradicts"}
    oscillates = stats["fresh_cycles"]["p_value"] < 0.05
    if oscillates and _above(depth) and _above(coverage):
        return {"arms_race": "supports"}
    return {"arms_race": "cannot tell"}


def format_number(value: float, fmt: str = "+.3f") -> str:
    """``value`` in ``fmt``; NaN as –."""
    return "–" if value != value else format(value, fmt)


def format_interval(interval: dict, fmt: str) -> str:
    """``value [low, high]`` of an ``Interval`` dict, each in ``fmt`` (NaN: –)."""
    value, low, high = (format_number(interval[k], fmt) for k in ("value", "low", "high"))
    return f"{value} [{low}, {high}]"


def claim_evidence(stats: dict) -> str:
    """The statistics ``claim_verdicts`` reads for this run, with their 95% intervals, as text."""
    iv = format_interval
    depth = f"AST depth slope {iv(stats['slopes']['ast_depth'], '+.3f')}/gen"
    if stats["single_agent"]:
        change = iv(stats["fresh_window_change"]["difference"], "+.3f")
        trivial = iv(stats["trivial_change"]["identity_or_constant"]["difference"], "+.2f")
        return f"fresh solve rate change {change}, identity-or-constant share change {trivial}, {depth}"
    cycles = stats["fresh_cycles"]
    p, period = format_number(cycles["p_value"], ".3g"), format_number(cycles["period"], ".1f")
    coverage = iv(stats["slopes"]["coverage"], "+.3f")
    cycles_text = f"cycle test p = {p} (strongest period {period} generations)"
    return f"{cycles_text}, {depth}, coverage slope {coverage} cells/gen (rarefied)"
