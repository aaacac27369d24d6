"""Built-in sample proposals and student answers: `populora verify --demo` runs them through
the sandbox to show what is valid, what is refused and why, and how answers are judged."""

from __future__ import annotations

from collections.abc import Sequence

from populora_core.problems.types import Problem, ValidationResult

DEMO_PROPOSALS: list[tuple[str, str]] = [
    (
        "code_o",
        "<think>Reverse and upper-case.</think>\n<answer>\n```python\ndef f(s):\n    return s[::-1].upper()\n```\n"
        '```input\n"Hello world"\n```\n</answer>',
    ),
    (
        "code_i",
        "<think>Sum of squares of evens.</think>\n<answer>\n```python\ndef f(xs):\n"
        "    return sum(x * x for x in xs if x % 2 == 0)\n```\n```input\n[1, 2, 3, 4]\n```\n</answer>",
    ),
    (
        "code_f",
        "<think>Affine map.</think>\n<answer>\n```python\ndef f(n):\n    return 3 * n + 1\n```\n"
        "```input\n1\n```\n```input\n2\n```\n```input\n5\n```\n```input\n10\n```\n"
        "```message\nA straight line.\n```\n</answer>",
    ),
    ("code_o", "<answer>\n```python\nimport os\ndef f(x):\n    return os.getcwd()\n```\n```input\n1\n```\n</answer>"),
    ("code_o", "<answer>\n```python\ndef f(x):\n    return id(object())\n```\n```input\n1\n```\n</answer>"),
    ("code_o", "<answer>\n```python\ndef f(x):\n    while True:\n        x += 1\n```\n```input\n1\n```\n</answer>"),
    ("code_o", "I would propose a nice program but I forgot the format."),
]

DEMO_ANSWERS: dict[int, list[str]] = {
    0: ["<answer>'DLROW OLLEH'</answer>", "<answer>```output\n'dlrow olleh'\n```</answer>", "no tags at all"],
    1: ["<answer>```input\n[2, 4]\n```</answer>", "<answer>```input\n[1, 3]\n```</answer>"],
    2: [
        "<answer>```python\ndef f(n):\n    return 3 * n + 1\n```</answer>",
        "<answer>```python\ndef f(n):\n    return n + 1\n```</answer>",
    ],
}
"""Answers to the demo proposals, by proposal index: right, wrong and unparseable ones."""


def demo_answers(results: Sequence[ValidationResult]) -> list[tuple[Problem, str]]:
    """(problem, answer) for every demo answer whose proposal validated."""
    return [
        (results[i].problem, answer) for i, answers in DEMO_ANSWERS.items() if results[i].problem for answer in answers
    ]
