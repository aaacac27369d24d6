"""A run's artifacts gathered across generations, from the run directory alone.

No model and no sandbox: everything comes from the Parquet files and ``_SUCCESS``
summaries, so a run copied off a GPU node analyses on a laptop.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from populora_core.metrics.coverage import (
    RAREFIED_PROBLEMS,
    REFERENCE_CALIBRATION,
    cvt_centroids,
    problem_cells,
    rarefied_cells,
)
from populora_core.metrics.dynamics import oscillation, problem_triviality, solve_rates_by_source
from populora_core.metrics.stats import Interval, cluster_rate, design_effect, mean_interval, wilson
from populora_core.run import RunDir
from populora_core.rundir.artifacts import ArtifactError
from populora_core.stages.runner import check_intact

GATHERED = ("problems", "verdicts", "rewards", "ratings", "lineage", "coverage", "proposals", "probes", "train_metrics")
PROBE_COLUMNS = ["generation", "adapter_id", "role", "problem_id", "completion", "tokens", "status", "changed"]


@dataclass
class RunData:
    """Every complete generation's artifacts of one run, concatenated (column ``generation``)."""

    run: RunDir
    label: str
    summaries: pd.DataFrame
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    population: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def single_agent(self) -> bool:
        """Whether the run is a single-agent baseline; a run without its configuration (a
        hand-made one) counts as a population."""
        return self.run.config_file.is_file() and self.run.config().population.single_agent

    @property
    def generations(self) -> list[int]:
        return sorted(self.summaries["generation"].tolist())

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.frames[name]


def load_run(path: str | Path, label: str | None = None) -> RunData:
    """Reads the complete generations of the run at ``path``."""
    run = RunDir(path)
    if not run.exists():
        raise ArtifactError(f"no run at {path} (a run directory holds run.json and config.yaml)")
    done = run.complete_generations()
    if not done:
        raise ArtifactError(f"run {path} has no complete generation yet")
    check_intact(run)  # sizes and sha256 against _SUCCESS: a damaged file is named with its fix
    summaries = pd.DataFrame(run.summaries())
    frames = {}
    for name in GATHERED:
        parts = [run.read(g, name) for g in done]
        frames[name] = pd.concat(parts, ignore_index=True)
    population = pd.concat(
        [run.members_frame(g) for g in [*done, done[-1] + 1]],
        ignore_index=True,
    )
    return RunData(run=run, label=label or run.run_id, summaries=summaries, frames=frames, population=population)


def solve_rates(data: RunData) -> pd.DataFrame:
    """Solve rate per (generation, student), and the population mean as student ``"mean"``."""
    v = data["verdicts"].assign(correct=lambda f: f["status"] == "correct")
    per = v.groupby(["generation", "student_id"])["correct"].mean().rename("solve_rate").reset_index()
    mean = v.groupby("generation")["correct"].mean().rename("solve_rate").reset_index().assign(student_id="mean")
    return pd.concat([per, mean], ignore_index=True)


def teacher_table(data: RunData) -> pd.DataFrame:
    """Per (generation, teacher): mean teacher reward and valid-proposal rate."""
    r = data["rewards"]
    rewards = r[r["kind"] == "proposal"].groupby(["generation", "adapter_id"])["reward"].mean()
    p = data["problems"]
    fresh = p[p["source"] == "fresh"]
    valid = fresh.groupby(["generation", "teacher_id"])["valid"].mean()
    valid.index = valid.index.set_names(["generation", "adapter_id"])
    return pd.concat([rewards.rename("teacher_reward"), valid.rename("valid_rate")], axis=1).reset_index()


def complexity_trends(data: RunData) -> pd.DataFrame:
    """Mean complexity of valid fresh problems per generation, with the least-squares slope per generation."""
    p = data["problems"]
    valid = p[(p["source"] == "fresh") & p["valid"]]
    rows = []
    for metric in ("ast_depth", "cyclomatic", "loc", "halstead"):
        means = valid.groupby("generation")[metric].mean()
        slope = float(np.polyfit(means.index, means.values, 1)[0]) if len(means) >= 2 else float("nan")
        for g, m in means.items():
            rows.append({"metric": metric, "generation": int(g), "mean": float(m), "slope": slope})
    return pd.DataFrame(rows, columns=["metric", "generation", "mean", "slope"])


def task_mix(data: RunData) -> pd.DataFrame:
    """Valid fresh problems per (generation, task type)."""
    p = data["problems"]
    valid = p[(p["source"] == "fresh") & p["valid"]]
    return valid.groupby(["generation", "task_type"]).size().rename("count").reset_index()


def hardest_problems(data: RunData, per_generation: int = 1) -> pd.DataFrame:
    """Per generation, the valid problems solved least often but at least once, and unsolved ones."""
    p = data["problems"]
    valid = p[p["valid"]].drop_duplicates(["generation", "teacher_id", "problem_id"])
    rates = (
        data["verdicts"]
        .assign(correct=lambda f: f["status"] == "correct")
        .groupby(["generation", "teacher_id", "problem_id"])["correct"]
        .mean()
        .rename("solve_rate")
        .reset_index()
    )
    joined = valid.merge(rates, on=["generation", "teacher_id", "problem_id"])
    rows = []
    for _, part in joined.groupby("generation"):
        solved = part[part["solve_rate"] > 0].sort_values(["solve_rate", "halstead"], ascending=[True, False])
        unsolved = part[part["solve_rate"] == 0].sort_values("halstead", ascending=False)
        rows.append(solved.head(per_generation).assign(kind="hardest solved"))
        rows.append(unsolved.head(per_generation).assign(kind="unsolved"))
    cols = ["generation", "kind", "teacher_id", "task_type", "program", "inputs", "outputs", "solve_rate", "source"]
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)


def dynamics(data: RunData) -> pd.DataFrame:
    """Per generation: the solve rate on fresh problems and on top-ups, the mean ρ of fresh
    problems, and the triviality shares of the valid fresh programs (``metrics.dynamics``)."""
    rows = []
    for g in data.generations:
        p = data["problems"][data["problems"]["generation"] == g]
        v = data["verdicts"][data["verdicts"]["generation"] == g]
        trivial = {f"trivial_{k}": x for k, x in problem_triviality(p).items()}
        rows.append({"generation": g, **solve_rates_by_source(p, v), **trivial})
    return pd.DataFrame(rows)


def fresh_answers(data: RunData) -> pd.DataFrame:
    """Every answer to a fresh valid problem: (generation, teacher_id, problem_id, correct)."""
    p = data["problems"]
    fresh = p.loc[(p["source"] == "fresh") & p["valid"], ["generation", "teacher_id", "problem_id"]]
    keys = ["generation", "teacher_id", "problem_id"]
    v = data["verdicts"].merge(fresh.drop_duplicates(), on=keys, how="inner")
    return v.assign(correct=v["status"] == "correct")[[*keys, "correct"]]


def problem_clusters(answers: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: its generation, correct answers ``k`` and answers ``n``."""
    grouped = answers.groupby(["generation", "teacher_id", "problem_id"])["correct"].agg(k="sum", n="size")
    return grouped.reset_index()[["generation", "k", "n"]]


def per_generation_rates(data: RunData, answers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per generation: the fresh solve rate with its cluster-robust standard error (NaN with
    fewer than two problems) and the answers and problems behind it (``answers``: the run's
    ``fresh_answers``, if already computed)."""
    answers = fresh_answers(data) if answers is None else answers
    rows = []
    for g in data.generations:
        c = problem_clusters(answers[answers["generation"] == g])
        r = cluster_rate(c["k"], c["n"])
        rows.append({"generation": g, "rate": r.rate, "se": r.se, "n": r.n, "problems": r.clusters})
    return pd.DataFrame(rows, columns=["generation", "rate", "se", "n", "problems"])


@functools.lru_cache(maxsize=4)
def _reference_centroids(cells: int) -> np.ndarray:
    return cvt_centroids(cells, seed=0)


def calibrated_coverage(data: RunData, cells: int = 1024) -> pd.DataFrame:
    """Per generation: CVT coverage of the valid fresh programs under the reference calibration
    and one fixed archive (``cells`` centroids, seed 0), this generation and cumulative: the same
    yardstick for every run, whatever its own archive and scales were. ``rarefied``: the
    expected distinct cells among ``rarefied_to`` of the generation's valid programs
    (``metrics.coverage.rarefied_cells``), which, unlike ``coverage``, does not rise just because
    more proposals were valid; ``rarefied_to`` is ``RAREFIED_PROBLEMS`` or the run's smallest
    count of at least 2 valid programs in a generation (a generation with fewer: NaN)."""
    p = data["problems"]
    valid = p[(p["source"] == "fresh") & p["valid"]]
    found = problem_cells(list(valid["program"]), _reference_centroids(cells), REFERENCE_CALIBRATION)
    by_gen = pd.Series(found, index=valid["generation"].to_numpy())
    per_gen = {g: [c for c in by_gen[by_gen.index == g].tolist() if c != -1] for g in data.generations}
    sizes = [len(v) for v in per_gen.values() if len(v) >= 2]
    m = min(RAREFIED_PROBLEMS, *sizes) if sizes else RAREFIED_PROBLEMS  # every generation with ≥ 2 counts
    rows, seen = [], set()
    for g, mine in per_gen.items():
        seen |= set(mine)
        rows.append(
            {
                "generation": g,
                "coverage": len(set(mine)) / cells,
                "cumulative_coverage": len(seen) / cells,
                "rarefied": rarefied_cells(mine, m),
                "rarefied_to": m,
            }
        )
    return pd.DataFrame(rows, columns=["generation", "coverage", "cumulative_coverage", "rarefied", "rarefied_to"])


def _slope(y: np.ndarray, x: np.ndarray) -> float:
    ok = ~np.isnan(y)
    return float(np.polyfit(x[ok], y[ok], 1)[0]) if ok.sum() >= 2 else float("nan")


def headline(data: RunData) -> dict:
    """The figures a closing note quotes: solve-rate trends (all problems and fresh ones) and
    their oscillation, triviality first and last, complexity slopes, coverage, time."""
    s = data.summaries.sort_values("generation")
    gens = s["generation"].to_numpy(dtype=float)
    solve = s["solve_rate"].to_numpy(dtype=float)
    dyn = dynamics(data)
    fresh = dyn["fresh_solve_rate"].to_numpy(dtype=float)
    trends = complexity_trends(data)
    slopes = trends.drop_duplicates("metric").set_index("metric")["slope"].to_dict() if len(trends) else {}
    trivial = [c for c in dyn.columns if c.startswith("trivial_")]
    return {
        "run": data.label,
        "generations": len(s),
        "solve_rate_first": float(solve[0]),
        "solve_rate_last": float(solve[-1]),
        "solve_rate_slope": _slope(solve, gens),
        "fresh_solve_rate_first": float(fresh[0]),
        "fresh_solve_rate_last": float(fresh[-1]),
        "fresh_solve_rate_slope": _slope(fresh, gens),
        "fresh_solve_rate_oscillation": oscillation(fresh),
        "generations_with_fresh_problems": int(dyn["fresh_solutions"].gt(0).sum()),
        "triviality_first": {c.removeprefix("trivial_"): float(dyn[c].iloc[0]) for c in trivial},
        "triviality_last": {c.removeprefix("trivial_"): float(dyn[c].iloc[-1]) for c in trivial},
        "valid_rate_mean": float(s["valid_rate"].mean()),
        "complexity_slopes": {k: float(v) for k, v in slopes.items()},
        "coverage_final": float(s["cumulative_coverage"].iloc[-1]) if "cumulative_coverage" in s else float("nan"),
        "calibrated_coverage_final": float(calibrated_coverage(data)["cumulative_coverage"].iloc[-1]),
        "median_generation_s": float(s["wall_seconds"].median()) if "wall_seconds" in s else float("nan"),
    }


CURVES: dict[str, str] = {
    "student_reward": "students: mean reward",
    "format_error": "students: format errors",
    "teacher_reward": "teachers: mean reward",
    "valid_rate": "teachers: valid proposals",
    "fresh_solve_rate": "fresh problems solved",
    "drift": "drift from the base (probe)",
}
"""Learning-curve keys → their titles (``learning_curves``)."""


def learning_curves(data: RunData) -> pd.DataFrame:
    """Per generation and curve (``CURVES``): the value, its 95% interval and the samples
    behind it. Rates are binomial proportions (Wilson intervals): format errors over the
    students' answers, valid proposals over the fresh proposals, fresh problems solved over
    the answers to them, drift over every (member, probe item). A problem's G answers share
    its difficulty, so the fresh solve rate's interval is Wilson's at the effective sample
    size, answers / the run's design effect (``metrics.stats.design_effect``). Rewards are
    means (normal interval) over the students' answers and the teachers' proposals."""
    rows = []
    fresh_rates = per_generation_rates(data).set_index("generation")
    deff = design_effect(fresh_rates["rate"], fresh_rates["se"], fresh_rates["n"])

    def add(g: int, curve: str, iv: Interval) -> None:
        rows.append({"generation": g, "curve": curve, "value": iv.value, "low": iv.low, "high": iv.high, "n": iv.n})

    r, v, p = data["rewards"], data["verdicts"], data["problems"]
    probes = data.frames.get("probes", pd.DataFrame(columns=PROBE_COLUMNS))
    for g in data.generations:
        rg, vg, pg = r[r["generation"] == g], v[v["generation"] == g], p[p["generation"] == g]
        add(g, "student_reward", mean_interval(rg.loc[rg["kind"] == "rollout", "reward"]))
        add(g, "format_error", wilson(int((vg["status"] == "format_error").sum()), len(vg)))
        add(g, "teacher_reward", mean_interval(rg.loc[rg["kind"] == "proposal", "reward"]))
        fresh = pg[pg["source"] == "fresh"]
        add(g, "valid_rate", wilson(int(fresh["valid"].sum()), len(fresh)))
        rate, n = fresh_rates.loc[g, "rate"], int(fresh_rates.loc[g, "n"])
        iv = wilson(rate * n / deff, n / deff) if n else wilson(0, 0)
        add(g, "fresh_solve_rate", Interval(iv.value, iv.low, iv.high, n))
        members = probes[(probes["generation"] == g) & (probes["role"] != "base")]
        if len(members):
            add(g, "drift", wilson(int(members["changed"].sum()), len(members)))
    return pd.DataFrame(rows, columns=["generation", "curve", "value", "low", "high", "n"])


def learning_sentences(data: RunData) -> list[str]:
    """One sentence per curve, from its first to its last measured generation, with 95%
    intervals, e.g. "students: format errors 41% [29%, 54%] (n=60) at generation 0 → 9%
    [4%, 18%] (n=60) at generation 29; the intervals do not overlap"."""
    curves = learning_curves(data).dropna(subset=["value"])
    lines = []
    for key, title in CURVES.items():
        part = curves[curves["curve"] == key].sort_values("generation")
        if len(part) < 2:
            continue
        first, last = part.iloc[0], part.iloc[-1]
        rate = not key.endswith("reward")

        def show(row, rate=rate) -> str:
            fmt = ".0%" if rate else "+.2f"
            interval = f"[{row['low']:{fmt}}, {row['high']:{fmt}}]"
            return f"{row['value']:{fmt}} {interval} (n={int(row['n'])}) at generation {int(row['generation'])}"

        overlap = first["low"] <= last["high"] and last["low"] <= first["high"]
        verdict = "the intervals overlap" if overlap else "the intervals do not overlap"
        lines.append(f"{title}: {show(first)} → {show(last)}; {verdict}.")
    return lines


def children_against_parents(data: RunData) -> pd.DataFrame:
    """Per child evolution made: its rating after its first generation of matches against its
    parents' at the same point (a culled parent at its last rating before the child was born,
    a hall-of-fame parent at the rating its snapshot was taken with). Columns: child_id, operator,
    generation (the child's first), child_mu, parents_mu (mean), delta_mu, above_parents (the
    child's μ − 3σ above its best parent's). Children not yet rated are left out."""
    from populora_core.population.replacement import hall_entry_adapter, is_hall_entry

    lineage, ratings = data["lineage"], data["ratings"]
    rows = []
    for r in lineage.itertuples(index=False):
        born = int(r.generation) + 1
        now = ratings[ratings["generation"] == born].set_index("adapter_id")
        if r.child_id not in now.index:
            continue
        parents = []
        for p in r.parents:
            pid = hall_entry_adapter(p)
            if is_hall_entry(p):  # the snapshot's rating: after the generation before the one it is named for
                taken = int(p.rsplit("@g", 1)[1]) - 1
                at = ratings[(ratings["adapter_id"] == pid) & (ratings["generation"] == taken)]
            elif pid in now.index:
                at = now.loc[[pid]]
            else:  # culled meanwhile: its last rating before the child was born
                at = ratings[(ratings["adapter_id"] == pid) & (ratings["generation"] <= r.generation)]
            if len(at):
                last = at.sort_values("generation").iloc[-1] if "generation" in at else at.iloc[-1]
                parents.append((float(last["mu"]), _conservative(last)))
        if not parents:
            continue
        child = now.loc[r.child_id]
        parents_mu = float(np.mean([mu for mu, _ in parents]))
        rows.append(
            {
                "child_id": r.child_id,
                "operator": r.operator,
                "generation": born,
                "child_mu": float(child["mu"]),
                "parents_mu": parents_mu,
                "delta_mu": float(child["mu"]) - parents_mu,
                "above_parents": _conservative(child) > max(c for _, c in parents),
            }
        )
    columns = ["child_id", "operator", "generation", "child_mu", "parents_mu", "delta_mu", "above_parents"]
    return pd.DataFrame(rows, columns=columns)


def _conservative(row) -> float:
    return float(row["mu"]) - 3.0 * float(row["sigma"])


def heldout_by_generation(data: RunData) -> pd.DataFrame:
    """Held-out greedy pass@1 over all items of every generation `populora evaluate` judged
    (standard protocol): the best, mean and worst member, the base model, and the items.
    Empty when no generation was evaluated."""
    from populora_core.inference.base import BASE

    rows = []
    for path in sorted((data.run.root / "eval").glob("gen_[0-9][0-9][0-9][0-9]/results.parquet")):
        results = pd.read_parquet(path, columns=["adapter_id", "correct"])
        per = results.groupby("adapter_id")["correct"].mean()
        members = per.drop(BASE, errors="ignore")
        if members.empty:
            continue
        rows.append(
            {
                "generation": int(path.parent.name.removeprefix("gen_")),
                "best": float(members.max()),
                "mean": float(members.mean()),
                "worst": float(members.min()),
                "base": float(per[BASE]) if BASE in per else float("nan"),
                "items": int(results[results["adapter_id"] == members.index[0]].shape[0]),
            }
        )
    return pd.DataFrame(rows, columns=["generation", "best", "mean", "worst", "base", "items"])
