"""Proposal validation: parse, static checks, then two sandbox runs per input.

A proposal is valid when its program passes the AST checks, every input is a
plain argument list without banned names, both runs of ``f(<input>)`` finish
``ok`` with the same repr, and that repr is a Python literal (so answers can be
compared outside the sandbox without evaluating model text). Gold outputs are
those reprs: they come from execution, never from the model.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from populora_core.config import ProblemsConfig
from populora_core.metrics.complexity import complexity_metrics
from populora_core.problems.parsing import check_call_arguments, parse_proposal
from populora_core.problems.static import check_expression, check_program
from populora_core.problems.types import FormatError, Problem, Proposal, TaskType, ValidationResult, problem_id
from populora_core.sandbox import Job, Result, SandboxPool

RUN_SALTS = (0, 977)
"""Two runs per input; the second shifts object addresses (see Job.salt), so
output that depends on id() or default hashes shows up as non-determinism."""

FORMAT_REASON = "format: "
"""Prefix of the ``reason`` of a proposal whose completion did not parse."""


def badly_formatted(reason: str) -> bool:
    """Whether a validation ``reason`` says the completion did not parse (vs. a parsed
    proposal that failed later: banned name, crash, non-determinism, a repeat)."""
    return reason.startswith(FORMAT_REASON)


def literal_value(text: str, max_chars: int = 100_000) -> tuple[bool, object]:
    """(True, value) when ``text`` is a Python literal, else (False, None).

    ``ast.literal_eval`` evaluates no code; the guards cover what it can still
    throw on hostile text (deep nesting, huge numbers).
    """
    if not isinstance(text, str) or len(text) > max_chars:
        return False, None
    try:
        return True, ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def outputs_equal(gold: str, answer: str) -> bool:
    """Whether two output reprs denote the same value (literal equality, else text)."""
    ok_g, val_g = literal_value(gold)
    ok_a, val_a = literal_value(answer)
    if ok_g and ok_a:
        try:
            return bool(val_g == val_a)
        except (RecursionError, MemoryError):
            return False
    return gold.strip() == answer.strip()


def _static_reason(task_type: TaskType, proposal: Proposal, config: ProblemsConfig) -> str | None:
    reason = check_program(proposal.program, config)
    if reason:
        return reason
    for inp in proposal.inputs:
        reason = check_call_arguments(inp) or check_expression(inp, config)
        if reason:
            return f"input {inp[:40]!r}: {reason}"
    if task_type == "code_f" and len(set(proposal.inputs)) < config.code_f_min_inputs:
        return f"induction needs at least {config.code_f_min_inputs} distinct inputs, got {len(set(proposal.inputs))}"
    return None


def _gold_output(runs: Sequence[Result], config: ProblemsConfig) -> tuple[str | None, str]:
    """(gold repr, "") when the runs agree and are usable, else (None, reason)."""
    first = runs[0]
    if first.status != "ok":
        return None, f"{first.status}: {(first.error or '')[:120]}".rstrip(": ")
    if any(r.status != "ok" or r.value != first.value or r.stdout != first.stdout for r in runs[1:]):
        return None, "non-deterministic"
    if first.value is None or len(first.value) > config.max_output_chars:
        return None, "output too large"
    if not literal_value(first.value)[0]:
        return None, "output is not a literal"
    return first.value, ""


def validate_proposals(
    items: Sequence[tuple[TaskType, Proposal | FormatError | str]],
    pool: SandboxPool,
    config: ProblemsConfig,
) -> list[ValidationResult]:
    """Validates each (task type, proposal); a str is parsed as a completion first.

    All sandbox runs go to the pool in one batch. Returns one result per item.
    """
    parsed: list[tuple[TaskType, Proposal | FormatError]] = [
        (tt, parse_proposal(tt, p) if isinstance(p, str) else p) for tt, p in items
    ]
    jobs: list[Job] = []
    plans: list[str | list[tuple[int, int]]] = []  # reason, or (first job index, runs) per input
    for task_type, proposal in parsed:
        if isinstance(proposal, FormatError):
            plans.append(f"{FORMAT_REASON}{proposal.reason}")
            continue
        reason = _static_reason(task_type, proposal, config)
        if reason:
            plans.append(reason)
            continue
        per_input = []
        for inp in proposal.inputs:
            per_input.append((len(jobs), len(RUN_SALTS)))
            jobs += [
                Job(code=proposal.program, expr=f"f({inp}\n)", salt=salt)  # the sandbox's time limit
                for salt in RUN_SALTS
            ]
        plans.append(per_input)
    results = pool.run(jobs) if jobs else []
    return [
        ValidationResult(valid=False, reason=plan)
        if isinstance(plan, str)
        else _judge_runs(task_type, proposal, plan, results, config)
        for (task_type, proposal), plan in zip(parsed, plans, strict=True)
    ]


def _judge_runs(
    task_type: TaskType,
    proposal: Proposal,
    plan: list[tuple[int, int]],
    results: Sequence,
    config: ProblemsConfig,
) -> ValidationResult:
    """The proposal's problem from its sandbox runs (``plan``: first job and run count per
    input): valid with the deterministic gold outputs, else why not."""
    kept_inputs, outputs, reasons = [], [], []
    for inp, (start, n) in zip(proposal.inputs, plan, strict=True):
        gold, why = _gold_output(results[start : start + n], config)
        if gold is None:
            reasons.append(why)
        else:
            kept_inputs.append(inp)
            outputs.append(gold)
    if "non-deterministic" in reasons:
        return ValidationResult(valid=False, reason="non-deterministic")
    need = config.code_f_min_inputs if task_type == "code_f" else 1
    if len(kept_inputs) < need:
        return ValidationResult(valid=False, reason=reasons[0] if reasons else "no usable input")
    if task_type != "code_f":
        kept_inputs, outputs = kept_inputs[:1], outputs[:1]
    problem = Problem(
        task_type=task_type,
        program=proposal.program,
        inputs=tuple(kept_inputs),
        outputs=tuple(outputs),
        message=proposal.message,
        problem_id=problem_id(task_type, proposal.program, kept_inputs),
    )
    return ValidationResult(valid=True, reason="ok", problem=problem, metrics=complexity_metrics(problem.program))
