"""Answer checking: a student's completion against a validated problem.

Verdicts: ``format_error`` when the completion lacks the answer structure
(no answer tag, no required block); otherwise ``correct`` or ``wrong``.

- ``code_o``: the predicted output is parsed with ``ast.literal_eval`` (no code
  runs) and compared with the gold value.
- ``code_i``: ``f(<answer>)`` runs in the sandbox; correct when its value
  equals the gold output.
- ``code_f``: the student's program runs in the sandbox on every hidden input;
  correct when all values equal the gold outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from populora_core.config import ProblemsConfig
from populora_core.problems.parsing import check_call_arguments, parse_answer
from populora_core.problems.static import check_expression, check_program
from populora_core.problems.types import CheckResult, FormatError, Problem
from populora_core.problems.validation import literal_value, outputs_equal
from populora_core.sandbox import Job, Result, SandboxPool

_STATUS_ORDER = ("sandbox_failure", "timeout", "memory", "output_limit", "error", "ok")


def _worst(results: Sequence[Result]) -> str:
    statuses = {r.status for r in results}
    return next((s for s in _STATUS_ORDER if s in statuses), "none")


def _plan(problem: Problem, answer: str, config: ProblemsConfig) -> CheckResult | list[Job]:
    """Either a verdict reached without running anything, or the jobs to run."""
    if len(answer) > config.answer_max_chars:
        return CheckResult("wrong", f"answer longer than {config.answer_max_chars} characters")
    if problem.task_type == "code_o":
        if not literal_value(answer)[0]:
            return CheckResult("wrong", "prediction is not a Python literal")
        return CheckResult("correct" if outputs_equal(problem.outputs[0], answer) else "wrong")
    if problem.task_type == "code_i":
        reason = check_call_arguments(answer) or check_expression(answer, config)
        if reason:
            return CheckResult("wrong", reason)
        return [Job(code=problem.program, expr=f"f({answer}\n)")]  # the sandbox's time limit
    reason = check_program(answer, config)
    if reason:
        return CheckResult("wrong", reason)
    return [Job(code=answer, expr=f"f({inp}\n)") for inp, _ in problem.hidden]


def _judge(problem: Problem, results: Sequence[Result]) -> CheckResult:
    golds = [problem.outputs[0]] if problem.task_type == "code_i" else [out for _, out in problem.hidden]
    seconds = sum(r.seconds for r in results)
    status = _worst(results)
    for gold, result in zip(golds, results, strict=True):
        if result.status != "ok":
            return CheckResult("wrong", f"{result.status}: {(result.error or '')[:120]}", status, seconds)
        if result.value is None or not outputs_equal(gold, result.value):
            return CheckResult("wrong", "value differs from the gold output", status, seconds)
    return CheckResult("correct", "", status, seconds)


def check_answers(
    items: Sequence[tuple[Problem, str]],
    pool: SandboxPool,
    config: ProblemsConfig,
) -> list[CheckResult]:
    """Judges each (problem, student completion); one batch to the sandbox."""
    plans: list[CheckResult | tuple[int, int]] = []
    jobs: list[Job] = []
    for problem, completion in items:
        answer = parse_answer(problem.task_type, completion)
        if isinstance(answer, FormatError):
            plans.append(CheckResult("format_error", answer.reason))
            continue
        plan = _plan(problem, answer, config)
        if isinstance(plan, CheckResult):
            plans.append(plan)
        else:
            plans.append((len(jobs), len(plan)))
            jobs += plan
    results = pool.run(jobs) if jobs else []
    return [
        plan if isinstance(plan, CheckResult) else _judge(problem, results[plan[0] : plan[0] + plan[1]])
        for (problem, _), plan in zip(items, plans, strict=True)
    ]
