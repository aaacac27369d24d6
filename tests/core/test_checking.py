"""Answer checking for each task type and each verdict."""

from __future__ import annotations

from populora_core.problems import Problem, check_answers, outputs_equal

DEDUCTION = Problem("code_o", "def f(s):\n    return s[::-1]", ('"abc"',), ("'cba'",))
ABDUCTION = Problem("code_i", "def f(xs):\n    return sorted(xs)[:2]", ("[5, 1, 3]",), ("[1, 3]",))
INDUCTION = Problem("code_f", "def f(n):\n    return n * 2", ("1", "2", "3", "4"), ("2", "4", "6", "8"), "doubles")


def verdicts(pool, config, pairs):
    return [c.verdict for c in check_answers(pairs, pool, config)]


def test_deduction(local_pool, problems_config):
    pairs = [
        (DEDUCTION, "<think>reverse</think><answer>'cba'</answer>"),
        (DEDUCTION, '<answer>```output\n"cba"\n```</answer>'),
        (DEDUCTION, "<answer>'abc'</answer>"),
        (DEDUCTION, "<answer>__import__('os').system('id')</answer>"),
        (DEDUCTION, "the answer is cba"),
    ]
    assert verdicts(local_pool, problems_config, pairs) == ["correct", "correct", "wrong", "wrong", "format_error"]


def test_abduction_runs_the_answer_in_the_sandbox(local_pool, problems_config):
    pairs = [
        (ABDUCTION, "<answer>```input\n[3, 1]\n```</answer>"),
        (ABDUCTION, "<answer>```input\n[9, 9, 1, 3]\n```</answer>"),
        (ABDUCTION, "<answer>```input\n[1, 2]\n```</answer>"),
        (ABDUCTION, "<answer>```input\n[1, 3]), print((1\n```</answer>"),
        (ABDUCTION, "<answer>```input\n__import__('os').getcwd()\n```</answer>"),
        (ABDUCTION, "<answer></answer>"),
    ]
    results = check_answers(pairs, local_pool, problems_config)
    assert [r.verdict for r in results] == ["correct", "correct", "wrong", "wrong", "wrong", "format_error"]
    assert results[0].sandbox_status == "ok" and results[0].seconds > 0


def test_induction_is_checked_on_hidden_pairs(local_pool, problems_config):
    pairs = [
        (INDUCTION, "<answer>```python\ndef f(n):\n    return n + n\n```</answer>"),
        # right on the shown pairs only
        (INDUCTION, "<answer>```python\ndef f(n):\n    return {1: 2, 2: 4}.get(n, 0)\n```</answer>"),
        (INDUCTION, "<answer>```python\ndef f(n):\n    while True:\n        pass\n```</answer>"),
        (INDUCTION, "<answer>```python\nimport os\ndef f(n):\n    return n * 2\n```</answer>"),
        (INDUCTION, "<answer>def f(n): return n * 2</answer>"),
    ]
    results = check_answers(pairs, local_pool, problems_config)
    assert [r.verdict for r in results] == ["correct", "wrong", "wrong", "wrong", "format_error"]
    assert results[2].sandbox_status == "timeout"


def test_outputs_compare_as_values():
    assert outputs_equal("{'b', 'a'}", "{'a', 'b'}")
    assert outputs_equal("(1, 2)", "(1,2)")
    assert not outputs_equal("[1, 2]", "(1, 2)")
    assert not outputs_equal("'1'", "1")
    assert not outputs_equal("1", "[" * 10000 + "]" * 10000)
