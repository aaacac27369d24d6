"""Deliberately wrong programs for testing the judges: single-edit mutants of a canonical
solution (one operator, comparison or constant changed), and wrappers that change every
output of the canonical solution."""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}  # fmt: skip
_BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
           ast.Mod: ast.FloorDiv}  # fmt: skip
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}


def _sites(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE:
            yield "compare", node
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINARY:
            yield "binary", node
        elif isinstance(node, ast.BoolOp):
            yield "bool", node
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield "constant", node


def _mutate(kind: str, node: ast.AST) -> None:
    if kind == "compare":
        node.ops[0] = _COMPARE[type(node.ops[0])]()
    elif kind == "binary":
        node.op = _BINARY[type(node.op)]()
    elif kind == "bool":
        node.op = _BOOL[type(node.op)]()
    else:
        node.value += 1


def single_edit_mutants(source: str, per_kind: int = 1) -> list[tuple[str, str]]:
    """(kind, mutant source): for each kind of edit, the first ``per_kind`` sites (in
    ``ast.walk`` order) changed one at a time; [] when ``source`` does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out, taken = [], {}
    for index, (kind, _) in enumerate(list(_sites(tree))):
        if taken.get(kind, 0) >= per_kind:
            continue
        mutant = copy.deepcopy(tree)
        kind2, node = list(_sites(mutant))[index]
        _mutate(kind2, node)
        text = ast.unparse(mutant)
        if text != ast.unparse(tree):
            out.append((kind, text))
            taken[kind] = taken.get(kind, 0) + 1
    return out


WRONG_OUTPUT = '''
def _populora_wrong(value):
    """A value unequal to ``value``, of its type where it can be."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        if value - value != 0:  # nan or infinite
            return 0.5
        return value + 1.0 + abs(value) / 2  # beyond any relative tolerance a test allows
    if isinstance(value, complex):
        return value + 1
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, list):
        return value + ["?"]
    if isinstance(value, tuple):
        return value + ("?",)
    if isinstance(value, (set, frozenset)):
        return value | {"?"}
    if isinstance(value, dict):
        return {**value, "?": "?"}
    return None
'''


def wrong_output(canonical: str, entry: str) -> str:
    """``canonical`` with ``entry`` renamed, and an ``entry`` that returns what it returns,
    changed (``WRONG_OUTPUT``): wrong on every input by construction."""
    renamed = re.sub(rf"\b{re.escape(entry)}\(", f"_canonical_{entry}(", canonical)  # recursive calls too
    return (
        f"{renamed}\n{WRONG_OUTPUT}\n"
        f"def {entry}(*args, **kwargs):\n    return _populora_wrong(_canonical_{entry}(*args, **kwargs))\n"
    )
