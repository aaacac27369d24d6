"""Coverage of problem space: a CVT archive over a descriptor of each valid problem.

Descriptor (8 numbers, each in [0, 1]) of a program's source:

    depth      AST depth / 12                     (every entry clipped to [0, 1])
    branches   (cyclomatic complexity − 1) / 7
    lines      (source lines − 1) / 24
    volume     log(1 + Halstead volume) / log(1 + 1000)
    control    3 × share of AST nodes that are control flow (if, for, while, try, with, return, …)
    data       3 × share that build or index data (displays, comprehensions, subscripts, slices)
    calls      3 × share that are calls, lambdas or function definitions
    arith      3 × share that are arithmetic, comparison or boolean operators

The scales put the programs small models write (depth 5–12, 2–25 lines, node
shares up to a third) across the unit cube the CVT centroids fill.

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

DESCRIPTOR_NAMES: tuple[str, ...] = ("depth", "branches", "lines", "volume", "control", "data", "calls", "arith")

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


def descriptor(source: str) -> np.ndarray | None:
    """The 8-number descriptor of ``source`` (see the module docstring); None if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    m = complexity_metrics(source)
    nodes = list(ast.walk(tree))
    n = max(1, len(nodes))

    def scaled(value: float, bottom: float, top: float) -> float:
        return 0.0 if math.isnan(value) else min(1.0, max(0.0, (value - bottom) / (top - bottom)))

    def share(kinds: tuple[type, ...]) -> float:
        return scaled(3.0 * sum(isinstance(x, kinds) for x in nodes) / n, 0.0, 1.0)

    halstead = m["halstead"] if not math.isnan(m["halstead"]) else 0.0
    return np.array(
        [
            scaled(m["ast_depth"], 0.0, 12.0),
            scaled(m["cyclomatic"], 1.0, 8.0),
            scaled(m["loc"], 1.0, 25.0),
            scaled(math.log1p(max(0.0, halstead)), 0.0, math.log1p(1000.0)),
            share(_CONTROL),
            share(_DATA),
            share(_CALLS),
            share(_ARITH),
        ]
    )


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


def problem_cells(programs: Sequence[str], centroids: np.ndarray) -> np.ndarray:
    """CVT cell per program (−1 for a program that does not parse)."""
    rows = [descriptor(p) for p in programs]
    ok = [i for i, d in enumerate(rows) if d is not None]
    out = np.full(len(rows), -1, dtype=np.int64)
    if ok:
        out[ok] = cells_of(np.stack([rows[i] for i in ok]), centroids)
    return out


def coverage(cells: Iterable[int], total: int) -> float:
    """Share of the ``total`` cells holding at least one problem."""
    return len({int(c) for c in cells if c >= 0}) / total
