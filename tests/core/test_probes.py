"""The probe set and drift: every probe's gold output is what the sandbox computes, and
drift counts the items whose greedy answer left the base's."""

from __future__ import annotations

import pandas as pd

from populora_core.inference.base import BASE
from populora_core.metrics.drift import drift_table
from populora_core.problems.probes import PROBE_PROBLEMS, probe_problems
from populora_core.problems.validation import outputs_equal
from populora_core.sandbox import Job


def test_every_probe_output_is_what_the_program_returns(local_pool):
    results = local_pool.run([Job(code=p.program, expr=f"f({p.inputs[0]}\n)", timeout_s=2.0) for p in PROBE_PROBLEMS])
    for problem, result in zip(PROBE_PROBLEMS, results, strict=True):
        assert result.status == "ok", result
        assert outputs_equal(problem.outputs[0], result.value), (problem.program, result.value)
    assert len({p.problem_id for p in PROBE_PROBLEMS}) == len(PROBE_PROBLEMS) == 16
    assert probe_problems(3) == list(PROBE_PROBLEMS[:3])


def test_drift_counts_items_whose_answer_differs_from_the_base():
    rows = [(BASE, "p1", "a", "correct"), (BASE, "p2", "b", "wrong")]
    rows += [("same", "p1", "a", "correct"), ("same", "p2", "b", "wrong")]
    rows += [("moved", "p1", "a", "correct"), ("moved", "p2", "c", "correct")]
    table = drift_table(pd.DataFrame(rows, columns=["adapter_id", "problem_id", "completion", "status"]))
    table = table.set_index("adapter_id")
    assert table.loc[BASE, "changed"] == table.loc["same", "changed"] == 0.0
    assert table.loc["moved", "changed"] == 0.5 and table.loc["moved", "pass_rate"] == 1.0
    assert table.loc["moved", "changed_n"] == 2 and 0 < table.loc["moved", "changed_low"] < 0.5
