"""Why a held-out answer failed: one class for every judged answer, the first that holds, decided
by the judge, whose verdict it leaves as it was (each class: docs/evaluation.md#failure-classes).
``FORMAT`` are the classes of the answer's form, read on the host (``ast.parse``: nothing runs);
``CODE`` those of what its code does in the sandbox.
"""

from __future__ import annotations

import ast
import json
import re

from populora_core.evaluation.code_suites import complete_code
from populora_core.evaluation.items import EvalItem, fenced_block
from populora_core.metrics.complexity import parse
from populora_core.sandbox import Result

CODE_CLASSES = (
    "passed",
    "truncated",
    "no_code",
    "other_wrapper",
    "syntax_error",
    "signature",
    "wrong_base",
    "wrong_plus",
    "timeout",
    "runtime_error",
    "sandbox_failure",
)
MATH_CLASSES = ("passed", "truncated", "no_final_answer", "unparsed", "wrong")
CLASSES = tuple(dict.fromkeys(CODE_CLASSES + MATH_CLASSES))
FORMAT = ("truncated", "no_code", "other_wrapper", "syntax_error", "signature", "no_final_answer", "unparsed")
CODE = ("wrong_base", "wrong_plus", "timeout", "runtime_error", "wrong")
UNCLASSIFIED = "unclassified"
"""The class of a row judged before classes existed (a part written by an older version)."""

_TAGGED = re.compile(r"AssertionError: \('(wrong_base|wrong_plus)'")
_LITERAL_TAG = {"cruxeval_o": "output", "cruxeval_i": "input"}
_CODE_START = re.compile(r"^(def|class|import|from|async def) ", re.MULTILINE)
_MAX_TRIMS = 80


def _defines_function(tree: ast.Module) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body)


def unfenced_code(text: str) -> bool:
    """Whether ``text`` holds a function outside any fenced block: an ``<answer>`` body, or
    the text from its first ``def``/``class``/``import`` line, with trailing prose cut a line
    at a time, that parses and defines one."""
    m = re.search(r"<answer>(.*?)(</answer>|$)", text, re.DOTALL)
    if m:
        tree = parse(m.group(1).strip())
        if tree is not None and _defines_function(tree):
            return True
    start = _CODE_START.search(text)
    if start is None:
        return False
    lines = text[start.start() :].splitlines()
    for end in range(len(lines), max(0, len(lines) - _MAX_TRIMS), -1):
        tree = parse("\n".join(lines[:end]))
        if tree is not None:
            return _defines_function(tree)
    return False


def _arity(item: EvalItem) -> int | None:
    """How many arguments the benchmark passes its entry point (its first test input)."""
    plus = item.data.get("plus")
    if plus:
        text = plus["inputs_json"]  # "[[...], ...]": only the first input is decoded
        return None if text.startswith("[]") else len(json.JSONDecoder().raw_decode(text, 1)[0])
    tree = parse(item.data.get("prompt") or "")
    entry = item.data.get("entry_point")
    for node in tree.body if tree else ():
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            return len(node.args.posonlyargs) + len(node.args.args)
    return None


def _takes(fn: ast.FunctionDef | ast.AsyncFunctionDef, n: int) -> bool:
    positional = len(fn.args.posonlyargs) + len(fn.args.args)
    required = positional - len(fn.args.defaults)
    return required <= n and (n <= positional or fn.args.vararg is not None)


def signature_broken(item: EvalItem, code: str) -> bool:
    """The answer's own code defines top-level functions but not the entry point, or an entry
    point that cannot take the benchmark's arguments (LiveCodeBench: ``fn_name`` at top level
    or as a ``Solution`` method; stdin programs and MBPP, which names none, are not checked)."""
    entry = item.data.get("entry_point") or item.data.get("fn_name")
    tree = parse(code)
    if not entry or tree is None:
        return False
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in tree.body if item.kind == "livecodebench" else ():  # only its harness calls a method
        if isinstance(node, ast.ClassDef) and node.name == "Solution":
            functions |= {f"Solution.{n.name}": n for n in node.body if isinstance(n, ast.FunctionDef)}
    if not functions:
        return False  # a body only: the judge completes the benchmark's own stub
    fn = functions.get(entry)
    if fn is None:
        return f"Solution.{entry}" not in functions
    n = _arity(item) if item.kind == "code" else None
    return n is not None and not _takes(fn, n)


def answer_form(item: EvalItem, completion: str, finish_reason: str | None) -> str | None:
    """The form class of a program answer, or None when its form is sound and the run decides
    (a CRUXEval literal read from ``<answer>`` tags too: the judge reads those)."""
    cut = finish_reason == "length"
    tag = _LITERAL_TAG.get(item.kind)  # the block the judge reads: (code, closed), None when there is none
    block = fenced_block(completion, tag, "", "python") if tag else fenced_block(completion, "python", "py", "")
    if cut and (block is None or not block[1]):  # cut at the cap before its block (if any) closed
        return "truncated"
    if block is None:
        if item.kind in _LITERAL_TAG:
            return None if "<answer>" in completion else "no_code"
        return "other_wrapper" if unfenced_code(completion) else "no_code"
    code = block[0]
    if item.kind in _LITERAL_TAG:
        return None  # a literal: the sandbox says whether it parses
    if parse(complete_code(item, code)) is None:
        return "syntax_error"
    return "signature" if signature_broken(item, code) else None


def run_class(result: Result) -> str:
    """The class of a program that did not return True, from the sandbox's result."""
    if result.status == "timeout":
        return "timeout"
    if result.status in ("memory", "output_limit"):
        return "runtime_error"
    if result.status == "sandbox_failure":
        return "sandbox_failure"
    if result.status == "ok":
        return "wrong_base"  # the check's value was not True (a CRUXEval literal that differs)
    error = result.error or ""
    tagged = _TAGGED.match(error)
    if tagged:
        return tagged.group(1)
    if error.startswith("TimeoutError"):
        return "timeout"
    if error.startswith(("SyntaxError", "IndentationError", "TabError")):
        return "syntax_error"  # a CRUXEval literal (code answers were parsed on the host)
    if error.startswith("AssertionError") and "wrong answer on test" in error:
        return "wrong_base"  # LiveCodeBench's harness
    return "runtime_error"
