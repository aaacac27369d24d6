"""The probe set: fixed problems every adapter answers greedily, to see whether it moved.

Zero drift (every adapter's greedy answer equal to the base model's) means the updates
did nothing, whatever the loss says. These programs are the project's own (no
benchmark data needed), small deterministic deduction problems (``code_o``) of mixed
difficulty; their outputs are what Python gives (``tests/core/test_probes.py`` runs
each one in the sandbox). Order is fixed: ``probe_problems(n)`` is the first n.
"""

from __future__ import annotations

from populora_core.problems.types import Problem, problem_id

_PROBES: tuple[tuple[str, str, str], ...] = (
    ("def f(xs):\n    return sorted(xs)[::-1][:2]", "[3, 9, 1, 7]", "[9, 7]"),
    ("def f(s):\n    return s.replace('a', '').upper()", "'banana'", "'BNN'"),
    ("def f(n):\n    total = 0\n    for i in range(n):\n        total += i * i\n    return total", "4", "14"),
    ("def f(d):\n    return sorted(d, key=d.get)", "{'x': 3, 'y': 1, 'z': 2}", "['y', 'z', 'x']"),
    ("def f(s):\n    return ''.join(c for c in s if c.isdigit())", "'a1b22c333'", "'122333'"),
    ("def f(xs):\n    return [x % 3 for x in xs if x > 2]", "[1, 4, 2, 9, 5]", "[1, 0, 2]"),
    ("def f(a, b):\n    return a * b - (a + b)", "6, 4", "14"),
    ("def f(s):\n    words = s.split()\n    return len(words), words[-1]", "'the quick brown fox'", "(4, 'fox')"),
    (
        "def f(xs):\n    out = []\n    for x in xs:\n        if x not in out:\n"
        "            out.append(x)\n    return out",
        "[2, 1, 2, 3, 1]",
        "[2, 1, 3]",
    ),
    ("def f(n):\n    return [i for i in range(1, n + 1) if n % i == 0]", "12", "[1, 2, 3, 4, 6, 12]"),
    ("def f(s):\n    return s[::2] + s[1::2]", "'abcdef'", "'acebdf'"),
    ("def f(xs):\n    return {x: xs.count(x) for x in set(xs)}", "[1, 1, 2]", "{1: 2, 2: 1}"),
    ("def f(t):\n    a, b = t\n    return (b, a + b)", "(3, 5)", "(5, 8)"),
    ("def f(s):\n    return s.title().swapcase()", "'hello world'", "'hELLO wORLD'"),
    ("def f(xs):\n    return sum(xs[1::2]) - sum(xs[::2])", "[5, 1, 4, 8, 2]", "-2"),
    ("def f(n):\n    s = str(n)\n    return int(s[::-1]) + len(s)", "1203", "3025"),
)

PROBE_PROBLEMS: tuple[Problem, ...] = tuple(
    Problem("code_o", code, (inp,), (out,), "", problem_id("code_o", code, (inp,))) for code, inp, out in _PROBES
)


def probe_problems(count: int) -> list[Problem]:
    """The first ``count`` probe problems (at most ``len(PROBE_PROBLEMS)``)."""
    if count > len(PROBE_PROBLEMS):
        raise ValueError(f"probe.items is {count}; the probe set has {len(PROBE_PROBLEMS)} problems")
    return list(PROBE_PROBLEMS[:count])
