"""Problems as table rows (the ``problems`` and ``buffers`` artifacts) and back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from populora_core.problems.types import SEED_PROBLEMS, Problem


def problem_row(problem: Problem) -> dict:
    """The problem columns shared by ``problems`` and ``buffers``."""
    return {
        "problem_id": problem.problem_id,
        "task_type": problem.task_type,
        "program": problem.program,
        "inputs": list(problem.inputs),
        "outputs": list(problem.outputs),
        "message": problem.message,
    }


def row_problem(row: Any) -> Problem:
    """A ``Problem`` from a row (a namedtuple of ``itertuples``) holding ``problem_row``'s columns."""
    return Problem(
        task_type=row.task_type,
        program=row.program,
        inputs=tuple(row.inputs),
        outputs=tuple(row.outputs),
        message=row.message or "",
        problem_id=row.problem_id,
    )


def seed_buffers(teacher_ids: Sequence[str]) -> pd.DataFrame:
    """Generation 0's buffers: the seed problems, for every teacher."""
    rows = [{"teacher_id": t, **problem_row(p), "added_generation": -1} for t in teacher_ids for p in SEED_PROBLEMS]
    return pd.DataFrame(rows)
