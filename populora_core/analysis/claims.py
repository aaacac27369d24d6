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
- Slopes per generation, with t intervals widened for autocorrelated residuals: mean
  complexity of the valid fresh programs and the calibrated CVT coverage of each
  generation.
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


def oscillation_test(rates: pd.DataFrame) -> dict[str, float]:
    """χ² of the per-generation rates around their trend, over what sampling alone gives.

    The trend is a weighted least-squares line (weights √n). Each generation's variance is
    the binomial one at the trend, p(1 − p)/n, times one design effect for the whole run:
    Σ cluster-robust variances / Σ binomial variances over the generations, at least 1.
    (Each generation's own cluster-robust variance, from its few problems, is too noisy to
    divide by: the test then rejects a constant rate 20–30% of the time.) Generations
    without fresh answers are skipped. Returns χ², degrees of freedom (G − 2), p-value,
    the ratio χ²/df (about 1 for sampling noise) and the design effect used."""
    from scipy import stats

    r = rates.dropna(subset=["rate"])
    r = r[r["n"] > 0]
    nan = {"chi2": float("nan"), "df": 0, "p_value": float("nan"), "ratio": float("nan"), "design_effect": float("nan")}
    if len(r) < 4:
        return nan
    x, y, n = (r[c].to_numpy(dtype=float) for c in ("generation", "rate", "n"))
    trend = np.polyval(np.polyfit(x, y, 1, w=np.sqrt(n)), x)
    p = np.clip(trend, 0.5 / n, 1 - 0.5 / n)
    deff = design_effect(y, r["se"], n)
    chi2, df = float(((y - trend) ** 2 / (deff * p * (1 - p) / n)).sum()), len(r) - 2
    return {
        "chi2": chi2,
        "df": df,
        "p_value": float(stats.chi2.sf(chi2, df)),
        "ratio": chi2 / df,
        "design_effect": deff,
    }


def slopes(data: RunData) -> dict[str, dict]:
    """Per-generation slopes with 95% t intervals: mean complexity of the valid fresh
    programs (each metric) and the calibrated CVT coverage of each generation's programs."""
    trends = complexity_trends(data)
    out = {}
    for metric in COMPLEXITY:
        part = trends[trends["metric"] == metric]
        out[metric] = asdict(slope_interval(part["generation"], part["mean"], autocorrelated=True))
    cov = calibrated_coverage(data)
    out["coverage"] = asdict(slope_interval(cov["generation"], cov["coverage"], autocorrelated=True))
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
    "the oscillation test's p < 0.05 with a negative lag-1 autocorrelation, and the AST-depth and coverage "
    "slopes both have their intervals above 0. Contradicts: the AST-depth or the coverage slope has its "
    "interval below 0. Otherwise: cannot tell.",
}
"""How ``claim_verdicts`` reads each claim (stated in the report below the verdicts)."""


def _above(iv: dict) -> bool:
    return iv["low"] > 0


def _below(iv: dict) -> bool:
    return iv["high"] < 0


def claim_verdicts(stats: dict, lag1: float = float("nan")) -> dict[str, str]:
    """The claim this run speaks to (``collapse`` for a single agent, ``arms_race`` for a
    population) → "supports", "contradicts" or "cannot tell", by ``CLAIM_RULES``.
    ``lag1``: the fresh solve rate's lag-1 autocorrelation (``metrics.dynamics.oscillation``)."""
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
    oscillates = stats["fresh_oscillation"]["p_value"] < 0.05 and lag1 < 0
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


def claim_evidence(stats: dict, lag1: float = float("nan")) -> str:
    """The statistics ``claim_verdicts`` reads for this run, with their 95% intervals, as text."""
    iv = format_interval
    depth = f"AST depth slope {iv(stats['slopes']['ast_depth'], '+.3f')}/gen"
    if stats["single_agent"]:
        change = iv(stats["fresh_window_change"]["difference"], "+.3f")
        trivial = iv(stats["trivial_change"]["identity_or_constant"]["difference"], "+.2f")
        return f"fresh solve rate change {change}, identity-or-constant share change {trivial}, {depth}"
    p = format_number(stats["fresh_oscillation"]["p_value"], ".3g")
    coverage = iv(stats["slopes"]["coverage"], "+.4f")
    lag = format_number(lag1, "+.2f")
    return f"oscillation p = {p} (lag-1 autocorrelation {lag}), {depth}, coverage slope {coverage}/gen"
