"""Failure classes as tables (evaluation/failure_tables.py): counts per model and benchmark,
and a paired difference split exactly into its format and code parts."""

from __future__ import annotations

import pandas as pd
import pytest

from populora_core.evaluation.failure_tables import (
    class_counts,
    counts_markdown,
    flip_table,
    flips_markdown,
    model_failures,
    runs_counts,
)
from populora_core.evaluation.paired import ALL, paired_table
from populora_core.inference.base import BASE


def _results(classes: dict[str, dict[str, list[str]]]) -> pd.DataFrame:
    """classes[adapter][benchmark]: the class per item."""
    return pd.DataFrame(
        [
            {"benchmark": b, "item_id": f"{b}/{i}", "adapter_id": a, "correct": c == "passed", "failure": c}
            for a, per in classes.items()
            for b, items in per.items()
            for i, c in enumerate(items)
        ]
    )


BASE_HE = ["passed"] * 6 + ["wrong_base"] * 2 + ["truncated"] * 2
# the member: loses 3 items to format (2 other_wrapper, 1 truncated) and 1 to code, wins 1 back
MEMBER_HE = [
    *("other_wrapper", "other_wrapper", "truncated", "wrong_plus"),  # base passed these
    *("passed", "passed", "passed"),  # the last one base got wrong
    *("wrong_base", "truncated", "truncated"),
]
RUN = _results(
    {
        BASE: {"humanevalplus": BASE_HE, "mbppplus": ["passed", "wrong_base"]},
        "m": {"humanevalplus": MEMBER_HE, "mbppplus": ["passed", "wrong_base"]},
    }
)


def test_counts_per_model_and_benchmark_with_format_and_code_sums():
    counts = class_counts(RUN)
    row = counts.loc[("m", "humanevalplus")]
    assert (row["passed"], row["other_wrapper"], row["truncated"], row["wrong_plus"], row["wrong_base"]) == (
        3,
        2,
        3,
        1,
        1,
    )
    assert (row["format"], row["code"]) == (5, 2)
    assert counts.loc[(BASE, "humanevalplus"), "format"] == 2
    assert "| base model | humanevalplus |" in counts_markdown(counts, {BASE: "base model"})


def test_a_difference_splits_into_its_format_and_code_parts_and_names_the_flips():
    runs = {"R": RUN}
    pairs = paired_table(runs)
    flips = flip_table(pairs, model_failures(runs)).set_index("benchmark")
    he = flips.loc["humanevalplus"]
    assert he["a"] == "R: m" and he["b"] == "base model" and he["n"] == 10
    assert he["difference"] == pytest.approx(-0.3)  # 3 passed against 6
    assert he["format_part"] == pytest.approx(-0.3) and he["code_part"] == pytest.approx(0.0)
    assert he["format_part"] + he["code_part"] == pytest.approx(he["difference"])
    assert he["only_b_passed"] == "truncated 1, other_wrapper 2, wrong_plus 1"  # in the classes' order
    assert he["only_a_passed"] == "wrong_base 1"
    assert flips.loc[ALL, "n"] == 12 and flips.loc[ALL, "difference"] == pytest.approx(-3 / 12)
    assert "| R: m | base model | humanevalplus | 10 | -0.300 | -0.300 | +0.000 |" in flips_markdown(
        flips.reset_index()
    )


def test_parts_judged_before_classes_are_unclassified():
    old = RUN.drop(columns="failure")
    assert set(class_counts(old).columns) == {"passed", "unclassified", "format", "code"}
    flips = flip_table(paired_table({"R": old}), model_failures({"R": old})).set_index("benchmark")
    assert flips.loc["humanevalplus", "difference"] == pytest.approx(-0.3)  # read from `correct`
    counts = runs_counts({"R": RUN, "S": RUN})
    assert counts.index.get_level_values(0).tolist().count("base model") == 2  # two benchmarks, base once
    assert ("S: m", "mbppplus") in counts.index
