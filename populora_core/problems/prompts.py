"""Prompt templates for teachers (proposers) and students (solvers).

Prompts are chat messages. Each teacher prompt shows K reference problems from
the teacher's buffer written in the exact answer format; with a small model
that example is what keeps the format (measured with the 0.5B model: 0 of 16
proposals valid without a worked example, 16 of 48 with one). Generation should
pre-fill the assistant turn with ``ASSISTANT_PREFILL`` and stop at ``</answer>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora_core.problems.types import Problem, TaskType

ASSISTANT_PREFILL = "<think>"
STOP_STRINGS: tuple[str, ...] = ("</answer>",)

SYSTEM = (
    "You are a careful Python programmer. Think inside <think></think>, then give "
    "only the final result inside <answer></answer>."
)

_RULES = """Rules for the program:
- define a function named `f`; it may define helpers and use only the Python standard library;
- it must be deterministic: no randomness, time, files, network, printing or input;
- no imports of os, sys, subprocess, random, time, datetime, threading (and similar).
An input is the argument list of one call `f(<input>)`, written as Python literals."""

_TEACHER_TASK = {
    "code_o": (
        "Propose a new Python program and one input for it, such that predicting the output "
        "of f(<input>) takes real reasoning. Make it different from the references."
    ),
    "code_i": (
        "Propose a new Python program and one input for it, such that finding an input that "
        "produces the same output takes real reasoning. Make it different from the references."
    ),
    "code_f": (
        "Propose a new Python program, at least {min_inputs} different inputs for it, and a short "
        "message that hints at what f does, such that someone who sees half of the input/output "
        "pairs and the message can write f. Make it different from the references."
    ),
}

_STUDENT_TASK = {
    "code_o": "Predict the exact output of the call below: what `repr(f({inp}))` returns.",
    "code_i": "Find an input such that `f(<input>)` returns exactly the output below.",
    "code_f": "Write the function `f` that produces these outputs from these inputs.",
}


def _fence(tag: str, content: str) -> str:
    return f"```{tag}\n{content}\n```"


def format_proposal_answer(problem: Problem) -> str:
    """A problem written the way a teacher must answer (used for references)."""
    parts = [_fence("python", problem.program)]
    parts += [_fence("input", inp) for inp in problem.inputs]
    if problem.task_type == "code_f":
        parts.append(_fence("message", problem.message or "Find the rule."))
    return "<answer>\n" + "\n".join(parts) + "\n</answer>"


def teacher_prompt(task_type: TaskType, references: Sequence[Problem], *, min_inputs: int = 4) -> list[dict[str, str]]:
    """Chat messages asking a teacher for a new problem of ``task_type``."""
    task = _TEACHER_TASK[task_type].format(min_inputs=min_inputs)
    refs = "\n\n".join(f"Reference {i + 1}:\n{format_proposal_answer(p)}" for i, p in enumerate(references))
    fmt_lines = [_fence("python", "def f(...):\n    ..."), _fence("input", "...")]
    if task_type == "code_f":
        fmt_lines = [_fence("python", "def f(...):\n    ..."), _fence("input", "..."), "(one ```input block per input)"]
        fmt_lines.append(_fence("message", "..."))
    user = (
        f"{task}\n\n{_RULES}\n\n"
        f"Answer in exactly this format:\n<think>your reasoning</think>\n<answer>\n"
        + "\n".join(fmt_lines)
        + "\n</answer>"
        + (f"\n\n{refs}" if refs else "")
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


# A worked example before the problem, for another program: the answer format filled in,
# never described. Measured on the 0.5B model, 80 samples of CRUXEval problems on fixed seeds
# (benchmarks/prompt_format.py; docs/benchmarks.md#prompt-format): a described placeholder
# inside the answer block ("the value, as a Python literal") was copied verbatim, 41% format
# errors, 2 of 80 solved; this prompt 36% and 4 of 80 (no difference the samples establish,
# and no copied placeholder); an example placed after the problem was copied into the answer.
_EXAMPLE_PROGRAM = "def f(s):\n    return s[::-1] + '!'"
_STUDENT_EXAMPLE = {
    "code_o": (
        f"Program:\n{_fence('python', _EXAMPLE_PROGRAM)}\nInput:\n{_fence('input', repr('abc'))}",
        "f reverses 'abc' to 'cba' and appends '!'.",
        _fence("output", repr("cba!")),
    ),
    "code_i": (
        f"Program:\n{_fence('python', _EXAMPLE_PROGRAM)}\nOutput:\n{_fence('output', repr('cba!'))}",
        "f reverses its argument and appends '!', so the input is 'abc'.",
        _fence("input", repr("abc")),
    ),
    "code_f": (
        "Examples:\n" + _fence("python", "f('abc') == 'cba!'\nf('xy') == 'yx!'") + "\nMessage: reverses, then adds",
        "Each output is the input reversed with '!' appended.",
        _fence("python", _EXAMPLE_PROGRAM),
    ),
}
STUDENT_FORMAT = "Reply with a short reasoning inside <think></think>, then the answer inside <answer></answer>."


def student_prompt(problem: Problem) -> list[dict[str, str]]:
    """Chat messages asking a student to solve ``problem``: the reply format, a worked example
    of the same task type (another program), then the problem."""
    tt = problem.task_type
    if tt == "code_o":
        inp = problem.inputs[0]
        body = f"{_fence('python', problem.program)}\n{_fence('input', inp)}"
        task = _STUDENT_TASK[tt].format(inp=inp)
    elif tt == "code_i":
        body = f"{_fence('python', problem.program)}\n{_fence('output', problem.outputs[0])}"
        task = _STUDENT_TASK[tt]
    else:
        pairs = "\n".join(f"f({inp}) == {out}" for inp, out in problem.shown)
        body = f"Examples:\n{_fence('python', pairs)}\nMessage: {problem.message or '(none)'}"
        task = _STUDENT_TASK[tt]
    shown, thought, answer = _STUDENT_EXAMPLE[tt]
    example = f"Example.\n{shown}\nReply:\n<think>{thought}</think>\n<answer>\n{answer}\n</answer>"
    user = f"{STUDENT_FORMAT}\n\n{example}\n\nNow your problem. {task}\n\n{body}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
