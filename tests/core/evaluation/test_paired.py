"""Paired held-out comparisons: the same items for both models, the discordant items in the
McNemar test, the weakest member chosen over all items, and the verdict of the claim."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from populora_core.evaluation.paired import (
    ALL,
    compare,
    intervals_markdown,
    model_intervals,
    paired_table,
    run_models,
    weakest_verdict,
)
from populora_core.metrics.stats import wilson


def _results(passed: dict[str, dict[str, list[int]]]) -> pd.DataFrame:
    """passed[adapter][benchmark]: 1/0 per item."""
    return pd.DataFrame(
        [
            {"benchmark": bench, "item_id": f"{bench}/{i}", "adapter_id": adapter, "correct": bool(ok)}
            for adapter, per in passed.items()
            for bench, items in per.items()
            for i, ok in enumerate(items)
        ]
    )


def test_a_gain_on_the_same_items_is_seen_through_the_pairing():
    rng = np.random.default_rng(0)
    base = (rng.random(200) < 0.5).astype(int)
    ours = base.copy()
    ours[np.flatnonzero(base == 0)[:20]] = 1  # 20 more items passed, none lost
    res = _results({"__base__": {"humanevalplus": list(base)}, "m": {"humanevalplus": list(ours)}})
    models = run_models({"R": res})
    [row] = compare(models["R: m"], models["base model"])
    assert row["n"] == 200 and row["difference"] == pytest.approx(0.1) and row["low"] > 0.05
    assert (row["only_a"], row["only_b"]) == (20, 0) and row["p_value"] == pytest.approx(2 / 2**20)


def test_the_weakest_member_is_the_lowest_over_all_items_and_is_judged_against_the_baseline():
    pop = _results(
        {
            "__base__": {"humanevalplus": [1, 0, 0, 0], "mbppplus": [1, 0, 0, 0]},
            "a": {"humanevalplus": [1, 1, 1, 1], "mbppplus": [1, 1, 1, 0]},
            "b": {"humanevalplus": [1, 1, 1, 1], "mbppplus": [1, 1, 0, 0]},  # weakest over all items
        }
    )
    baseline = _results({"s": {"humanevalplus": [0, 0, 0, 0], "mbppplus": [0, 0, 0, 0]}})
    models = run_models({"P": pop})
    assert "P: weakest member (b)" in models
    assert models["P: population mean"].tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    table = paired_table({"P": pop, "S": baseline}, single_agent=["S"])
    pairs = set(zip(table["a"], table["b"], strict=True))
    assert ("P: weakest member (b)", "S: s") in pairs and ("P: population mean", "S: s") in pairs
    assert ("S: s", "base model") in pairs and ("P: a", "base model") in pairs
    weakest = table[(table["a"] == "P: weakest member (b)") & (table["b"] == "S: s")].set_index("benchmark")
    assert list(weakest.index) == ["humanevalplus", "mbppplus", ALL]
    assert weakest.loc[ALL, "difference"] == 0.75 and weakest.loc[ALL, "only_a"] == 6
    mean = table[table["a"] == "P: population mean"]
    assert set(mean["b"]) == {"base model", "S: s"} and mean["p_value"].isna().all()  # not one model: no McNemar
    assert weakest_verdict(table) == {"P: weakest member (b) vs S: s": "supports"}
    # the baseline passes 2 items the weakest member fails, of 8: too few to tell
    strong = _results({"s": {"humanevalplus": [1] * 4, "mbppplus": [1] * 4}})
    worse = paired_table({"P": pop, "S": strong}, single_agent=["S"])
    assert weakest_verdict(worse) == {"P: weakest member (b) vs S: s": "cannot tell"}
    assert weakest_verdict(paired_table({"P": pop}, single_agent=[])) == {}


def test_a_baseline_better_on_many_items_contradicts_and_ties_pick_the_first_member():
    items = {"humanevalplus": [1] * 10 + [0] * 30, "mbppplus": [1] * 10 + [0] * 30}
    pop = _results({"__base__": items, "m2": items, "m1": items})  # equal: the first id is the weakest
    baseline = _results({"s": {"humanevalplus": [1] * 30 + [0] * 10, "mbppplus": [1] * 30 + [0] * 10}})
    table = paired_table({"P": pop, "S": baseline}, single_agent=["S"])
    assert weakest_verdict(table) == {"P: weakest member (m1) vs S: s": "contradicts"}
    every = table.set_index(["a", "b", "benchmark"]).loc[("P: weakest member (m1)", "S: s", ALL)]
    assert (every["only_a"], every["only_b"]) == (0, 40) and every["p_value"] < 1e-9


def test_every_single_model_gets_its_pass_at_1_with_a_wilson_interval_and_its_item_count():
    pop = _results(
        {
            "__base__": {"humanevalplus": [1, 0, 0, 0], "mbppplus": [1, 0, 0, 0, 0, 0]},
            "a": {"humanevalplus": [1, 1, 1, 1], "mbppplus": [1, 1, 1, 0, 0, 0]},
            "b": {"humanevalplus": [1, 1, 1, 0], "mbppplus": [0, 0, 0, 0, 0, 0]},
        }
    )
    baseline = _results({"__base__": {"humanevalplus": [0] * 4}, "s": {"humanevalplus": [0, 0, 1, 1]}})
    table = model_intervals({"P": pop, "S": baseline})
    # single models only: the base model once (the first run's), no weakest-member or mean rows
    assert list(dict.fromkeys(table["model"])) == ["base model", "P: a", "P: b", "S: s"]
    row = table.set_index(["model", "benchmark"]).loc[("P: a", ALL)]
    assert (row["n"], row["passed"]) == (10, 7)
    iv = wilson(7, 10)
    assert (row["pass@1"], row["low"], row["high"]) == pytest.approx((iv.value, iv.low, iv.high))
    assert 0.39 < row["low"] < 0.40 and 0.89 < row["high"] < 0.90  # Wilson, 7 of 10
    assert (table["model"] == "S: s").sum() == 1  # one benchmark: no all-items row
    md = intervals_markdown(table)
    assert "| model | humanevalplus (4 items) | mbppplus (6 items) | all items (10 items) |" in md
    assert "| S: s | 0.500 [0.150, 0.850] | – | – |" in md
    assert "| P: b | 0.750 [0.301, 0.954] | 0.000 [0.000, 0.390] | 0.300 [0.108, 0.603] |" in md
    uneven = model_intervals({"P": pop, "S": _results({"s": {"humanevalplus": [1, 0]}})})
    assert "| S: s | 0.500 [0.095, 0.905] (n = 2) | – | – |" in intervals_markdown(uneven)


def test_the_held_out_claim_is_read_for_students_and_teachers_separately():
    """A teacher is never trained to answer: when it is the weakest member, the claim about the
    students (who are) must still be read, from the weakest student."""
    pop = _results(
        {
            "teacher-g0000-0": {"humanevalplus": [0, 0, 0, 0, 0, 0, 0, 0]},  # the weakest member
            "teacher-g0000-1": {"humanevalplus": [1, 1, 0, 0, 0, 0, 0, 0]},
            "student-g0000-0": {"humanevalplus": [1, 1, 1, 1, 1, 1, 1, 1]},
            "student-g0000-1": {"humanevalplus": [1, 1, 1, 1, 1, 1, 1, 0]},
        }
    )
    baseline = _results({"agent-g0000-0": {"humanevalplus": [0, 0, 0, 0, 0, 0, 0, 0]}})
    models = run_models({"P": pop})
    assert "P: weakest member (teacher-g0000-0)" in models
    assert "P: weakest student (student-g0000-1)" in models and "P: weakest teacher (teacher-g0000-0)" in models
    verdicts = weakest_verdict(paired_table({"P": pop, "S": baseline}, single_agent=["S"]))
    assert verdicts["P: weakest member (teacher-g0000-0) vs S: agent-g0000-0"] == "cannot tell"
    assert verdicts["P: weakest student (student-g0000-1) vs S: agent-g0000-0"] == "supports"
    assert "P: weakest teacher (teacher-g0000-0) vs S: agent-g0000-0" in verdicts
    # one role only (the single agent, or a run of students): no per-role rows
    assert not any("weakest student" in m for m in run_models({"S": baseline}))
