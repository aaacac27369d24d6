"""Cross-play: the students of generation i against the teachers' problems of generation j,
replayed from a run's stored adapters and problems (nothing is retrained).

The standard evidence of an arms race. Later students should solve earlier teachers'
problems more often (the students learned), and later teachers' problems should be harder
for earlier students (the teachers learned). For a single-agent baseline the one adapter
plays both parts against its own past.

- Problems of generation j: up to ``problems`` valid fresh problems of generation j (all
  teachers), drawn from (run seed, j); the same set for every student generation.
- Students of generation i: the members that play the student role in snapshot i (as
  generation i started), served under ``<id>@g<i>``; each answers every problem once,
  greedily, judged in the sandbox.
- ``crossplay_statistics``: the solve-rate matrix (cell: rate, answers, Wilson interval), and
  the plane rate ≈ c + β_students·i + β_teachers·j fitted to the answers: β_students > 0 says
  later students solve the same problems more often, β_teachers < 0 that later teachers'
  problems are harder for the same students; 95% intervals from a cluster bootstrap
  (problems resampled within their generation, their answers kept together).

Each student generation's answers are kept in ``<run>/crossplay/student_gen_NNNN-<key>.parquet``
(a killed replay loses at most one generation's; ``<key>`` names the problems per generation
and the generations, so other settings never reuse them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from populora_core.config import ConfigError
from populora_core.run import RunDir
from populora_core.rundir.artifacts import write_parquet_atomic
from populora_core.seeding import numpy_generator

COLUMNS = ["student_gen", "student_id", "teacher_gen", "teacher_id", "problem_id", "task_type", "status", "correct"]


def generations_of(run: RunDir, every: int = 1) -> list[int]:
    """The complete generations cross-played: every ``every``-th, the last always."""
    if every < 1:
        raise ConfigError(f"--every must be at least 1, got {every}")
    done = run.complete_generations()
    picked = [g for g in done if g % every == 0]
    return sorted({*picked, done[-1]}) if done else []


def problems_of(run: RunDir, generation: int, limit: int) -> pd.DataFrame:
    """Up to ``limit`` valid fresh problems of ``generation`` (all teachers), drawn from
    (run seed, generation) and sorted, so every student generation meets the same ones."""
    p = run.read(generation, "problems")
    valid = p[(p["source"] == "fresh") & p["valid"]].drop_duplicates(["teacher_id", "problem_id"])
    valid = valid.sort_values(["teacher_id", "problem_id"]).reset_index(drop=True)
    if len(valid) > limit:
        rng = numpy_generator(run.config().seed, generation, "crossplay")
        valid = valid.iloc[np.sort(rng.choice(len(valid), size=limit, replace=False))].reset_index(drop=True)
    return valid.assign(teacher_gen=generation)


def students_of(run: RunDir, generation: int) -> dict[str, Path]:
    """``<id>@g<generation>`` → adapter directory of every member that plays the student role
    in snapshot ``generation``."""
    dirs = run.adapter_dirs(generation)
    return {
        f"{m.adapter_id}@g{generation:04d}": dirs[m.adapter_id] for m in run.members(generation) if m.plays("student")
    }


def crossplay(run: RunDir, runtime, generations: Sequence[int], problems: int, *, out: Path) -> pd.DataFrame:
    """Every student generation of ``generations`` against the problems of every one of them;
    one Parquet file per student generation in ``out`` (reused when present)."""
    from populora_core.problems.answering import greedy_verdicts
    from populora_core.problems.rows import row_problem

    if problems < 1:
        raise ConfigError(f"cross-play needs at least one problem per generation, got {problems}")
    config = run.config()
    sets = pd.concat([problems_of(run, j, problems) for j in generations], ignore_index=True)
    key = hashlib.sha256(json.dumps([problems, list(generations)]).encode()).hexdigest()[
        :8
    ]  # other settings: other files
    frames = []
    for i in generations:
        path = Path(out) / f"student_gen_{i:04d}-{key}.parquet"
        if path.is_file():
            frames.append(pd.read_parquet(path))
            continue
        students = students_of(run, i)
        runtime.serve(students)
        rows = [(s, r) for s in students for r in sets.itertuples(index=False)]
        judged = greedy_verdicts(
            runtime.backend,
            [s for s, _ in rows],
            [row_problem(r) for _, r in rows],
            runtime.pool,
            config.problems,
            config.rewards,
            max_new_tokens=config.inference.student_max_new_tokens,
            progress=f"cross-play: students of generation {i}",
        )
        frame = pd.DataFrame(
            {
                "student_gen": i,
                "student_id": [s.split("@", 1)[0] for s, _ in rows],
                "teacher_gen": [int(r.teacher_gen) for _, r in rows],
                "teacher_id": [r.teacher_id for _, r in rows],
                "problem_id": [r.problem_id for _, r in rows],
                "task_type": [r.task_type for _, r in rows],
                "status": judged["status"].tolist(),
                "correct": (judged["status"] == "correct").tolist(),
            },
            columns=COLUMNS,
        )
        write_parquet_atomic(frame, path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)


def _plane(frame: pd.DataFrame) -> tuple[float, float]:
    """(β_students, β_teachers) of the least-squares plane correct ≈ c + β_s·i + β_t·j."""
    x = np.column_stack([np.ones(len(frame)), frame["student_gen"], frame["teacher_gen"]]).astype(float)
    coef, *_ = np.linalg.lstsq(x, frame["correct"].to_numpy(dtype=float), rcond=None)
    return float(coef[1]), float(coef[2])


def crossplay_statistics(frame: pd.DataFrame, *, boot: int = 1000, seed: int = 0) -> dict:
    """The matrix and the two slopes with cluster-bootstrap 95% intervals (module docstring)."""
    from populora_core.metrics.stats import wilson

    cells = []
    for (i, j), part in frame.groupby(["student_gen", "teacher_gen"]):
        iv = wilson(int(part["correct"].sum()), len(part))
        cells.append({"student_gen": int(i), "teacher_gen": int(j), "rate": iv.value, "low": iv.low,
                      "high": iv.high, "n": len(part)})  # fmt: skip
    out: dict = {
        "cells": cells,
        "answers": len(frame),
        "problems": int(frame.groupby(["teacher_gen", "problem_id"]).ngroups),
    }
    if frame["student_gen"].nunique() < 2 or frame["teacher_gen"].nunique() < 2:
        return out | {"students_slope": None, "teachers_slope": None}
    s, t = _plane(frame)
    rng = np.random.default_rng(seed)
    groups = {key: part for key, part in frame.groupby(["teacher_gen", "problem_id"])}
    by_gen: dict[int, list] = {}
    for j, pid in groups:
        by_gen.setdefault(j, []).append(pid)
    draws = []
    for _ in range(boot):
        parts = [groups[(j, pids[k])] for j, pids in by_gen.items() for k in rng.integers(len(pids), size=len(pids))]
        draws.append(_plane(pd.concat(parts, ignore_index=True)))
    lo, hi = np.percentile(np.array(draws), [2.5, 97.5], axis=0)
    return out | {
        "students_slope": {"value": s, "low": float(lo[0]), "high": float(hi[0])},
        "teachers_slope": {"value": t, "low": float(lo[1]), "high": float(hi[1])},
    }


def plot_crossplay(stats: dict, title: str):
    """The solve-rate heatmap, students' generation down, teachers' across, each cell's rate and answers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = pd.DataFrame(stats["cells"], columns=["student_gen", "teacher_gen", "rate", "low", "high", "n"])
    rows, cols = sorted(cells["student_gen"].unique()), sorted(cells["teacher_gen"].unique())
    grid = np.full((len(rows), len(cols)), np.nan)
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 2.5, 0.8 * len(rows) + 1.8))
    for c in cells.itertuples():
        r, k = rows.index(c.student_gen), cols.index(c.teacher_gen)
        grid[r, k] = c.rate
        ax.text(k, r, f"{c.rate:.2f}\nn={c.n}", ha="center", va="center", fontsize=8)
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", alpha=0.8)
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set(xlabel="teachers' problems of generation j", ylabel="students of generation i", title=title)
    fig.colorbar(image, ax=ax, label="solve rate (greedy)")
    fig.tight_layout()
    return fig


def crossplay_report(stats: dict, label: str) -> str:
    """Markdown: the two statistics a reader looks for, then the matrix with intervals."""

    def iv(d: dict | None) -> str:
        return "–" if d is None else f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"

    cols = sorted({c["teacher_gen"] for c in stats["cells"]})
    students, teachers = iv(stats["students_slope"]), iv(stats["teachers_slope"])
    lines = [
        f"# Cross-play: {label}",
        "",
        f"{stats['answers']} greedy answers to {stats['problems']} problems "
        "(95% intervals: cluster bootstrap over problems).",
        "",
        f"- later students solve the same problems more often: slope per student generation {students}",
        f"- later teachers' problems are harder for the same students: slope per teacher generation {teachers} "
        "(an arms race: below 0)",
        "",
        "| students \\ teachers | " + " | ".join(str(j) for j in cols) + " |",
    ]
    lines.append("|---|" + "---|" * len(cols))
    for i in sorted({c["student_gen"] for c in stats["cells"]}):
        by = {c["teacher_gen"]: c for c in stats["cells"] if c["student_gen"] == i}
        row = [
            f"{by[j]['rate']:.2f} [{by[j]['low']:.2f}, {by[j]['high']:.2f}] (n={by[j]['n']})" if j in by else "–"
            for j in cols
        ]
        lines.append(f"| {i} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
