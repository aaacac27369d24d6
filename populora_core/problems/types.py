"""Task types, problems and the typed format error shared by parsers and checkers."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

TaskType = Literal["code_o", "code_i", "code_f"]
TASK_TYPES: tuple[TaskType, ...] = ("code_o", "code_i", "code_f")
TASK_NAMES: dict[str, str] = {
    "code_o": "deduction (predict the output)",
    "code_i": "abduction (find an input)",
    "code_f": "induction (write the function)",
}

FormatReason = Literal[
    "not_text",
    "too_long",
    "empty",
    "no_answer",
    "empty_answer",
    "no_code_block",
    "no_input_block",
    "bad_input",
    "bad_program",
]

from populora_core.rewards import Verdict  # noqa: E402 - defined with the rewards over it


@dataclass(frozen=True)
class FormatError:
    """A completion that does not have the required shape; never an exception."""

    reason: FormatReason
    detail: str = ""


@dataclass(frozen=True)
class Proposal:
    """What a teacher's completion proposes: a program ``f``, inputs, and for
    induction a message hinting at what ``f`` does. Inputs are argument lists as
    Python source, e.g. ``'"Hello world", 3'`` (the call is ``f(<input>)``)."""

    program: str
    inputs: tuple[str, ...]
    message: str = ""


@dataclass(frozen=True)
class Problem:
    """A validated problem: outputs are the reprs the sandbox produced for
    ``f(<input>)``, never text from the model."""

    task_type: TaskType
    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str = ""
    problem_id: str = ""

    @property
    def shown(self) -> list[tuple[str, str]]:
        """Induction: the input/output pairs shown to the student (first half)."""
        k = max(1, len(self.inputs) // 2)
        return list(zip(self.inputs[:k], self.outputs[:k], strict=True))

    @property
    def hidden(self) -> list[tuple[str, str]]:
        """Induction: the pairs a student's function is checked on (second half)."""
        k = max(1, len(self.inputs) // 2)
        return list(zip(self.inputs[k:], self.outputs[k:], strict=True))


@dataclass(frozen=True)
class ValidationResult:
    """Validation of one proposal: a Problem when valid, else the reason."""

    valid: bool
    reason: str
    problem: Problem | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    """A student's answer judged: verdict, sandbox status of its run(s), seconds."""

    verdict: Verdict
    detail: str = ""
    sandbox_status: str = "none"
    seconds: float = 0.0


def problem_id(task_type: str, program: str, inputs: Sequence[str]) -> str:
    """A problem's id: a hash of its content, so a copy is a repeat wherever it comes from."""
    digest = hashlib.sha256("\x00".join([task_type, program, *inputs]).encode()).hexdigest()
    return f"{task_type}-{digest[:16]}"


def _seed(task_type: TaskType, inputs: tuple[str, ...], outputs: tuple[str, ...], message: str = "") -> Problem:
    program = "def f(a):\n    return a"
    return Problem(task_type, program, inputs, outputs, message, problem_id(task_type, program, inputs))


SEED_PROBLEMS: tuple[Problem, ...] = (
    _seed("code_o", ('"Hello world"',), ("'Hello world'",)),
    _seed("code_i", ('"Hello world"',), ("'Hello world'",)),
    _seed(
        "code_f",
        ('"Hello world"', "3", "[1, 2]", "(4, 'x')"),
        ("'Hello world'", "3", "[1, 2]", "(4, 'x')"),
        "Returns its argument unchanged.",
    ),
)
"""Absolute Zero Reasoner's seed triplet (the identity on "Hello world"), one per task
type, with content-hash ids like any proposed problem: a verbatim copy is a repeat."""

SEED_PROBLEM = SEED_PROBLEMS[0]
"""The deduction seed: the identity on "Hello world"."""
