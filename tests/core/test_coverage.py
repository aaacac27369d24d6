"""CVT coverage over problem descriptors (pyribs' CVTArchive centroids)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from populora_core.metrics.coverage import (
    DESCRIPTOR_NAMES,
    coverage,
    cvt_centroids,
    descriptor,
    problem_cells,
)

IDENTITY = "def f(a):\n    return a"
DIVERSE = [
    IDENTITY,
    "def f(d):\n    out = []\n    for k, v in d.items():\n        if v > 2:\n"
    "            out.append(k)\n    return sorted(out)",
    "def f(s):\n    return ''.join(c.upper() if i % 2 else c for i, c in enumerate(s))",
    "def f(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "def f(xs):\n    return [x * x for x in xs if x % 3 == 0][::-1]",
    "def f(x):\n    if x < 0:\n        return -1\n    elif x == 0:\n        return 0\n"
    "    while x > 10:\n        x //= 2\n"
    "    try:\n        return 10 // x\n    except ZeroDivisionError:\n        return None",
]


@pytest.fixture(scope="module")
def centroids() -> np.ndarray:
    return cvt_centroids(1024, seed=0, samples=20_000)


def test_descriptor_is_in_the_unit_cube_and_none_for_broken_source():
    for source in DIVERSE:
        d = descriptor(source)
        assert d.shape == (len(DESCRIPTOR_NAMES),) and ((d >= 0) & (d <= 1)).all()
    assert descriptor("def f(:\n") is None


def test_centroids_are_seeded_and_stored_shape(centroids):
    assert centroids.shape == (1024, len(DESCRIPTOR_NAMES))
    again = cvt_centroids(1024, seed=0, samples=20_000)
    np.testing.assert_array_equal(again, centroids)


def test_identical_problems_fill_one_cell(centroids):
    cells = problem_cells([IDENTITY] * 20, centroids)
    assert len(set(cells)) == 1
    assert coverage(cells, 1024) == 1 / 1024


def test_different_programs_cover_more_cells(centroids):
    cells = problem_cells(DIVERSE, centroids)
    assert len(set(cells)) >= 4
    assert coverage(cells, 1024) > coverage(problem_cells([IDENTITY] * 6, centroids), 1024)


def test_unparseable_programs_are_no_cell(centroids):
    cells = problem_cells(["def f(:", IDENTITY], centroids)
    assert cells[0] == -1 and cells[1] >= 0
    assert coverage([-1, -1], 1024) == 0.0


def _reference_programs() -> list[str]:
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[3] / "shared" / "data"
    programs = [json.loads(line)["code"] for line in (data / "cruxeval" / "cruxeval.jsonl").read_text().splitlines()]
    return programs + [json.loads(line)["code"] for line in (data / "mbpp" / "mbpp.jsonl").read_text().splitlines()]


def test_the_reference_calibration_is_the_corpus_median():
    from populora_core.metrics.coverage import REFERENCE_CALIBRATION, calibrate

    assert calibrate(_reference_programs()) == pytest.approx(REFERENCE_CALIBRATION)


def _deep(branches: int) -> str:
    body = "".join(f"    if xs[{i}] > {i}:\n        xs[{i}] += {i} * xs[0]\n" for i in range(branches))
    return f"def f(xs):\n{body}    return xs"


def _old_scales(source: str) -> list[float]:
    """The fixed scales the calibration replaced: depth / 12, (cyclomatic − 1) / 7,
    (lines − 1) / 24, log(1 + volume) / log 1001, clipped to [0, 1]."""
    from populora_core.metrics.complexity import complexity_metrics

    m = complexity_metrics(source)
    raw = [
        m["ast_depth"] / 12,
        (m["cyclomatic"] - 1) / 7,
        (m["loc"] - 1) / 24,
        math.log1p(m["halstead"]) / math.log(1001),
    ]
    return [min(1.0, max(0.0, v)) for v in raw]


def test_calibrated_sizes_keep_growing_where_the_old_scales_clipped(centroids):
    from populora_core.metrics.coverage import REFERENCE_CALIBRATION

    sizes = slice(0, 4)  # depth, branches, lines, volume
    grown = [_deep(n) for n in (3, 10, 20)]  # 8, 22 and 42 lines
    old = [_old_scales(p) for p in grown]
    new = [descriptor(p, REFERENCE_CALIBRATION)[sizes] for p in grown]
    assert old[1][1] == old[2][1] == old[2][2] == 1.0  # clipped: 10 and 20 branches look alike, 42 lines = 25
    assert (new[2][1:] > new[1][1:]).all() and (new[1][1:] > new[0][1:]).all() and (new[2] < 1.0).all()
    assert (descriptor(IDENTITY, REFERENCE_CALIBRATION)[sizes] < 0.35).all()  # the seed program near the bottom
    assert len(set(problem_cells(grown, centroids, REFERENCE_CALIBRATION))) == 3  # growth still adds cells


def test_rarefied_coverage_does_not_rise_with_validity_alone():
    """Coverage counts cells among the valid programs, so it rises when more proposals are valid
    though the teachers explore nothing new; rarefied to a fixed number of programs it does not:
    8 or 32 programs drawn from the same 50 cells give ~8 and ~24 cells, but the same rarefied count."""
    from populora_core.metrics.coverage import rarefied_cells

    rng = np.random.default_rng(0)
    few = [rng.integers(0, 50, size=8).tolist() for _ in range(2000)]
    many = [rng.integers(0, 50, size=32).tolist() for _ in range(2000)]
    assert np.mean([len(set(c)) for c in many]) > 2.5 * np.mean([len(set(c)) for c in few])
    assert np.mean([rarefied_cells(c, 8) for c in many]) == pytest.approx(
        np.mean([rarefied_cells(c, 8) for c in few]), abs=0.05
    )
    assert rarefied_cells([0, 0, 1, 1, 2, 2, 3, 3], 2) == pytest.approx(1 + 6 / 7)
    assert rarefied_cells(list(range(8)), 4) == 4.0  # every program its own cell
    assert np.isnan(rarefied_cells([0, 1, 2], 8))  # fewer programs than the rarefied count
    cells = rng.integers(0, 6, size=20)  # Hurlbert's formula against drawing subsets
    drawn = np.mean([len(set(rng.choice(cells, 5, replace=False))) for _ in range(20000)])
    assert rarefied_cells(cells.tolist(), 5) == pytest.approx(drawn, abs=0.03)
