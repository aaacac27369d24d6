"""Coverage of problem space: a CVT archive over a descriptor of each valid problem
(docs/task-types.md#coverage).

Descriptor (8 numbers, each in [0, 1]) of a program's source:

    depth      AST depth                 log(1 + u) / log(1 + U), u = value − floor,
    branches   cyclomatic complexity     U calibrated (``calibrate``), clipped to [0, 1]
    lines      source lines
    volume     log(1 + Halstead volume)  u / U (already a logarithm)
    control    3 × share of AST nodes that are control flow (if, for, while, try, with, return, …)
    data       3 × share that build or index data (displays, comprehensions, subscripts, slices)
    calls      3 × share that are calls, lambdas or function definitions
    arith      3 × share that are arithmetic, comparison or boolean operators

Coverage is the share of the archive's cells (pyribs' ``CVTArchive`` centroids, seeded by
the run seed and stored) holding at least one valid problem.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Sequence

import numpy as np

from populora_core.metrics.complexity import complexity_metrics, parse
from populora_core.rundir.schemas import DESCRIPTOR_NAMES, METRIC_NAMES

_CONTROL = (
    ast.If,
    ast.For,
    ast.While,
    ast.Try,
    ast.With,
    ast.Return,
    ast.Break,
    ast.Continue,
    ast.IfExp,
    ast.Match,
    ast.Raise,
    ast.Assert,
)
_DATA = (
    ast.List,
    ast.Dict,
    ast.Set,
    ast.Tuple,
    ast.ListComp,
    ast.DictComp,
    ast.SetComp,
    ast.GeneratorExp,
    ast.Subscript,
    ast.Slice,
)
_CALLS = (ast.Call, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)
_ARITH = (ast.BinOp, ast.UnaryOp, ast.AugAssign, ast.Compare, ast.BoolOp)


FLOORS: dict[str, float] = {"ast_depth": 4.0, "cyclomatic": 1.0, "loc": 1.0, "halstead": 0.0}
"""The smallest value of each complexity metric, the descriptor's sizes (``def f(): return 1`` has AST depth 4);
Halstead as log(1 + V)."""

Calibration = dict[str, float]
"""Size metric → U, twice the largest value − floor over a reference corpus."""

REFERENCE_CALIBRATION: Calibration = {"ast_depth": 28.0, "cyclomatic": 30.0, "loc": 98.0, "halstead": 12.52}
"""``calibrate`` of the CRUXEval (800) and MBPP (974) programs (`populora data download`; a test recomputes it)."""


def _size(metric: str, metrics: dict[str, float]) -> float:
    value = metrics[metric]
    if math.isnan(value):
        return FLOORS[metric]
    return math.log1p(max(0.0, value)) if metric == "halstead" else value


def calibrate(programs: Iterable[str]) -> Calibration:
    """U per size metric: twice the largest distance above its floor over ``programs``
    (rounded to 2 decimals)."""
    rows = [complexity_metrics(p) for p in programs]
    return {
        k: round(2.0 * max(max(0.0, _size(k, m) - FLOORS[k]) for m in rows if not math.isnan(m[k])), 2)
        for k in METRIC_NAMES
    }


def _calibrated_sizes(m: dict[str, float], calibration: Calibration) -> list[float]:
    out = []
    for k in METRIC_NAMES:
        u, top = max(0.0, _size(k, m) - FLOORS[k]), calibration[k]
        out.append(min(1.0, u / top if k == "halstead" else math.log1p(u) / math.log1p(top)))
    return out


def descriptor(source: str, calibration: Calibration = REFERENCE_CALIBRATION) -> np.ndarray | None:
    """The 8-number descriptor of ``source`` (see the module docstring), the size entries
    calibrated by ``calibration``; None if it does not parse."""
    tree = parse(source)
    if tree is None:
        return None
    nodes = list(ast.walk(tree))  # the module itself at least
    shares = [
        min(1.0, 3.0 * sum(isinstance(x, kinds) for x in nodes) / len(nodes))
        for kinds in (_CONTROL, _DATA, _CALLS, _ARITH)
    ]
    return np.array([*_calibrated_sizes(complexity_metrics(source), calibration), *shares])


def cvt_centroids(cells: int, seed: int, samples: int = 20_000) -> np.ndarray:
    """``cells`` centroids in the unit cube of the descriptor, by pyribs' CVT k-means."""
    from ribs.archives import CVTArchive

    archive = CVTArchive(
        solution_dim=1,
        centroids=cells,
        ranges=[(0.0, 1.0)] * len(DESCRIPTOR_NAMES),
        samples=samples,
        seed=seed,
    )
    return np.asarray(archive.centroids, dtype=np.float64)


def problem_cells(
    programs: Sequence[str], centroids: np.ndarray, calibration: Calibration = REFERENCE_CALIBRATION
) -> np.ndarray:
    """CVT cell per program, the index of its descriptor's nearest centroid (−1 for a program
    that does not parse)."""
    rows = [descriptor(p, calibration) for p in programs]
    ok = [i for i, d in enumerate(rows) if d is not None]
    out = np.full(len(rows), -1, dtype=np.int64)
    if ok:
        from ribs.archives import CVTArchive

        archive = CVTArchive(solution_dim=1, centroids=centroids, ranges=[(0.0, 1.0)] * centroids.shape[1])
        out[ok] = archive.index_of(np.stack([rows[i] for i in ok]))
    return out


def coverage(cells: Iterable[int], total: int) -> float:
    """Share of the ``total`` cells holding at least one problem."""
    return len({int(c) for c in cells if c >= 0}) / total


RAREFIED_PROBLEMS = 8
"""Valid problems a generation's coverage is rarefied to (``rarefied_cells``): the count the
coverage slope compares generations at, so it does not rise with validity alone."""


def rarefied_cells(cells: Sequence[int], m: int = RAREFIED_PROBLEMS) -> float:
    """Expected distinct cells among ``m`` of ``cells`` (one per valid problem) drawn without
    replacement: Σ_i [1 − C(N − N_i, m) / C(N, m)] over the cells i holding N_i of the N
    problems (Hurlbert's rarefaction). NaN when fewer than ``m`` problems."""
    counts = np.unique(np.asarray(cells, dtype=int), return_counts=True)[1]
    n = int(counts.sum())
    if n < m or m <= 0:
        return float("nan")
    return float(sum(1.0 - math.comb(n - k, m) / math.comb(n, m) for k in counts))
