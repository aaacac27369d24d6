"""Collapse and oscillation measures (populora_core/metrics/dynamics.py)."""

from __future__ import annotations

import pytest

from populora_core.metrics.complexity import complexity_metrics
from populora_core.metrics.dynamics import TRIVIAL_DEPTH, oscillation, output_is_input, program_kind, triviality

IDENTITY = "def f(a):\n    return a"
LOOP = "def f(xs):\n    total = 0\n    for x in xs:\n        if x % 2:\n            total += x * x\n    return total"


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        (IDENTITY, "identity"),
        ('def f(a, b):\n    """Docstring."""\n    return b', "identity"),
        ("def f(x):\n    return 7", "constant"),
        ("def f(x):\n    return [1, 2] + [3]", "constant"),
        ("def f(x):\n    return x * 3", "other"),
        ("def f(x):\n    return len(x)", "other"),
        (LOOP, "other"),
        ("def g(x):\n    return x", "unparsed"),
        ("def f(x) return", "unparsed"),
    ],
)
def test_program_kind(source, kind):
    assert program_kind(source) == kind


def test_the_seed_program_is_flagged_trivial_on_every_count_and_a_real_one_on_none():
    seed = triviality([IDENTITY], [['"Hello world"']], [["'Hello world'"]], [complexity_metrics(IDENTITY)["ast_depth"]])
    assert seed == {"identity": 1.0, "constant": 0.0, "output_is_input": 1.0, "shallow": 1.0, "distinct": 1.0}
    real = triviality([LOOP], [["[1, 2, 3]"]], [["10"]], [complexity_metrics(LOOP)["ast_depth"]])
    assert real == {"identity": 0.0, "constant": 0.0, "output_is_input": 0.0, "shallow": 0.0, "distinct": 1.0}
    assert complexity_metrics("def f(x):\n    return x * 3")["ast_depth"] <= TRIVIAL_DEPTH


def test_repeated_programs_lower_the_distinct_share():
    shares = triviality([IDENTITY, IDENTITY, LOOP, LOOP], [["1"]] * 4, [["1"]] * 4, [5, 5, 8, 8])
    assert shares["distinct"] == 0.5 and shares["identity"] == 0.5 and shares["shallow"] == 0.5


def test_output_equal_to_input_compares_literals():
    assert output_is_input(["'abc'"], ['"abc"']) and output_is_input(["[1,2]"], ["[1, 2]"])
    assert not output_is_input(["3"], ["9"])


def test_oscillation_separates_a_monotone_series_from_an_alternating_one():
    monotone = oscillation([0.1, 0.15, 0.22, 0.3, 0.33, 0.41, 0.5, 0.58])
    alternating = oscillation([0.2, 0.6, 0.25, 0.55, 0.2, 0.65, 0.3, 0.6])
    assert monotone["reversals"] < 0.2 < 0.8 < alternating["reversals"]
    assert alternating["lag1_autocorr"] < -0.5
    assert monotone["detrended_std"] < alternating["detrended_std"] / 5
    assert all(v != v for v in oscillation([0.5, 0.6]).values())  # too short: NaN
