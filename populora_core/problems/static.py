"""AST checks of model-written code before it reaches the sandbox.

The sandbox contains whatever runs; these checks keep problems meaningful
(deterministic, self-contained, no I/O) and reject the obvious attacks early
with a readable reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from populora_core.config import ProblemsConfig

BANNED_ATTRIBUTES = frozenset(
    {
        "__class__",
        "__bases__",
        "__base__",
        "__subclasses__",
        "__globals__",
        "__builtins__",
        "__code__",
        "__closure__",
        "__dict__",
        "__getattribute__",
        "__mro__",
        "__import__",
        "__loader__",
        "__spec__",
        "__reduce__",
        "__reduce_ex__",
        "f_globals",
        "f_locals",
        "f_back",
        "gi_frame",
        "cr_frame",
    }
)


def parse_program(source: str) -> ast.Module | str:
    """The module AST, or the reason it does not parse."""
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error: {exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"unparseable: {type(exc).__name__}"


def banned_usage(tree: ast.AST, banned_modules: Iterable[str], banned_calls: Iterable[str]) -> str | None:
    """The first banned import, name or attribute in ``tree``, or None."""
    modules = set(banned_modules)
    names = set(banned_calls)
    try:
        nodes = list(ast.walk(tree))
    except RecursionError:
        return "program nests too deeply"
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in modules:
                    return f"banned import: {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and (node.module or "").split(".")[0] in modules:
                return f"banned import: {node.module}"
            if node.level:
                return "relative import"
        elif isinstance(node, ast.Name) and node.id in names:
            return f"banned name: {node.id}"
        elif isinstance(node, ast.Attribute) and node.attr in BANNED_ATTRIBUTES:
            return f"banned attribute: {node.attr}"
    return None


def check_program(source: str, config: ProblemsConfig, *, require_f: bool = True) -> str | None:
    """None when ``source`` is an acceptable program defining ``f``, else why not."""
    if len(source) > config.max_program_chars:
        return f"program too long ({len(source)} > {config.max_program_chars} characters)"
    tree = parse_program(source)
    if isinstance(tree, str):
        return tree
    banned = banned_usage(tree, config.banned_modules, config.banned_calls)
    if banned:
        return banned
    if require_f and not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
        return "no top-level function named f"
    return None


def check_expression(source: str, config: ProblemsConfig) -> str | None:
    """None when a model-written expression (an input) uses nothing banned."""
    if len(source) > config.max_input_chars:
        return f"input too long ({len(source)} > {config.max_input_chars} characters)"
    try:
        tree = ast.parse(f"f({source}\n)", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return f"input does not parse: {type(exc).__name__}"
    return banned_usage(tree, config.banned_modules, config.banned_calls)
