"""Measures of self-play dynamics (docs/evaluation.md#analysis-populora-analyze): is a run
collapsing onto trivial programs (``triviality``), or oscillating in an arms race
(``oscillation``)?"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pandas as pd

from populora_core.metrics.complexity import parse

TRIVIAL_DEPTH = 6
"""Programs whose AST depth is at most this are counted as trivial (``def f(x): return x * 3``)."""

ProgramKind = Literal["identity", "constant", "other", "unparsed"]


def program_kind(source: str, name: str = "f") -> ProgramKind:
    """``identity`` when ``name`` only returns one of its arguments, ``constant`` when it only
    returns an expression that reads none of them, else ``other``."""
    tree = parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None) if tree else None
    if fn is None:
        return "unparsed"
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]  # docstrings
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return "other"
    value = body[0].value
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
    params |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    if isinstance(value, ast.Name) and value.id in params:
        return "identity"
    reads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} if value is not None else set()
    has_call = value is not None and any(isinstance(n, ast.Call) for n in ast.walk(value))
    return "constant" if not (reads & params) and not has_call else "other"


def _value(text: str) -> object:
    try:
        return ("ok", ast.literal_eval(text))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ("text", text.strip())


def output_is_input(inputs: Sequence[str], outputs: Sequence[str]) -> bool:
    """Whether some gold output equals its input (compared as Python literals where they parse)."""
    return any(_value(i) == _value(o) for i, o in zip(inputs, outputs, strict=False))


def trivial_flags(programs: Sequence[str], depths: Sequence[float]) -> dict[str, np.ndarray]:
    """Per program, boolean arrays: ``identity`` and ``constant`` (``program_kind``), and
    ``shallow`` (AST depth at most ``TRIVIAL_DEPTH``)."""
    kinds = [program_kind(p) for p in programs]
    return {
        "identity": np.array([k == "identity" for k in kinds], dtype=bool),
        "constant": np.array([k == "constant" for k in kinds], dtype=bool),
        "shallow": np.asarray(depths, dtype=float) <= TRIVIAL_DEPTH,
    }


def triviality(
    programs: Sequence[str], inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]], depths: Sequence[float]
) -> dict[str, float]:
    """Shares of ``programs`` (valid ones, one row each) that are identities or constants, whose
    gold output equals their input, of AST depth at most ``TRIVIAL_DEPTH``, and distinct programs
    per program (a collapsing single agent drives the shares up and the last down); NaN when empty."""
    n = len(programs)
    if n == 0:
        return dict.fromkeys(("identity", "constant", "output_is_input", "shallow", "distinct"), float("nan"))
    flags = trivial_flags(programs, depths)
    return {
        "identity": float(flags["identity"].mean()),
        "constant": float(flags["constant"].mean()),
        "output_is_input": sum(output_is_input(i, o) for i, o in zip(inputs, outputs, strict=True)) / n,
        "shallow": float(flags["shallow"].mean()),
        "distinct": len(set(programs)) / n,
    }


def oscillation(series: Sequence[float]) -> dict[str, float]:
    """Reversals per step, detrended std and lag-1 autocorrelation of ``series`` (NaNs dropped)."""
    y = np.asarray([v for v in series if v == v], dtype=float)
    out = {"reversals": float("nan"), "detrended_std": float("nan"), "lag1_autocorr": float("nan")}
    if len(y) < 3:
        return out
    steps = np.sign(np.diff(y))
    steps = steps[steps != 0]
    out["reversals"] = float(np.sum(steps[1:] != steps[:-1]) / max(1, len(steps) - 1))  # 0.0 for one step or none
    x = np.arange(len(y), dtype=float)
    residual = y - np.polyval(np.polyfit(x, y, 1), x)
    out["detrended_std"] = float(residual.std())
    a, b = residual[:-1], residual[1:]
    if a.std() > 1e-12 and b.std() > 1e-12:
        out["lag1_autocorr"] = float(np.corrcoef(a, b)[0, 1])
    return out


def solve_rates_by_source(problems: pd.DataFrame, verdicts: pd.DataFrame) -> dict[str, float]:
    """One generation's solve rate on its **fresh** problems (this generation's valid
    proposals) and on the buffer/seed top-ups, the solutions behind each, and the mean
    solve rate ρ per fresh problem (NaN where there is none)."""
    valid = problems.loc[problems["valid"], ["teacher_id", "problem_id", "source"]].drop_duplicates(
        ["teacher_id", "problem_id"]
    )
    judged = verdicts.merge(valid, on=["teacher_id", "problem_id"], how="left")
    correct = judged["status"] == "correct"
    fresh = judged["source"] == "fresh"
    per_problem = correct[fresh].groupby([judged.loc[fresh, "teacher_id"], judged.loc[fresh, "problem_id"]]).mean()
    return {  # the mean of no rows is NaN
        "fresh_solve_rate": float(correct[fresh].mean()),
        "topup_solve_rate": float(correct[~fresh].mean()),
        "fresh_solutions": int(fresh.sum()),
        "topup_solutions": int((~fresh).sum()),
        "fresh_rho_mean": float(per_problem.mean()),
    }


def problem_triviality(problems: pd.DataFrame) -> dict[str, float]:
    """``triviality`` of a generation's valid fresh problems."""
    valid = problems[(problems["source"] == "fresh") & problems["valid"]]
    return triviality(
        list(valid["program"]),
        [list(i) for i in valid["inputs"]],
        [list(o) for o in valid["outputs"]],
        list(valid["ast_depth"]),
    )
