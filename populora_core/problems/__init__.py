"""The three task types of code self-play: prompts, parsers, validation, checking."""

from __future__ import annotations

from populora_core.problems.checking import check_answers
from populora_core.problems.parsing import extract_answer, parse_answer, parse_proposal
from populora_core.problems.prompts import ASSISTANT_PREFILL, STOP_STRINGS, student_prompt, teacher_prompt
from populora_core.problems.rows import problem_row, row_problem, seed_buffers
from populora_core.problems.types import (
    SEED_PROBLEM,
    SEED_PROBLEMS,
    TASK_TYPES,
    CheckResult,
    FormatError,
    Problem,
    Proposal,
    TaskType,
    ValidationResult,
    problem_id,
)
from populora_core.problems.validation import badly_formatted, outputs_equal, validate_proposals

__all__ = [
    "ASSISTANT_PREFILL",
    "SEED_PROBLEM",
    "SEED_PROBLEMS",
    "STOP_STRINGS",
    "TASK_TYPES",
    "CheckResult",
    "FormatError",
    "Problem",
    "Proposal",
    "TaskType",
    "ValidationResult",
    "badly_formatted",
    "check_answers",
    "extract_answer",
    "outputs_equal",
    "parse_answer",
    "parse_proposal",
    "problem_id",
    "problem_row",
    "row_problem",
    "seed_buffers",
    "student_prompt",
    "teacher_prompt",
    "validate_proposals",
]
