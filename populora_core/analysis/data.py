"""A run's artifacts gathered across generations, from the run directory alone.

No model and no sandbox: everything comes from the Parquet files and ``_SUCCESS``
summaries, so a run copied off a GPU node analyses on a laptop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from populora_core.artifacts import ArtifactError
from populora_core.runs import RunDir

GATHERED = ("problems", "verdicts", "rewards", "ratings", "lineage", "coverage", "proposals")


@dataclass
class RunData:
    """Every complete generation's artifacts of one run, concatenated (column ``generation``)."""

    run: RunDir
    label: str
    summaries: pd.DataFrame
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    population: pd.DataFrame = field(default_factory=pd.DataFrame)

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
    summaries = pd.DataFrame(run.summaries())
    frames = {}
    for name in GATHERED:
        parts = [run.read(g, name) for g in done]
        frames[name] = pd.concat(parts, ignore_index=True)
    for key in ("coverage", "cumulative_coverage"):  # runs from before coverage existed: NaN
        if key not in summaries:
            summaries[key] = float("nan")
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


def headline(data: RunData) -> dict:
    """The figures a closing note quotes: solve-rate trend, complexity slopes, coverage."""
    s = data.summaries.sort_values("generation")
    gens = s["generation"].to_numpy(dtype=float)
    solve = s["solve_rate"].to_numpy(dtype=float)
    trends = complexity_trends(data)
    slopes = trends.drop_duplicates("metric").set_index("metric")["slope"].to_dict() if len(trends) else {}
    return {
        "run": data.label,
        "generations": len(s),
        "solve_rate_first": float(solve[0]),
        "solve_rate_last": float(solve[-1]),
        "solve_rate_slope": float(np.polyfit(gens, solve, 1)[0]) if len(s) >= 2 else float("nan"),
        "valid_rate_mean": float(s["valid_rate"].mean()),
        "complexity_slopes": {k: float(v) for k, v in slopes.items()},
        "coverage_final": float(s["cumulative_coverage"].iloc[-1]) if "cumulative_coverage" in s else float("nan"),
    }
