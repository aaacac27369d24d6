"""Every judged answer gets the class of why it failed (evaluation/failures.py), decided by
the judge through the real sandbox; the verdict itself is the judge's, unchanged.

Reads the public HumanEval+, MBPP+ and CRUXEval files from ../shared/data.
"""

from __future__ import annotations

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.failures import CODE, FORMAT, unfenced_code
from populora_core.evaluation.items import EvalItem
from populora_core.evaluation.pass_at_1 import judge_answers
from tests.core.evaluation.conftest import DATA, code_answer

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")

CLOSE = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])"
RIGHT = f"def has_close_elements(numbers, threshold):\n{CLOSE}"
# HumanEval/0's base tests use lists of 5-6 numbers; its plus inputs include longer ones
PLUS_WRONG = (
    "def has_close_elements(numbers, threshold):\n"
    "    right = any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
    "    return right if len(numbers) <= 6 else not right"
)
HUMANEVAL_CASES = {
    "passed": (code_answer(RIGHT), "stop"),
    "passed, a body only": (f"```python\n{CLOSE}\n```", "eos"),
    "no_code": ("I would compare every pair of numbers.", "eos"),
    "other_wrapper": (f"<think>pairs</think>\n<answer>\n{RIGHT}\n</answer>", "stop"),
    "other_wrapper, unfenced": (f"Here is the function:\n\n{RIGHT}\n\nIt compares every pair.", "eos"),
    "truncated": ("```python\ndef has_close_elements(numbers, threshold):\n    return any(abs(a - b) <", "length"),
    "truncated, no block": ("Let me think about every pair of numbers and", "length"),
    "syntax_error": (code_answer("def has_close_elements(numbers, threshold)\n    return True"), "eos"),
    "signature": (code_answer(f"def close_elements(numbers, threshold):\n{CLOSE}"), "eos"),
    "signature, arity": (code_answer(f"def has_close_elements(numbers):\n    threshold = 0.5\n{CLOSE}"), "eos"),
    "wrong_base": (code_answer("def has_close_elements(numbers, threshold):\n    return False"), "eos"),
    "wrong_plus": (code_answer(PLUS_WRONG), "eos"),
    "runtime_error": (code_answer("def has_close_elements(numbers, threshold):\n    return numbers[99]"), "eos"),
}


def _classes(items: list[EvalItem], cases: dict[str, tuple[str, str]], pool) -> dict[str, str]:
    verdicts = judge_answers(items, [c for c, _ in cases.values()], pool, finish_reasons=[f for _, f in cases.values()])
    return {name: v.failure for name, v in zip(cases, verdicts, strict=True)}


def test_every_humanevalplus_failure_gets_its_class(eval_pool):
    item = next(i for i in load_benchmark("humanevalplus", DATA) if i.item_id == "HumanEval/0")
    items = [item] * len(HUMANEVAL_CASES)
    got = _classes(items, HUMANEVAL_CASES, eval_pool)
    assert got == {name: name.split(",")[0] for name in HUMANEVAL_CASES}
    # the classes say why; the verdicts are the judge's own
    completions = [c for c, _ in HUMANEVAL_CASES.values()]
    verdicts = judge_answers(items, completions, eval_pool)
    assert [v.correct for v in verdicts] == [n.startswith("passed") for n in HUMANEVAL_CASES]


def test_mbppplus_and_cruxeval_failures_get_their_classes(eval_pool):
    mbpp = next(i for i in load_benchmark("mbppplus", DATA) if i.item_id == "Mbpp/2")
    right = "def similar_elements(a, b):\n    return tuple(set(a) & set(b))"
    mbpp_cases = {
        "passed": (code_answer(right), "eos"),
        # base inputs hold 4 elements each; the plus inputs longer ones
        "wrong_plus": (code_answer(right.replace("return", "return () if len(a) > 4 else")), "eos"),
        "wrong_base": (code_answer("def similar_elements(a, b):\n    return (0,)"), "eos"),
        "signature": (code_answer("def shared(a, b):\n    return tuple(set(a) & set(b))"), "eos"),
        # MBPP+ has no separate base test: every input runs under EvalPlus's per-input limit (1 s)
        "timeout": (code_answer("def similar_elements(a, b):\n    while True:\n        pass"), "eos"),
    }
    assert _classes([mbpp] * len(mbpp_cases), mbpp_cases, eval_pool) == {n: n for n in mbpp_cases}
    crux = load_benchmark("cruxeval_o", DATA)[0]
    gold = crux.data["output"]
    crux_cases = {
        "passed": (f"```output\n{gold}\n```", "eos"),
        "passed, in answer tags": (f"<answer>{gold}</answer>", "stop"),
        "wrong_base": ("```output\n'certainly not this'\n```", "eos"),
        "syntax_error": ("```output\n[1, 2\n```", "eos"),
        "no_code": ("The function returns a list.", "eos"),
        "truncated": ("The function first loops over", "length"),
    }
    assert _classes([crux] * len(crux_cases), crux_cases, eval_pool) == {n: n.split(",")[0] for n in crux_cases}


def test_math_failures_get_their_classes():
    aime = load_benchmark("aime24", DATA)[0]
    gsm = load_benchmark("gsm8k", DATA)[0]
    gold = aime.data["gold"]
    cases = [
        (aime, f"So \\boxed{{{gold}}}.", "eos", "passed"),
        (aime, "So the answer is 12.", "eos", "no_final_answer"),
        (aime, "First, we expand the product and", "length", "truncated"),
        (aime, "So \\boxed{the number of ways}.", "eos", "unparsed"),
        (aime, f"So \\boxed{{{int(gold) + 1}}}.", "eos", "wrong"),
        (gsm, f"#### {gsm.data['gold']}", "eos", "passed"),
        (gsm, "#### many", "eos", "unparsed"),
        (gsm, "The answer is 3.", "eos", "wrong"),  # no ####: the judge reads the last number
        (gsm, "I cannot tell.", "eos", "no_final_answer"),
        (gsm, "#### 123456789", "eos", "wrong"),
    ]
    verdicts = judge_answers([c[0] for c in cases], [c[1] for c in cases], None, finish_reasons=[c[2] for c in cases])
    assert [v.failure for v in verdicts] == [c[3] for c in cases]


def test_format_and_code_classes_split_every_failure():
    from populora_core.evaluation.failures import CLASSES

    assert set(FORMAT) | set(CODE) | {"passed", "sandbox_failure"} == set(CLASSES)
    assert not set(FORMAT) & set(CODE)


def test_unfenced_code_finds_a_function_in_prose_and_nothing_in_prose_alone():
    assert unfenced_code("Sure!\ndef f(x):\n    return x + 1\nThis adds one.")
    assert unfenced_code("<answer>\ndef f(x):\n    return x\n</answer>")
    assert not unfenced_code("def is a keyword, and I would use it for f.")
    assert not unfenced_code("Just add one to x.")
