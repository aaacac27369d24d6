"""Complexity of a valid program: AST depth, and radon's cyclomatic complexity, LOC and Halstead volume."""

from __future__ import annotations

import ast
from collections.abc import Callable

from radon.metrics import h_visit_ast
from radon.raw import analyze
from radon.visitors import ComplexityVisitor

from populora_core.rundir.schemas import METRIC_NAMES


def parse(source: str) -> ast.Module | None:
    """The module's syntax tree, or None when it does not parse (nothing is run)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def ast_depth(tree: ast.AST) -> int:
    """Nodes on the longest root-to-leaf path (iterative: no recursion limit)."""
    deepest = 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def complexity_metrics(source: str) -> dict[str, float]:
    """The four metrics of ``source``; NaN for each that cannot be computed."""
    tree = parse(source)
    if tree is None:
        return dict.fromkeys(METRIC_NAMES, float("nan"))
    by_radon: dict[str, Callable[[], float]] = {
        # functions and methods summed, module-level branches included (radon's total)
        "cyclomatic": lambda: max(1, ComplexityVisitor.from_ast(tree).total_complexity),
        "loc": lambda: analyze(source).sloc,
        "halstead": lambda: h_visit_ast(tree).total.volume,
    }
    metrics = {"ast_depth": float(ast_depth(tree))}
    for name, compute in by_radon.items():
        try:
            metrics[name] = float(compute())
        except Exception:  # noqa: BLE001 - radon on odd code must not stop a run
            metrics[name] = float("nan")
    return metrics
