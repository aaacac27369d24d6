"""Coverage of problem space: a CVT archive over a descriptor of each valid problem.

Descriptor (8 numbers, each in [0, 1]) of a program's source:

    depth      AST depth                 log(1 + u) / log(1 + U), u = value − floor,
    branches   cyclomatic complexity     U calibrated (see below), clipped to [0, 1]
    lines      source lines
    volume     log(1 + Halstead volume)  u / U (already a logarithm)
    control    3 × share of AST nodes that are control flow (if, for, while, try, with, return, …)
    data       3 × share that build or index data (displays, comprehensions, subscripts, slices)
    calls      3 × share that are calls, lambdas or function definitions
    arith      3 × share that are arithmetic, comparison or boolean operators

Calibration: U is twice the largest u over a fixed reference corpus of human-written
programs (the 800 CRUXEval functions and the 974 MBPP solutions,
``REFERENCE_CALIBRATION``; ``calibrate`` recomputes it): AST depth up to 32, 31
branches, 99 lines, Halstead volume ~270,000 before an entry clips, where the old
fixed scales clipped at depth 12, 8 branches, 25 lines and volume 1,000, which 7B
models' programs pass. The logarithm keeps small programs (most of what small models
write) spread out. So coverage stays comparable across runs and model sizes. A run
stores the calibration it measured with (``cvt_calibration.json``).

The first four say how big and branchy a program is, the last four what it is
made of; ``return x * 3`` and a nested loop over a dict land in different cells.
Centroids come from pyribs' ``CVTArchive`` (k-means over uniform samples of the
unit cube, seeded by the run seed), computed once per run and stored; coverage is
the share of cells holding at least one valid problem.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterable, Sequence

import numpy as np

from populora_core.metrics.complexity import complexity_metrics
from populora_core.rundir.schemas import DESCRIPTOR_NAMES

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


SIZE_METRICS: tuple[str, ...] = ("ast_depth", "cyclomatic", "loc", "halstead")
FLOORS: dict[str, float] = {"ast_depth": 4.0, "cyclomatic": 1.0, "loc": 1.0, "halstead": 0.0}
"""The smallest value of each size metric (``def f(): return 1`` has AST depth 4); Halstead as log(1 + V)."""

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
        for k in SIZE_METRICS
    }


def _calibrated_sizes(m: dict[str, float], calibration: Calibration) -> list[float]:
    out = []
    for k in SIZE_METRICS:
        u, top = max(0.0, _size(k, m) - FLOORS[k]), calibration[k]
        out.append(min(1.0, u / top if k == "halstead" else math.log1p(u) / math.log1p(top)))
    return out


def descriptor(source: str, calibration: Calibration = REFERENCE_CALIBRATION) -> np.ndarray | None:
    """The 8-number descriptor of ``source`` (see the module docstring), the size entries
    calibrated by ``calibration``; None if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    m = complexity_metrics(source)
    nodes = list(ast.walk(tree))
    n = max(1, len(nodes))

    def share(kinds: tuple[type, ...]) -> float:
        return min(1.0, 3.0 * sum(isinstance(x, kinds) for x in nodes) / n)

    return np.array([*_calibrated_sizes(m, calibration), share(_CONTROL), share(_DATA), share(_CALLS), share(_ARITH)])


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


def cells_of(descriptors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The index of the nearest centroid of each descriptor row, shape (N,)."""
    if len(descriptors) == 0:
        return np.zeros(0, dtype=np.int64)
    from ribs.archives import CVTArchive

    archive = CVTArchive(solution_dim=1, centroids=centroids, ranges=[(0.0, 1.0)] * centroids.shape[1])
    return np.asarray(archive.index_of(np.asarray(descriptors, dtype=np.float64)), dtype=np.int64)


def problem_cells(
    programs: Sequence[str], centroids: np.ndarray, calibration: Calibration = REFERENCE_CALIBRATION
) -> np.ndarray:
    """CVT cell per program (−1 for a program that does not parse)."""
    rows = [descriptor(p, calibration) for p in programs]
    ok = [i for i, d in enumerate(rows) if d is not None]
    out = np.full(len(rows), -1, dtype=np.int64)
    if ok:
        out[ok] = cells_of(np.stack([rows[i] for i in ok]), centroids)
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
