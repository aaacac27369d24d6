"""MATH-500 judged by math-verify in its worker process (evaluation/mathverify.py): equal
answers the normalised-string comparison missed are accepted, wrong ones are not, model text
is never evaluated, and a worker that does not answer in time is replaced."""

from __future__ import annotations

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.mathverify import MathVerifier
from populora_core.evaluation.pass_at_1 import judge_answers
from tests.core.evaluation.conftest import DATA

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")


@pytest.fixture(scope="module")
def math500():
    return {i.data["gold"]: i for i in load_benchmark("math500", DATA)}


def test_equal_numbers_written_otherwise_are_accepted_and_near_misses_are_not(math500):
    cases = [("9", "9.0", True), ("2220", "2,220", True), ("\\frac{3}{2}", "1.5", True), ("\\frac{3}{2}", "3/2", True)]
    cases += [("9", "10", False), ("\\frac{3}{2}", "\\frac{4}{2}", False), ("2220", "2,221", False)]
    items = [math500[g] for g, _, _ in cases]
    verdicts = judge_answers(items, [f"So the answer is $\\boxed{{{a}}}$." for _, a, _ in cases], pool=None)
    assert [v.correct for v in verdicts] == [t for _, _, t in cases]


def test_model_text_is_never_evaluated(math500, tmp_path):
    marker = tmp_path / "ran"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    item = math500["9"]
    verdicts = judge_answers([item] * 2, [f"The answer is {payload}", f"$\\boxed{{{payload}}}$"], pool=None)
    assert [v.correct for v in verdicts] == [False, False] and not marker.exists()


def test_a_worker_that_does_not_answer_in_time_is_replaced_and_unreadable_answers_get_no_verdict():
    slow = MathVerifier(timeout_s=0.0)  # no time to answer at all
    try:
        assert slow.equal("$9$", "$\\boxed{9}$") is None and slow._proc is None  # killed
        slow.timeout_s = 60.0
        assert slow.equal("$9$", "$\\boxed{9.0}$") is True  # a fresh worker
        assert slow.equal("$9$", "no number here at all") is None  # nothing read: the fallback decides
    finally:
        slow.close()
