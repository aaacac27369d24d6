"""AIME 2024/2025, AMC 2023, Minerva Math and OlympiadBench: every gold answer scores
100% and wrong answers 0% through the judging code `populora evaluate` uses (full sets;
math needs no sandbox), the published files' quirks, and the comparisons math-verify
makes for OlympiadBench's answer types and the published tolerances kept beside it.

Reads the public files from ../shared/data (never copied into the repository).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.pass_at_1 import judge_answers
from tests.core.evaluation.conftest import DATA

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")


def _boxed(answer: str) -> str:
    return f"Let me work it out step by step. ... So the answer is $\\boxed{{{answer}}}$."


def _score(items, completions) -> float:
    verdicts = judge_answers(items, completions, pool=None)  # text judges: no program runs
    return sum(v.correct for v in verdicts) / len(verdicts)


def _passed(items, answers: list[str]) -> list[bool]:
    return [v.correct for v in judge_answers(items, [_boxed(a) for a in answers], pool=None)]


def _gold_text(item) -> str:
    """The gold as a model would write it: AIME as a plain integer, AMC's float as an
    integer, Minerva's boxed solution text, OlympiadBench's final answers joined by commas."""
    gold = item.data["gold"]
    if item.benchmark in ("aime24", "aime25"):
        return str(int(gold.replace("^\\circ", "")))
    if item.benchmark == "amc23":
        return f"{gold:g}"
    return gold


@pytest.mark.parametrize(
    ("benchmark", "count"),
    [("aime24", 30), ("aime25", 30), ("amc23", 40), ("minerva_math", 272), ("olympiadbench", 675)],
)
def test_gold_answers_score_100_percent_and_wrong_ones_0(benchmark, count):
    items = load_benchmark(benchmark, DATA)
    assert len(items) == count and len({i.item_id for i in items}) == count
    assert _score(items, [_boxed(_gold_text(i)) for i in items]) == 1.0
    assert _score(items, [_boxed("-987654321.5") for _ in items]) == 0.0
    assert _score(items, [_boxed("x^{7}+\\frac{\\pi}{13}") for _ in items]) == 0.0
    assert _score(items, ["I could not finish."] * count) == 0.0  # no \boxed{}: no answer


def test_aime_answers_compare_as_integers():
    aime24 = {i.item_id: i for i in load_benchmark("aime24", DATA)}
    first = aime24["aime24/60"]  # Aya's walk: the published answer is the string "204"
    assert first.data["gold"] == "204"
    zero_padded = next(i for i in aime24.values() if i.data["gold"].startswith("0"))  # e.g. "025"
    value = int(zero_padded.data["gold"])
    answers = [str(value), zero_padded.data["gold"], f"{value}.0", f"{value}^\\circ", str(value + 1)]
    assert _passed([zero_padded] * 5, answers) == [True] * 4 + [False]


def test_aime25_degree_quirk():
    items = load_benchmark("aime25", DATA)
    quirk = [i for i in items if "^\\circ" in i.data["gold"]]
    assert [(i.item_id, i.data["gold"]) for i in quirk] == [("aime25/II-5", "336^\\circ")]
    answers = ["336", "336^\\circ", "336^{\\circ}", "336.", "335", "336 + 1"]
    assert _passed(quirk * 6, answers) == [True] * 4 + [False] * 2


def test_amc23_answers_compare_numerically():
    items = {i.item_id: i for i in load_benchmark("amc23", DATA)}
    first = items["amc23/0"]
    assert first.data["gold"] == 27.0
    answers = ["27", "27.0", "\\frac{54}{2}", "27.5", "28"]
    assert _passed([first] * 5, answers) == [True] * 3 + [False] * 2


def test_minerva_gold_is_the_last_boxed_answer_of_the_solution():
    first = load_benchmark("minerva_math", DATA)[0]
    assert first.data["gold"] == "1.6"  # "... =\boxed{1.6} \mathrm{~cm}"
    answers = ["1.6", "1.60", "1.6 \\text{ cm}", "\\frac{8}{5}", "1.7"]
    assert _passed([first] * 5, answers) == [True] * 4 + [False]


def _olympiad(item_id: str):
    return next(i for i in load_benchmark("olympiadbench", DATA) if i.item_id == item_id)


def test_olympiadbench_tuples_compare_element_wise_in_any_order():
    item = _olympiad("olympiadbench/1618")  # is_multiple_answer: three tuples
    assert item.data["gold"] == "(1,8,19), (2,7,13), (4,5,7)" and item.data["answer_type"] == "Tuple"
    good = ["(4,5,7),(1,8,19),(2,7,13)", "(1, 8, 19), (2, 7, 13), (4, 5, 7)", "(1,8,19),(2,7,13),(4,5,\\frac{14}{2})"]
    good += ["(1,8,19),(2,7,13),[4,5,7]"]  # math-verify reads a bracketed triple as the triple
    bad = ["(1,8,19),(2,7,13)", "(1,8,19),(2,7,13),(4,7,5)", "(1,8,19,2,7,13,4,5,7)"]
    assert _passed([item] * 7, good + bad) == [True] * 4 + [False] * 3


def test_olympiadbench_intervals_compare_by_brackets_and_endpoints():
    closed = _olympiad("olympiadbench/2410")
    assert closed.data["gold"] == "[\\frac{1}{2}, 8]" and closed.data["answer_type"] == "Interval"
    answers = ["[0.5, 8]", "\\left[\\frac12,8\\right]", "(\\frac{1}{2}, 8]", "[\\frac{1}{2}, 9]"]
    assert _passed([closed] * 4, answers) == [True, True, False, False]
    union = _olympiad("olympiadbench/2298")
    assert union.data["gold"] == "(-\\sqrt{11},-2)\\cup (\\sqrt{11},9)"
    answers = ["(-\\sqrt{11}, -2) \\cup (\\sqrt{11}, 9)", "(-11^{1/2},-2)\\cup(11^{1/2},9)", "(-\\sqrt{11},-2)"]
    assert _passed([union] * 3, answers) == [True, True, False]


def _equal(item, gold: str, answers: list[str]) -> list[bool]:
    item = replace(item, data=item.data | {"gold": gold})
    return _passed([item] * len(answers), answers)


def test_olympiadbench_expressions_by_value_and_multiple_answers_in_any_order():
    item = _olympiad("olympiadbench/1618")
    assert _equal(item, "2^{1009}", ["2^{1009}", "2^{1008}"]) == [True, False]
    assert _equal(item, "22+8 \\sqrt{6}", ["22+8\\sqrt6", "8\\sqrt{6}+22", "22+8\\sqrt{5}"]) == [True, True, False]
    assert _equal(item, "\\frac{1}{2 n+2}", ["\\frac{1}{2(n+1)}", "\\frac{1}{2n}"]) == [True, False]
    assert _equal(item, "69, 84", ["84, 69", "69", "69, 84, 1"]) == [True, False, False]


def test_published_tolerances_apply_to_plain_numbers():
    loose = _olympiad("olympiadbench/2592")  # the one record with an error bound: 1e-1
    assert loose.data["tol"] == 0.1 and loose.data["gold"] == "4.2"
    assert _equal(loose, "4.2", ["4.41", "5.1"]) == [True, False]
    minerva = load_benchmark("minerva_math", DATA)[0]  # Qwen2.5-Math's judge: 1e-4 relative
    assert _equal(minerva, "15625", ["15626", "15627.6", "\\frac{31250}{2}"]) == [True, False, True]
