"""Parsers are total: any text gives a value or a typed FormatError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populora_core.problems import FormatError, Proposal, parse_answer, parse_proposal
from populora_core.problems.parsing import MAX_COMPLETION_CHARS, check_call_arguments, extract_answer, fenced_blocks
from populora_core.problems.types import TASK_TYPES

TOKENS = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "```",
        "```python\n",
        "```input\n",
        "```message\n",
        "\n",
        "def f(x):",
        " ",
        "\x00",
        "\udcff",
    ]
)
ADVERSARIAL = st.lists(st.one_of(TOKENS, st.text(max_size=20)), max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(), ADVERSARIAL, st.binary().map(lambda b: b.decode("latin-1"))))
def test_parsers_never_raise(text):
    for task_type in TASK_TYPES:
        proposal = parse_proposal(task_type, text)
        assert isinstance(proposal, Proposal | FormatError)
        answer = parse_answer(task_type, text)
        assert isinstance(answer, str | FormatError)
    assert isinstance(extract_answer(text), str | FormatError)
    assert isinstance(fenced_blocks(text), list)
    assert check_call_arguments(text) is None or isinstance(check_call_arguments(text), str)


@pytest.mark.parametrize("value", [None, b"<answer>1</answer>", 42, ["<answer>"]])
def test_non_text_is_a_format_error(value):
    assert parse_answer("code_o", value) == FormatError("not_text", type(value).__name__)


def test_huge_and_empty_completions():
    assert parse_proposal("code_o", "x" * (MAX_COMPLETION_CHARS + 1)).reason == "too_long"
    assert parse_proposal("code_o", "").reason == "empty"
    assert parse_proposal("code_o", "  \n").reason == "empty"
    assert parse_answer("code_o", "<answer>   </answer>").reason == "empty_answer"


GOOD_O = (
    '<think>reverse</think>\n<answer>\n```python\ndef f(s):\n    return s[::-1]\n```\n```input\n"abc"\n```\n</answer>'
)


def test_good_proposals_for_each_type():
    assert parse_proposal("code_o", GOOD_O) == Proposal(program="def f(s):\n    return s[::-1]", inputs=('"abc"',))
    assert parse_proposal("code_i", GOOD_O).inputs == ('"abc"',)
    induction = (
        "<answer>\n```python\ndef f(n):\n    return n + 1\n```\n```input\n1\n```\n```input\n2\n```\n"
        "```input\n3\n```\n```message\nadd one\n```\n</answer>"
    )
    parsed = parse_proposal("code_f", induction)
    assert parsed.inputs == ("1", "2", "3") and parsed.message == "add one"


def test_cut_off_stop_string_and_several_answers():
    # generation stopped at "</answer>" and the stop string was stripped
    assert parse_proposal("code_o", GOOD_O.removesuffix("</answer>")).program.startswith("def f(s)")
    # several answers: the last one counts
    assert parse_answer("code_o", "<answer>1</answer> on second thought <answer>2</answer>") == "2"
    # an unterminated fence runs to the end of the answer
    assert parse_proposal("code_o", "<answer>```python\ndef f(x):\n    return x\n```\n```input\n5").inputs == ("5",)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("def f(x): return x", "no_answer"),
        ("<answer>def f(x): return x</answer>", "no_code_block"),
        ("<answer>```python\ndef f(x):\n    return x\n```</answer>", "no_input_block"),
        ("<answer>```python\n\n```\n```input\n1\n```</answer>", "no_code_block"),
    ],
)
def test_bad_proposals(text, reason):
    result = parse_proposal("code_o", text)
    assert isinstance(result, FormatError) and result.reason == reason


def test_student_answers_for_each_type():
    assert parse_answer("code_o", "<answer>```output\n[1, 2]\n```</answer>") == "[1, 2]"
    assert parse_answer("code_o", "<answer>'abc'</answer>") == "'abc'"
    assert parse_answer("code_i", "<answer>```input\n'a', 2\n```</answer>") == "'a', 2"
    assert parse_answer("code_f", "<answer>```python\ndef f(x):\n    return x\n```</answer>").startswith("def f")
    assert parse_answer("code_f", "<answer>def f(x): return x</answer>").reason == "no_code_block"


@pytest.mark.parametrize(
    ("arguments", "ok"),
    [("1, 2", True), ("'a', k=3", True), ("[1, 2], *xs", True), ("1), print(2", False), ("", False), ("1)\n(2", False)],
)
def test_call_arguments_cannot_escape_the_call(arguments, ok):
    assert (check_call_arguments(arguments) is None) is ok
