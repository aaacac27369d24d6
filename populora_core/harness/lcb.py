"""LiveCodeBench's grading, run inside the sandbox: the answer in a process of its own.

The answer's process (`candidate.py`) imports this module too: there the answer is compiled
and run (``answer_*``), in the judged program its outputs are compared (``check``).

Semantics follow lcb_runner/evaluation/testing_util.py: the same star-imports before the
program; functional problems call ``Solution().<func_name>`` (or a module-level function)
with one JSON value per input line and compare with ``==`` (a tuple counts as a list); stdin
problems run the whole program with the input on stdin (``open(0)`` too) and compare
stripped output lines, exactly or as ``Decimal`` tokens. The first failing test fails the
problem; each test has its own time limit (6 s, as lcb_runner).
"""

from __future__ import annotations

import io
import json
import sys
from decimal import Decimal

TEST_SECONDS = 6
PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools\n"
    "import functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)


def _exit(code=None):
    raise SystemExit(code)  # `exit`/`quit` come from site, which the sandbox's `python -S` skips


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _same_line(got: str, want: str) -> bool:
    """Equal as text, or as ``Decimal`` tokens when both lines are numbers only."""
    if got == want:
        return True
    try:
        got_numbers, want_numbers = [Decimal(t) for t in got.split()], [Decimal(t) for t in want.split()]
    except Exception:  # noqa: BLE001 - not numbers: the line is compared as text only
        return False
    return got_numbers == want_numbers


def _same_output(got: str, want: str) -> bool:
    got_lines, want_lines = _lines(got), _lines(want)
    return len(got_lines) == len(want_lines) and all(map(_same_line, got_lines, want_lines))


def _run_stdin(compiled, stdin_text: str) -> str:
    """Runs the whole program once with ``stdin_text`` on stdin; its stdout."""
    real_open = open

    def fake_open(file, *args, **kwargs):
        return io.StringIO(stdin_text) if file == 0 else real_open(file, *args, **kwargs)

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n")
    saved = sys.stdin, sys.stdout
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin_text.encode()), encoding="utf-8")
    sys.stdout = out
    scope = {"__name__": "__main__", "open": fake_open, "exit": _exit, "quit": _exit}
    try:
        exec(PRELUDE, scope)  # noqa: S102
        scope.update(open=fake_open, exit=_exit, quit=_exit)  # `from builtins import *` rebinds open
        exec(compiled, scope)  # noqa: S102 - the candidate, in the sandbox
        _join_threads()
    except SystemExit:
        pass
    finally:
        out.flush()
        sys.stdin, sys.stdout = saved
    return out.buffer.getvalue().decode("utf-8", "replace")


def _join_threads() -> None:
    """Waits for the threads a program started (``threading.Thread(target=main)`` for a
    bigger stack is common), so their output is captured too."""
    threading = sys.modules.get("threading")
    if threading is not None:
        for thread in threading.enumerate():
            if thread is not threading.main_thread():
                thread.join()


_ANSWER: dict = {}
"""In the answer's process: its compiled code, source and (functional problems) method."""


def answer_setup(source: str, fn_name) -> None:
    """In the answer's process (candidate.py): compiles the answer and, for a
    functional problem, runs it and finds its method."""
    _ANSWER.update(compiled=compile(source, "<solution>", "exec"), method=None)
    if fn_name:
        scope = {"__name__": "__solution__", "exit": _exit, "quit": _exit}
        exec(PRELUDE, scope)  # noqa: S102
        exec(_ANSWER["compiled"], scope)  # noqa: S102 - the candidate, in the sandbox
        # LeetCode-style code: ``Solution().fn_name``, else the module's ``fn_name``
        _ANSWER["method"] = getattr(scope["Solution"](), fn_name) if "class Solution" in source else scope[fn_name]


def answer_call(args: list):
    return _ANSWER["method"](*args)


def answer_stdin(stdin_text: str) -> str:
    return _run_stdin(_ANSWER["compiled"], stdin_text)


ANSWER_SOURCE = f"from {__name__} import answer_call, answer_setup, answer_stdin\n"
"""What the answer's process runs first: the functions ``check`` calls there."""


def check(candidate, source: str, tests_json: str, fn_name) -> bool:
    """In the judged program: raises AssertionError at the first failing test; True when all
    pass. ``candidate``: the answer's process (a ``CandidateProcess`` running ``ANSWER_SOURCE``),
    where every test runs under its own time limit; only its output comes back to be compared."""
    candidate.function(answer_setup.__name__)(source, fn_name)
    call, stdin = candidate.function(answer_call.__name__), candidate.function(answer_stdin.__name__)
    for number, (stdin_text, want) in enumerate(json.loads(tests_json)):
        if fn_name:
            got = call.timed(TEST_SECONDS, [json.loads(line) for line in stdin_text.split("\n")])
            ok = (list(got) if isinstance(got, tuple) else got) == json.loads(want)
        else:
            got = stdin.timed(TEST_SECONDS, stdin_text)
            ok = isinstance(got, str) and _same_output(got, want)
        assert ok, f"wrong answer on test {number}: {str(got)[:120]!r}"
    return True
