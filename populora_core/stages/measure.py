"""Measure: the buffers carried to the next generation, and the generation's figures
(per teacher and overall: validity, paired solve rate, complexity, CVT coverage)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from populora_core.config import RunConfig
from populora_core.metrics.complexity import METRIC_NAMES
from populora_core.metrics.coverage import coverage
from populora_core.population.adapters import Member
from populora_core.population.replacement import is_hall_entry
from populora_core.rundir.artifacts import columns
from populora_core.stages.play import teachers


def measure(
    *,
    start_buffers: pd.DataFrame,
    problems: pd.DataFrame,
    verdicts: pd.DataFrame,
    lineage: pd.DataFrame,
    next_members: Sequence[Member],
    earlier_cells: pd.DataFrame,
    config: RunConfig,
    generation: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the next generation's buffers, this generation's coverage table)."""
    carried = next_buffers(start_buffers, problems, lineage, next_members, config, generation)
    return carried, summarize(problems, verdicts, earlier_cells, config.coverage.cells)


def next_buffers(
    buffers: pd.DataFrame,
    problems: pd.DataFrame,
    lineage: pd.DataFrame,
    next_members: Sequence[Member],
    config: RunConfig,
    generation: int,
) -> pd.DataFrame:
    """Each teacher's buffer after this generation: its fresh valid problems appended
    (newest kept, at most ``budget.buffer_size``); a child teacher starts from the buffer of
    its first parent that is a member (not a hall-of-fame entry, ``<id>@g<generation>``)."""
    fresh = problems[(problems["source"] == "fresh") & problems["valid"]]
    added = fresh[["teacher_id", *[c for c in columns("buffers") if c not in ("teacher_id", "added_generation")]]]
    frame = pd.concat([buffers, added.assign(added_generation=generation)], ignore_index=True)
    frame = frame.drop_duplicates(["teacher_id", "problem_id"], keep="last")
    parents = {r.child_id: next(p for p in r.parents if not is_hall_entry(p)) for r in lineage.itertuples(index=False)}
    parts = []
    for m in teachers(next_members):
        src = parents.get(m.adapter_id, m.adapter_id)
        part = frame[frame["teacher_id"] == src].tail(config.budget.buffer_size)
        parts.append(part.assign(teacher_id=m.adapter_id))
    return pd.concat(parts, ignore_index=True)[columns("buffers")] if parts else frame.iloc[:0]


def summarize(
    problems: pd.DataFrame, verdicts: pd.DataFrame, earlier_cells: pd.DataFrame, cells_total: int
) -> pd.DataFrame:
    """Per teacher and overall ("*"): proposals, valid rate, paired solve rate, complexity
    means, and CVT coverage: this generation's fresh valid problems, and cumulative with
    ``earlier_cells`` (teacher_id, cvt_cell of the valid fresh problems of earlier generations)."""
    fresh = problems[problems["source"] == "fresh"]
    so_far = pd.concat([earlier_cells, fresh.loc[fresh["valid"], ["teacher_id", "cvt_cell"]]], ignore_index=True)
    solved = verdicts.assign(correct=verdicts["status"] == "correct")
    rows = []
    for teacher_id, part in [*fresh.groupby("teacher_id", sort=True), ("*", fresh)]:
        valid = part[part["valid"]]
        s = solved if teacher_id == "*" else solved[solved["teacher_id"] == teacher_id]
        mine = so_far if teacher_id == "*" else so_far[so_far["teacher_id"] == teacher_id]
        rows.append(
            {
                "teacher_id": teacher_id,
                "proposals": len(part),
                "valid": len(valid),
                "valid_rate": len(valid) / len(part) if len(part) else float("nan"),
                "solve_rate": float(s["correct"].mean()) if len(s) else float("nan"),
                **{k: float(valid[k].mean()) if len(valid) else float("nan") for k in METRIC_NAMES},
                "cells": len(set(valid["cvt_cell"])),
                "coverage": coverage(valid["cvt_cell"], cells_total),
                "cumulative_coverage": coverage(mine["cvt_cell"], cells_total),
            }
        )
    return pd.DataFrame(rows, columns=columns("coverage"))
