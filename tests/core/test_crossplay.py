"""Cross-play statistics: the matrix, and the two slopes a reader of an arms race looks for."""

from __future__ import annotations

import numpy as np
import pandas as pd

from populora_core.crossplay import COLUMNS, crossplay_report, crossplay_statistics, plot_crossplay


def _answers(rate, generations=4, problems=12, students=2, seed=0) -> pd.DataFrame:
    """Greedy answers of ``students`` students of each generation i to ``problems`` problems of
    each generation j, right with probability ``rate(i, j)`` (per problem: its own difficulty)."""
    rng = np.random.default_rng(seed)
    difficulty = {(j, p): rng.normal(0, 0.1) for j in range(generations) for p in range(problems)}
    rows = []
    for i in range(generations):
        for s in range(students):
            for j in range(generations):
                for p in range(problems):
                    ok = rng.random() < np.clip(rate(i, j) + difficulty[(j, p)], 0, 1)
                    rows.append(
                        [i, f"student-{s}", j, "teacher-0", f"p{j}-{p}", "code_o", "correct" if ok else "wrong", ok]
                    )
    return pd.DataFrame(rows, columns=COLUMNS)


def test_an_arms_race_shows_in_both_slopes_and_a_flat_run_in_neither():
    race = crossplay_statistics(_answers(lambda i, j: 0.5 + 0.12 * i - 0.12 * j), boot=300)
    assert race["students_slope"]["low"] > 0.05 and race["teachers_slope"]["high"] < -0.05
    assert race["answers"] == 4 * 2 * 4 * 12 and race["problems"] == 48 and len(race["cells"]) == 16
    flat = crossplay_statistics(_answers(lambda i, j: 0.4, seed=1), boot=300)
    for key in ("students_slope", "teachers_slope"):
        assert flat[key]["low"] < 0 < flat[key]["high"]
    cell = next(c for c in race["cells"] if (c["student_gen"], c["teacher_gen"]) == (3, 0))
    assert cell["n"] == 24 and cell["low"] <= cell["rate"] <= cell["high"]
    text = crossplay_report(race, "run")
    assert "slope per student generation +0.1" in text and "| 3 | " in text
    assert plot_crossplay(race, "run").axes  # draws
    one = crossplay_statistics(_answers(lambda i, j: 0.5, generations=1))
    assert one["students_slope"] is None
