"""MBPP+ and LiveCodeBench judged through the real sandbox: canonical / gold solutions
pass, wrong ones fail; LiveCodeBench's private tests decode without running anything.

MBPP+ reads ../shared/data; LiveCodeBench (not in ../shared/data) reads the two-problem
fixture in its published code_generation_lite format (fixtures/livecodebench/test.jsonl).
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

from populora_core.evaluation.benchmarks import has_data, load_benchmark
from populora_core.evaluation.livecodebench import decode_private_tests, load_livecodebench
from populora_core.evaluation.pass_at_1 import judge_answers
from tests.core.evaluation.conftest import DATA, SWEEP, code_answer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# EvalPlus's special oracles, argument conversions, atol > 0, and the task without plus inputs
MBPP_PLUS_SAMPLE = {
    "Mbpp/2", "Mbpp/3", "Mbpp/4", "Mbpp/7", "Mbpp/63", "Mbpp/75", "Mbpp/82", "Mbpp/106", "Mbpp/111", "Mbpp/737",
    "Mbpp/124", "Mbpp/252", "Mbpp/259", "Mbpp/278", "Mbpp/787", "Mbpp/558", "Mbpp/580", "Mbpp/581", "Mbpp/722",
    "Mbpp/769", "Mbpp/793",
}  # fmt: skip


@pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")
def test_mbppplus_canonical_solutions_pass_and_wrong_ones_fail(eval_pool):
    items = load_benchmark("mbppplus", DATA)
    assert len(items) == 378
    by_id = {i.item_id: i for i in items}
    assert json.loads(by_id["Mbpp/793"].data["plus"]["inputs_json"]) == [[[1, 2, 3], 1], [[1, 1, 1, 2, 3, 4], 1], [[2, 2, 3, 3, 6, 8, 9], 3]]  # fmt: skip # noqa: E501
    sample = [by_id[t] for t in sorted(MBPP_PLUS_SAMPLE)]
    good = judge_answers(sample, [code_answer(i.data["plus"]["reference"]) for i in sample], eval_pool)
    failed = [(i.item_id, d) for i, (ok, d, _) in zip(sample, good, strict=True) if not ok]
    assert not failed, failed[:5]
    wrong = [code_answer(f"def {i.data['entry_point']}(*args, **kwargs):\n    return None") for i in sample]
    assert not any(v.correct for v in judge_answers(sample, wrong, eval_pool))
    assert judge_answers(sample[:2], ["no code"] * 2, eval_pool) == [(False, "no answer found", "no_code")] * 2


@pytest.mark.heavy  # every MBPP+ item, ~45 s
@pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")
@SWEEP
def test_every_mbppplus_canonical_solution_passes(every, eval_pool):
    items = load_benchmark("mbppplus", DATA)[::every]
    good = judge_answers(items, [code_answer(i.data["plus"]["reference"]) for i in items], eval_pool)
    failed = [(i.item_id, d) for i, (ok, d, _) in zip(items, good, strict=True) if not ok]
    assert not failed, failed[:5]


@pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")
def test_mbppplus_oracles_accept_what_evalplus_accepts(eval_pool):
    """A set-valued answer in another order, a float within atol, a truthy not-None answer."""
    by_id = {i.item_id: i for i in load_benchmark("mbppplus", DATA)}
    reordered = "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b), reverse=True))"
    rounded = "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3 * (1 + 1e-9)"
    off = "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3 * 1.01"
    items = [by_id["Mbpp/2"], by_id["Mbpp/82"], by_id["Mbpp/82"]]
    verdicts = judge_answers(items, [code_answer(c) for c in (reordered, rounded, off)], eval_pool)
    assert [v.correct for v in verdicts] == [True, True, False], verdicts


def _lcb_items():
    items = load_livecodebench(FIXTURES)
    return {i.data["platform"]: i for i in items}


STDIN_GOLD = (
    "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a))\nprint(sum(a) / n)",
    # whole input at once, a main guard, exit(): the output "2.0" equals "2.00" as Decimals
    "import sys\ndef main():\n    data = sys.stdin.read().split()\n    a = [int(x) for x in data[1:]]\n"
    "    print(sum(a))\n    print(f'{sum(a) / len(a):.2f}')\n    exit(0)\nif __name__ == '__main__':\n    main()",
    "data = open(0).read().split()\nprint(sum(map(int, data[1:])))\nprint(sum(map(int, data[1:])) / int(data[0]))",
    # the work in a thread (for its bigger stack): its output counts too
    "import threading\ndef main():\n    n = int(input())\n    a = [int(x) for x in input().split()]\n"
    "    print(sum(a), sum(a) / n, sep='\\n')\nthreading.Thread(target=main).start()",
)
FUNCTIONAL_GOLD = (
    "class Solution:\n    def addToAll(self, nums: List[int], k: int) -> List[int]:\n"
    "        return [x + k for x in nums]",
    "class Solution:\n    def addToAll(self, nums, k):\n        return tuple(x + k for x in nums)",
)


def test_livecodebench_fixture_loads_in_its_published_format():
    items = load_livecodebench(FIXTURES)
    assert [i.item_id for i in items] == ["fixture_abc000_a", "9001"]
    stdin, functional = items
    assert stdin.data["fn_name"] is None and functional.data["fn_name"] == "addToAll"
    # public tests first, then the private ones (zlib+pickle+base64 in one, plain JSON in the other)
    assert json.loads(stdin.data["tests_json"])[0] == ["3\n1 2 3\n", "6\n2.00\n"]
    assert len(json.loads(stdin.data["tests_json"])) == 3 and len(json.loads(functional.data["tests_json"])) == 3
    assert "class Solution" in functional.messages[-1]["content"] and "stdin" in stdin.messages[-1]["content"]
    assert not has_data("livecodebench", FIXTURES / "nowhere")
    with pytest.raises(FileNotFoundError, match="code_generation_lite"):
        load_benchmark("livecodebench", FIXTURES / "nowhere")


def test_livecodebench_gold_passes_and_wrong_fails(eval_pool):
    lcb = _lcb_items()
    stdin, functional = lcb["atcoder"], lcb["leetcode"]
    items = [stdin] * len(STDIN_GOLD) + [functional] * len(FUNCTIONAL_GOLD)
    verdicts = judge_answers(items, [code_answer(c) for c in STDIN_GOLD + FUNCTIONAL_GOLD], eval_pool)
    assert all(v.correct for v in verdicts), verdicts
    wrong = {
        "print(sum(map(int, open(0).read().split()[1:])))": stdin,  # the sum only
        "n = int(input())\nprint(6)\nprint('2.00')": stdin,  # right on the public test only
        "print('6 2.00')": stdin,
        "class Solution:\n    def addToAll(self, nums, k):\n        return [x + k + 1 for x in nums]": functional,
        "class Solution:\n    def addToAll(self, nums, k):\n        return nums if k == 4 else []": functional,
        "class Solution:\n    def other(self, nums, k):\n        return nums": functional,
    }
    verdicts = judge_answers(list(wrong.values()), [code_answer(c) for c in wrong], eval_pool)
    assert not any(v.correct for v in verdicts), verdicts
    assert judge_answers([stdin], ["no code"], eval_pool) == [(False, "no answer found", "no_code")]


def _packed(value) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


class _Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_livecodebench_private_tests_decode_without_running_code(capsys):
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_private_tests(json.dumps(tests)) == tests
    assert decode_private_tests(_packed(json.dumps(tests))) == tests
    with pytest.raises(pickle.UnpicklingError, match="refusing global"):
        decode_private_tests(_packed(_Payload()))
    with pytest.raises(ValueError, match="not a JSON string"):
        decode_private_tests(_packed(tests))  # a pickled list, not the published JSON string
    assert "must never run" not in capsys.readouterr().out
