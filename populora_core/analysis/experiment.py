"""An experiment read over seeds: each run's statistics, then each claim tested across seeds
(seeds are the unit), with the power the design had at the spread it saw.

Per run: ``claims.run_statistics`` (every within-run interval is kept and shown per seed).
Per claim (``experiment.Claim``):
- one arm: the seeds' values against 0, one-sample t-test;
- two arms: the difference of the arms' means, Welch's t-test (arms' seeds are not paired:
  the same seed in two arms shares no randomness that matters).
Verdict: *supports* when p < α in the claim's direction, *contradicts* when p < α in the
other direction (one-sided claims), else *cannot tell*, with the power the design has for
an effect of ``Experiment.effect`` at the observed standard deviation and the seeds per arm
that would reach ``Experiment.power`` — so "cannot tell" says how many seeds would tell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from populora_core.analysis.claims import format_number as _f

STATISTICS: dict[str, Callable[[dict], float]] = {
    "fresh_solve_rate_change": lambda s: s["fresh_window_change"]["difference"]["value"],
    "ast_depth_slope": lambda s: s["slopes"]["ast_depth"]["value"],
    "halstead_slope": lambda s: s["slopes"]["halstead"]["value"],
    "coverage_slope": lambda s: s["slopes"]["coverage"]["value"],
    "identity_or_constant_change": lambda s: s["trivial_change"]["identity_or_constant"]["difference"]["value"],
    "cycle_amplitude": lambda s: s["fresh_cycles"]["amplitude"],
}
"""Per-run statistics a claim can name (from ``claims.run_statistics``): the fresh solve rate's
last-minus-first window change, complexity and (rarefied) coverage slopes per generation, the
trivial share's change, the strongest cycle's amplitude."""

INTERVALS: dict[str, Callable[[dict], dict | None]] = {
    "fresh_solve_rate_change": lambda s: s["fresh_window_change"]["difference"],
    "ast_depth_slope": lambda s: s["slopes"]["ast_depth"],
    "halstead_slope": lambda s: s["slopes"]["halstead"],
    "coverage_slope": lambda s: s["slopes"]["coverage"],
    "identity_or_constant_change": lambda s: s["trivial_change"]["identity_or_constant"]["difference"],
    "cycle_amplitude": lambda s: None,
}
"""The within-run interval of each statistic, shown per seed (None: it has none)."""


@dataclass(frozen=True)
class ClaimResult:
    claim: str
    statistic: str
    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    """The seeds whose runs were read in every arm of the claim."""
    estimate: float
    """One arm: the seeds' mean; two: first arm's mean − second's."""
    sd: float
    """The seeds' standard deviation (two arms: pooled)."""
    p_value: float
    verdict: str
    power: float
    """At the observed sd, for an effect of the experiment's ``effect``."""
    seeds_for_power: int | None
    """Seeds per arm that would give the experiment's ``power`` at the observed sd (None: > 1000)."""


def t_power(effect: float, sd: float, n: int, alpha: float, two_arms: bool, alternative: str) -> float:
    """Power of the (one-sample or two-sample, equal n) t-test to find ``effect`` at standard
    deviation ``sd`` with ``n`` seeds per arm: 1 − F_nct(t_crit; df, δ), δ = effect/(sd·√(k/n)),
    k = 2 for two arms (one-sided at α; two-sided: α/2 on each side)."""
    from scipy import stats

    if n < 2 or not sd > 0:
        return float("nan")
    df = 2 * n - 2 if two_arms else n - 1
    ncp = effect / (sd * math.sqrt((2 if two_arms else 1) / n))
    side = alpha / 2 if alternative == "two-sided" else alpha
    crit = stats.t.ppf(1 - side, df)
    return float(stats.nct.sf(crit, df, ncp) + (stats.nct.cdf(-crit, df, ncp) if alternative == "two-sided" else 0))


def seeds_needed(effect: float, sd: float, alpha: float, power: float, two_arms: bool, alternative: str) -> int | None:
    """The fewest seeds per arm whose ``t_power`` reaches ``power`` (None: more than 1000)."""
    for n in range(2, 1001):
        if t_power(effect, sd, n, alpha, two_arms, alternative) >= power:
            return n
    return None


def _verdict(p_greater: float, p_less: float, alternative: str, alpha: float) -> tuple[float, str]:
    if alternative == "two-sided":
        p = min(1.0, 2 * min(p_greater, p_less))
        return p, "supports" if p < alpha else "cannot tell"
    p, other = (p_greater, p_less) if alternative == "greater" else (p_less, p_greater)
    return p, "supports" if p < alpha else "contradicts" if other < alpha else "cannot tell"


def decide_claim(
    name: str,
    claim,
    values: Mapping[str, Sequence[float]],
    *,
    alpha: float,
    effect: float,
    power: float,
    seeds: Sequence[int] | None = None,
) -> ClaimResult:
    """One claim (``experiment.Claim``) over ``values`` (arm → the statistic per seed, NaN for a
    run not read, dropped; ``seeds``: the seeds in that order, default 0, 1, …)."""
    from scipy import stats

    seeds = tuple(seeds) if seeds is not None else tuple(range(len(next(iter(values.values())))))
    arms = (claim.arm,) if claim.arm else tuple(claim.arms)
    xs = [np.asarray([v for v in values[a] if v == v], dtype=float) for a in arms]
    used = tuple(s for s, *vs in zip(seeds, *(values[a] for a in arms), strict=True) if all(v == v for v in vs))
    n = min(len(x) for x in xs)
    nan = ClaimResult(name, claim.statistic, arms, (), float("nan"), float("nan"), float("nan"), "cannot tell",
                      float("nan"), None)  # fmt: skip
    if n < 2:
        return nan
    if len(xs) == 1:
        x = xs[0]
        estimate, sd = float(x.mean()), float(x.std(ddof=1))
        greater = stats.ttest_1samp(x, 0.0, alternative="greater").pvalue
        less = stats.ttest_1samp(x, 0.0, alternative="less").pvalue
    else:
        a, b = xs
        estimate = float(a.mean() - b.mean())
        sd = float(math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2))
        greater = stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue
        less = stats.ttest_ind(a, b, equal_var=False, alternative="less").pvalue
    if not sd > 0:  # every seed the same: the t-test is undefined; nothing varies to test
        return ClaimResult(name, claim.statistic, arms, (), estimate, sd, float("nan"), "cannot tell",
                           float("nan"), None)  # fmt: skip
    p, verdict = _verdict(float(greater), float(less), claim.alternative, alpha)
    two = len(xs) == 2
    return ClaimResult(
        claim=name,
        statistic=claim.statistic,
        arms=arms,
        seeds=used,
        estimate=estimate,
        sd=sd,
        p_value=p,
        verdict=verdict,
        power=t_power(effect, sd, n, alpha, two, claim.alternative),
        seeds_for_power=seeds_needed(effect, sd, alpha, power, two, claim.alternative),
    )


def per_seed_values(spec, stats: Mapping[tuple[str, int], dict]) -> dict[str, dict[str, list[float]]]:
    """statistic → arm → its value per seed (in the experiment's seed order; NaN for a run
    not there yet)."""
    out: dict[str, dict[str, list[float]]] = {}
    for claim in spec.claims.values():
        get = STATISTICS[claim.statistic]
        out[claim.statistic] = {
            arm: [float(get(stats[(arm, s)])) if (arm, s) in stats else float("nan") for s in spec.seeds]
            for arm in spec.arms
        }
    return out


def analyze_experiment(spec, stats: Mapping[tuple[str, int], dict]) -> list[ClaimResult]:
    """Every claim of ``spec`` over the runs' statistics ``stats`` ((arm, seed) → ``run_statistics``)."""
    values = per_seed_values(spec, stats)
    return [
        decide_claim(name, claim, values[claim.statistic], alpha=spec.alpha, effect=spec.effect, power=spec.power)
        for name, claim in spec.claims.items()
    ]


def experiment_report(spec, stats: Mapping[tuple[str, int], dict], results: Sequence[ClaimResult]) -> str:
    """Markdown: each claim's verdict over seeds with the design's power, then each statistic per
    arm and seed with its within-run interval."""
    design = f"Seeds {spec.seeds}, arms {', '.join(spec.arms)}, {spec.generations} generations; α = {spec.alpha}"
    lines = [f"# Experiment {spec.name}", "", spec.description, "", f"{design}, target power {spec.power} at an "
             f"effect of {spec.effect}. Runs read: {len(stats)} of {len(spec.runs())}.", ""]  # fmt: skip
    lines += ["## Claims (seeds are the unit)", ""]
    lines += ["| claim | statistic | arms | estimate | sd over seeds | p | verdict | power at this sd | seeds per arm "
              "for the target power |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        need = "–" if r.seeds_for_power is None else str(r.seeds_for_power)
        lines.append(
            f"| {r.claim} | {r.statistic} | {' − '.join(r.arms)} | {_f(r.estimate, '+.3f')} | {_f(r.sd, '.3f')} | "
            f"{_f(r.p_value, '.3g')} | **{r.verdict}** | {_f(r.power, '.2f')} | {need} |"
        )
    lines += ["", *[f"- *{n}*: {c.statement}" for n, c in spec.claims.items() if c.statement]]
    lines += ["", "## Per seed (within-run 95% intervals)", ""]
    for statistic in dict.fromkeys(c.statistic for c in spec.claims.values()):
        lines += [f"### {statistic}", "", "| arm | " + " | ".join(f"seed {s}" for s in spec.seeds) + " |"]
        lines.append("|---|" + "---|" * len(spec.seeds))
        for arm in spec.arms:
            cells = [_cell(statistic, stats.get((arm, s))) for s in spec.seeds]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _cell(statistic: str, st: dict | None) -> str:
    if st is None:
        return "–"
    iv = INTERVALS[statistic](st)
    interval = f" [{_f(iv['low'], '+.3f')}, {_f(iv['high'], '+.3f')}]" if iv else ""
    return _f(STATISTICS[statistic](st), "+.3f") + interval


def result_rows(results: Sequence[ClaimResult]) -> list[dict]:
    return [asdict(r) for r in results]
