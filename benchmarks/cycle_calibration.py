"""False positives and power of the arms-race cycle test, by simulation at the runs' sizes.

``analysis.claims.cycle_test`` reads a per-generation fresh solve rate for a periodic swing of
any period from 2 to 10 generations. Here it meets series shaped like the runs': G
generations, each with P problems of g answers whose own rates are drawn from a Beta of the
generation's mean and an intra-problem correlation (ICC) of 0.3 (the runs' is 0.2–0.4).

- False positives: a constant mean (no cycle): the share of series with p < 0.05, goal ≤ 5%.
- Power: a mean of base + A·sin(2πt/period + φ), φ uniform, for each period 2..10 and each
  amplitude A; the share with p < 0.05.
- The rule it replaces (the χ² excess-variance test with p < 0.05 *and* a negative lag-1
  autocorrelation) on the same series, for comparison: it cannot see periods of 4 or more.

    python benchmarks/cycle_calibration.py [--quick] [--sims 1000]

Prints the tables on stderr and one final JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from populora_core.analysis.claims import cycle_test, oscillation_test
from populora_core.metrics.dynamics import oscillation
from populora_core.metrics.stats import cluster_rate

PERIODS = (2, 3, 4, 5, 6, 8, 10)


def series(rng: np.random.Generator, means: np.ndarray, problems: int, g: int, icc: float) -> pd.DataFrame:
    """One run's per-generation rates: ``problems`` problems of ``g`` answers a generation."""
    rows = []
    for t, m in enumerate(np.clip(means, 0.02, 0.98)):
        a, b = m * (1 / icc - 1), (1 - m) * (1 / icc - 1)
        r = cluster_rate(rng.binomial(g, rng.beta(a, b, size=problems)), [g] * problems)
        rows.append({"generation": t, "rate": r.rate, "se": r.se, "n": r.n})
    return pd.DataFrame(rows)


def rejections(rng, means_of, sims: int, problems: int, g: int, icc: float) -> tuple[float, float]:
    """(cycle test, old rule) shares of p < 0.05 over ``sims`` series whose means ``means_of(rng)`` gives."""
    new = old = 0
    for _ in range(sims):
        rates = series(rng, means_of(rng), problems, g, icc)
        new += cycle_test(rates)["p_value"] < 0.05
        lag1 = oscillation(rates["rate"].tolist())["lag1_autocorr"]
        old += oscillation_test(rates)["p_value"] < 0.05 and lag1 < 0
    return new / sims, old / sims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 series per cell, one design")
    parser.add_argument("--sims", type=int, default=1000, help="series per cell")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sims = 200 if args.quick else args.sims
    rng = np.random.default_rng(args.seed)
    # (generations, problems a generation, answers a problem, base rate): the powered run's
    # 30 generations with 8 or 16 fresh problems of 4 answers, at the population's ~15% and 30%
    designs = [(30, 16, 4, 0.3)] if args.quick else [(30, 8, 4, 0.15), (30, 16, 4, 0.3), (20, 16, 4, 0.3)]
    amplitudes = (0.1,) if args.quick else (0.05, 0.1, 0.15)
    icc = 0.3
    out = {"sims": sims, "icc": icc, "designs": []}
    for gens, problems, g, base in designs:
        t = np.arange(gens)
        fp_new, fp_old = rejections(rng, lambda r: np.full(gens, base), sims, problems, g, icc)  # noqa: B023
        design = {"generations": gens, "problems": problems, "answers": g, "base": base}
        design |= {"false_positive": fp_new, "false_positive_old_rule": fp_old, "power": {}}
        print(f"\n{gens} generations, {problems} problems × {g} answers, base rate {base}, ICC {icc}:", file=sys.stderr)
        print(f"false positives: cycle test {fp_new:.3f}, old rule {fp_old:.3f} ({sims} series)", file=sys.stderr)
        print("| amplitude | " + " | ".join(f"period {p}" for p in PERIODS) + " |", file=sys.stderr)
        for amp in amplitudes:
            cells = []
            for period in PERIODS:

                def means(r, period=period, amp=amp, base=base, t=t):
                    return base + amp * np.sin(2 * np.pi * t / period + r.uniform(0, 2 * np.pi))

                new, old = rejections(rng, means, sims, problems, g, icc)
                design["power"][f"{amp}/{period}"] = {"cycle_test": new, "old_rule": old}
                cells.append(f"{new:.2f} ({old:.2f})")
            print(f"| {amp} | " + " | ".join(cells) + " |", file=sys.stderr)
        out["designs"].append(design)
    out["max_false_positive"] = max(d["false_positive"] for d in out["designs"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
