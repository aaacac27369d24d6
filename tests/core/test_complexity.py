"""Complexity metrics of programs."""

from __future__ import annotations

import math

from populora_core.metrics.complexity import complexity_metrics

TRIVIAL = "def f(a):\n    return a"
BRANCHY = (
    "def f(xs):\n    total = 0\n    for x in xs:\n        if x % 2 == 0 and x > 3:\n            total += x\n"
    "        elif x < 0:\n            total -= 1\n    return total"
)


def test_metrics_grow_with_complexity():
    small, big = complexity_metrics(TRIVIAL), complexity_metrics(BRANCHY)
    assert small["cyclomatic"] == 1.0 and small["loc"] == 2.0
    assert big["cyclomatic"] == 5.0  # for, if, and, elif + 1
    assert big["loc"] == 8.0
    for key in ("ast_depth", "cyclomatic", "loc", "halstead"):
        assert big[key] > small[key]


def test_unparseable_program_gives_nan():
    assert all(math.isnan(v) for v in complexity_metrics("def f(:").values())


def test_deep_nesting_does_not_hit_the_recursion_limit():
    src = "def f(x):\n    return " + "(" * 150 + "x" + ")" * 150
    assert complexity_metrics(src)["ast_depth"] >= 4
