"""LiveCodeBench's grading, run inside the sandbox: the answer in a process of its own.

Standard library only: ``harness_source()`` pastes this module's definitions into the
judged program and into the answer's process (`candidate_process.py`): there the answer is
compiled and run (``_lcb_answer_*``), here its outputs are compared (``_lcb_check``).
Semantics follow lcb_runner/evaluation/testing_util.py: the same star-imports before the
program; functional problems call ``Solution().<func_name>`` (or a module-level function)
with one JSON value per input line and compare with ``==`` (a tuple counts as a list); stdin
problems run the whole program with the input on stdin (``open(0)`` too) and compare
stripped output lines, exactly or as ``Decimal`` tokens. The first failing test fails the
problem; each test has its own time limit (6 s, as lcb_runner).
"""

from __future__ import annotations

import io as _lcb_io
import json as _lcb_json
import sys as _lcb_sys
from decimal import Decimal as _LcbDecimal

_LCB_TEST_SECONDS = 6
_LCB_PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools\n"
    "import functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)


def _lcb_exit(code=None):
    raise SystemExit(code)  # `exit`/`quit` come from site, which the sandbox's `python -S` skips


def _lcb_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _lcb_decimals(line: str):
    try:
        return [_LcbDecimal(token) for token in line.split()]
    except Exception:  # noqa: BLE001 - not numbers: the line is compared as text only
        return None


def _lcb_same_output(got: str, want: str) -> bool:
    got_lines, want_lines = _lcb_lines(got), _lcb_lines(want)
    if len(got_lines) != len(want_lines):
        return False
    for g, w in zip(got_lines, want_lines, strict=True):
        if g == w:
            continue
        dg, dw = _lcb_decimals(g), _lcb_decimals(w)
        if dg is None or dw is None or dg != dw:
            return False
    return True


def _lcb_run_stdin(compiled, stdin_text: str) -> str:
    """Runs the whole program once with ``stdin_text`` on stdin; its stdout."""
    real_open = open

    def fake_open(file, *args, **kwargs):
        return _lcb_io.StringIO(stdin_text) if file == 0 else real_open(file, *args, **kwargs)

    out = _lcb_io.TextIOWrapper(_lcb_io.BytesIO(), encoding="utf-8", newline="\n")
    saved = _lcb_sys.stdin, _lcb_sys.stdout
    _lcb_sys.stdin = _lcb_io.TextIOWrapper(_lcb_io.BytesIO(stdin_text.encode()), encoding="utf-8")
    _lcb_sys.stdout = out
    scope = {"__name__": "__main__", "open": fake_open, "exit": _lcb_exit, "quit": _lcb_exit}
    try:
        exec(_LCB_PRELUDE, scope)  # noqa: S102
        scope.update(open=fake_open, exit=_lcb_exit, quit=_lcb_exit)  # `from builtins import *` rebinds open
        exec(compiled, scope)  # noqa: S102 - the candidate, in the sandbox
        _lcb_join_threads()
    except SystemExit:
        pass
    finally:
        out.flush()
        _lcb_sys.stdin, _lcb_sys.stdout = saved
    return out.buffer.getvalue().decode("utf-8", "replace")


def _lcb_join_threads() -> None:
    """Waits for the threads a program started (``threading.Thread(target=main)`` for a
    bigger stack is common), so their output is captured too."""
    threading = _lcb_sys.modules.get("threading")
    if threading is not None:
        for thread in threading.enumerate():
            if thread is not threading.main_thread():
                thread.join()


def _lcb_function(scope: dict, fn_name: str, source: str):
    """``Solution().fn_name`` for LeetCode-style code, else the module's ``fn_name``."""
    if "class Solution" in source:
        return getattr(scope["Solution"](), fn_name)
    return scope[fn_name]


_LCB_ANSWER: dict = {}
"""In the answer's process: its compiled code, source and (functional problems) method."""


def _lcb_answer_setup(source: str, fn_name) -> None:
    """In the answer's process (candidate_process.py): compiles the answer and, for a
    functional problem, runs it and finds its method."""
    _LCB_ANSWER.update(compiled=compile(source, "<solution>", "exec"), method=None)
    if fn_name:
        scope = {"__name__": "__solution__", "exit": _lcb_exit, "quit": _lcb_exit}
        exec(_LCB_PRELUDE, scope)  # noqa: S102
        exec(_LCB_ANSWER["compiled"], scope)  # noqa: S102 - the candidate, in the sandbox
        _LCB_ANSWER["method"] = _lcb_function(scope, fn_name, source)


def _lcb_answer_call(args: list):
    return _LCB_ANSWER["method"](*args)


def _lcb_answer_stdin(stdin_text: str) -> str:
    return _lcb_run_stdin(_LCB_ANSWER["compiled"], stdin_text)


def _lcb_check(candidate, source: str, tests_json: str, fn_name) -> bool:
    """In the judged program: raises AssertionError at the first failing test; True when all
    pass. ``candidate``: the answer's process (``CandidateProcess`` running this module), where
    every test runs under its own time limit; only its output comes back to be compared."""
    candidate.function("_lcb_answer_setup")(source, fn_name)
    call, stdin = candidate.function("_lcb_answer_call"), candidate.function("_lcb_answer_stdin")
    for number, (stdin_text, want) in enumerate(_lcb_json.loads(tests_json)):
        if fn_name:
            got = call.timed(_LCB_TEST_SECONDS, [_lcb_json.loads(line) for line in stdin_text.split("\n")])
            ok = (list(got) if isinstance(got, tuple) else got) == _lcb_json.loads(want)
        else:
            got = stdin.timed(_LCB_TEST_SECONDS, stdin_text)
            ok = isinstance(got, str) and _lcb_same_output(got, want)
        assert ok, f"wrong answer on test {number}: {str(got)[:120]!r}"
    return True


def harness_source() -> str:
    """This module's definitions, pasted after a candidate's code (a ``__future__`` import
    is legal only at a program's top, so it is left out)."""
    from pathlib import Path

    return Path(__file__).read_text().replace("from __future__ import annotations\n", "")
