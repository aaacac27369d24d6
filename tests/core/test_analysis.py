"""The offline analysis on a small hand-made run: fresh-problem metrics, the common coverage
yardstick, the lineage tree, and a report that renders as HTML."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from populora_core.analysis.data import (
    RunData,
    calibrated_coverage,
    dynamics,
    headline,
    learning_curves,
    learning_sentences,
)
from populora_core.analysis.report import PLOTS, lineage_tree, write_report
from populora_core.run import RunDir

TRIVIAL = "def f(a):\n    return a"
REAL = [
    "def f(xs):\n    return sorted(set(xs))[-2]",
    "def f(n):\n    total = 0\n    for i in range(n):\n        if i % 3 == 0:\n"
    "            total += i * i\n    return total",
    "def f(s):\n    return {c: s.count(c) for c in s if c.isalpha()}",
]


def _problem(g: int, pid: str, program: str, source: str, inputs=("1",), outputs=("2",)) -> dict:
    depth = 5.0 if program == TRIVIAL else 8.0
    return {
        "generation": g,
        "teacher_id": "t0",
        "proposal_id": f"t0/p{pid}" if source == "fresh" else None,
        "source": source,
        "problem_id": pid,
        "task_type": "code_o",
        "program": program,
        "inputs": list(inputs),
        "outputs": list(outputs),
        "message": "",
        "valid": True,
        "reason": "ok",
        "ast_depth": depth,
        "cyclomatic": 1.0,
        "loc": 2.0,
        "halstead": 1.0,
        "cvt_cell": 0,
    }


@pytest.fixture
def data(tmp_path) -> RunData:
    problems, verdicts = [], []
    solved = {0: [1, 0], 1: [1, 1], 2: [0, 0]}  # fresh problem p{g}: per-sample outcomes; top-up always solved
    for g in range(3):
        program = TRIVIAL if g == 0 else REAL[g]
        problems += [_problem(g, f"p{g}", program, "fresh"), _problem(g, "seed", TRIVIAL, "buffer", ['"x"'], ["'x'"])]
        for pid, outcomes in ((f"p{g}", solved[g]), ("seed", [1, 1])):
            for j, ok in enumerate(outcomes):
                verdicts.append(
                    {
                        "generation": g,
                        "rollout_id": f"s|{pid}|{j}",
                        "problem_id": pid,
                        "teacher_id": "t0",
                        "student_id": "s0",
                        "status": "correct" if ok else "wrong",
                    }
                )
    summaries = pd.DataFrame(
        {
            "generation": range(3),
            "solve_rate": [0.75, 1.0, 0.5],
            "valid_rate": [1.0] * 3,
            "cumulative_coverage": 0.0,
            "coverage": 0.0,
            "wall_seconds": [10.0, 12.0, 11.0],
        }
    )
    population = pd.DataFrame(
        {
            "generation": [0, 0, 1, 1],
            "adapter_id": ["t0", "s0", "t0", "t1"],
            "role": ["teacher", "student", "teacher", "teacher"],
            "parents": [[], [], [], ["t0"]],
            "operator": ["init", "init", "init", "X4"],
            "birth_generation": [0, 0, 0, 1],
        }
    )
    lineage = pd.DataFrame(
        {"generation": [0], "child_id": ["t1"], "parents": [["t0"]], "operator": ["X4"], "replaced_id": ["s0"]}
    )
    rewards = pd.DataFrame({"generation": range(3), "kind": "proposal", "adapter_id": "t0", "reward": [0.5, 0.0, 1.0]})
    ratings = pd.DataFrame({"generation": range(3), "adapter_id": "t0", "mu": [25.0, 26.0, 27.0], "sigma": 8.0})
    probes = pd.DataFrame(
        [
            {"generation": g, "adapter_id": a, "role": role, "problem_id": pid, "changed": changed, "status": "wrong"}
            for g, moved in ((0, False), (2, True))
            for a, role in (("__base__", "base"), ("s0", "student"))
            for pid, changed in (("q1", False), ("q2", moved and a == "s0"))
        ]
    )
    frames = {
        "probes": probes,
        "problems": pd.DataFrame(problems),
        "verdicts": pd.DataFrame(verdicts),
        "lineage": lineage,
        "rewards": rewards,
        "ratings": ratings,
    }
    return RunData(RunDir(tmp_path), "hand-made", summaries, frames, population)


def test_fresh_solve_rate_is_separate_from_the_top_ups(data):
    dyn = dynamics(data).set_index("generation")
    assert dyn["fresh_solve_rate"].tolist() == [0.5, 1.0, 0.0]
    assert dyn["topup_solve_rate"].tolist() == [1.0, 1.0, 1.0]
    assert dyn["fresh_solutions"].tolist() == [2, 2, 2]
    assert dyn["trivial_identity"].tolist() == [1.0, 0.0, 0.0] and dyn["trivial_output_is_input"].iloc[0] == 0.0


def test_headline_reports_the_fresh_trend_and_its_oscillation(data):
    h = headline(data)
    assert (h["fresh_solve_rate_first"], h["fresh_solve_rate_last"]) == (0.5, 0.0)
    assert h["fresh_solve_rate_oscillation"]["reversals"] == 1.0  # up then down
    assert h["triviality_first"]["identity"] == 1.0 and h["triviality_last"]["identity"] == 0.0
    assert h["median_generation_s"] == 11.0


def test_calibrated_coverage_is_cumulative_over_distinct_cells(data):
    cov = calibrated_coverage(data)
    assert (np.diff(cov["cumulative_coverage"]) >= 0).all()
    assert cov["cumulative_coverage"].iloc[-1] >= cov["coverage"].max() > 0


def test_lineage_tree_puts_children_under_parents_with_the_operator(data):
    tree = lineage_tree(data)
    assert tree[0] == "- `s0` (student, replaced after gen 0)"
    assert "  - **X4** (extrapolative task arithmetic) after gen 0 → `t1` (teacher)" in tree
    assert (
        tree.index("  - **X4** (extrapolative task arithmetic) after gen 0 → `t1` (teacher)")
        == tree.index("- `t0` (teacher)") + 1
    )


def test_report_renders_tables_and_code_as_html(data, tmp_path):
    written = write_report([data], tmp_path / "report")
    page = written["html"].read_text()
    assert page.count("data:image/png;base64,") == len(PLOTS)
    assert "<table>" in page and "|---|" not in page  # tables rendered, not raw Markdown
    assert 'class="codehilite"' in page and "```" not in page  # code highlighted
    assert "<li>" in page and "X4" in page  # the lineage tree as a list
    headline_json = json.loads(written["headline"].read_text())  # strict JSON: NaN written as null
    assert headline_json[0]["fresh_solve_rate_last"] == 0.0
    # the claims' statistics: fresh answers only (the top-ups' are not), and the verdict
    stats = json.loads(written["statistics"].read_text())[0]
    change = stats["fresh_window_change"]  # three generations: windows of one, 0 and 2
    assert change["window"] == 1 and change["first"]["n"] == 2 and change["last_generations"] == [2, 2]
    assert change["first"]["rate"] == 0.5 and change["last"]["rate"] == 0.0
    summary = written["summary"].read_text()
    assert "- **hand-made: cannot tell** (arms race): cycle test p = " in summary  # with the statistics behind it
    assert "AST depth slope " in summary and "- *arms race*: The population's fresh solve rate oscillates" in summary
    assert "Held-out evaluation" not in written["summary"].read_text()  # none yet


def test_the_report_carries_the_held_out_comparison_when_the_run_has_one(data, tmp_path):
    (data.run.root / "eval").mkdir(parents=True)
    (data.run.root / "eval" / "comparison.md").write_text("# pass@1: population versus base model\n\n| model |")
    (data.run.root / "eval" / "paired.md").write_text("# Paired comparisons\n\n| A | B |\n\n- P vs S: supports")
    summary = write_report([data], tmp_path / "report")["summary"].read_text()
    section = summary[summary.index("## Held-out evaluation") :]
    assert "**Paired comparisons**" in section and "- P vs S: supports" in section


def test_learning_curves_carry_their_interval_and_sample_count(data):
    curves = learning_curves(data).set_index(["curve", "generation"])
    fresh = curves.loc["fresh_solve_rate"]
    assert fresh["value"].tolist() == [0.5, 1.0, 0.0] and fresh["n"].tolist() == [2, 2, 2]
    assert (fresh["low"] <= fresh["value"]).all() and (fresh["value"] <= fresh["high"]).all()
    assert curves.loc[("format_error", 1), "value"] == 0.0 and curves.loc[("format_error", 1), "n"] == 4
    drift = curves.loc["drift"]  # the base's rows are not counted; generation 1 was not probed
    assert drift.index.tolist() == [0, 2] and drift["value"].tolist() == [0.0, 0.5] and drift["n"].tolist() == [2, 2]
    assert curves.loc[("teacher_reward", 2), "value"] == 1.0


def test_learning_sentences_say_first_and_last_with_intervals(data):
    lines = learning_sentences(data)
    drift = next(line for line in lines if line.startswith("drift"))
    assert "0% [0%, 66%] (n=2) at generation 0 → 50% [9%, 91%] (n=2) at generation 2" in drift
    assert drift.endswith("the intervals overlap.")  # two items each: no claim


def test_each_child_is_compared_with_its_parents_after_its_first_matches(data):
    """The per-operator table: a child's μ after its first generation of matches against its
    parents' at the same point — a culled or hall-of-fame parent at its last rating."""
    from populora_core.analysis.data import children_against_parents

    lineage = pd.DataFrame(
        {
            "generation": [0, 1],
            "child_id": ["t1", "t2"],
            "parents": [["t0"], ["t1", "t0@g0001"]],
            "operator": ["M4", "X3"],
            "replaced_id": ["tx", "t0"],
        }
    )
    ratings = pd.DataFrame(
        {
            "generation": [0, 1, 1, 2, 2],
            "adapter_id": ["t0", "t0", "t1", "t1", "t2"],
            "mu": [25.0, 26.0, 27.0, 28.0, 30.0],
            "sigma": [2.0, 2.0, 3.0, 2.0, 2.5],
        }
    )
    frames = {**data.frames, "lineage": lineage, "ratings": ratings}
    kids = children_against_parents(RunData(data.run, "h", data.summaries, frames, data.population)).set_index(
        "child_id"
    )
    assert kids.loc["t1", "delta_mu"] == 1.0 and not kids.loc["t1", "above_parents"]  # 27 − 9 < 26 − 6
    # t2's parents: t1 at generation 2 (28), and t0's snapshot taken for generation 1, rated after 0 (25)
    assert kids.loc["t2", "parents_mu"] == 26.5 and kids.loc["t2", "delta_mu"] == 3.5
    assert kids.loc["t2", "above_parents"] == (30.0 - 7.5 > 28.0 - 6.0)


def test_held_out_pass_at_1_is_drawn_against_generation(data, tmp_path):
    from populora_core.analysis.data import heldout_by_generation
    from populora_core.analysis.report import summary_markdown

    for g, passed in (
        (0, {"__base__": [1, 0], "t0": [1, 0], "s0": [0, 0]}),
        (2, {"__base__": [1, 0], "t0": [1, 1], "s0": [1, 0]}),
    ):
        out = tmp_path / "eval" / f"gen_{g:04d}"
        out.mkdir(parents=True)
        rows = [
            {"adapter_id": a, "item_id": i, "correct": bool(ok)}
            for a, oks in passed.items()
            for i, ok in enumerate(oks)
        ]
        pd.DataFrame(rows).to_parquet(out / "results.parquet")
    curve = heldout_by_generation(data).set_index("generation")
    assert curve.loc[0, ["best", "mean", "worst", "base"]].tolist() == [0.5, 0.25, 0.0, 0.5]
    assert curve.loc[2, ["best", "mean", "worst"]].tolist() == [1.0, 0.75, 0.5] and curve.loc[2, "items"] == 2
    assert "| 2 | 1.000 | 0.750 | 0.500 | 0.500 | 2 |" in summary_markdown([data])
