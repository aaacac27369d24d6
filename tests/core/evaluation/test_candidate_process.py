"""The candidate in a process of its own (harness/candidate.py): values cross as plain data,
objects stay behind as handles, exceptions and time limits cross by name, messages name no
callable; and through the real sandbox, no answer of any code benchmark passes by forging its
verdict or by returning an object equal to everything (both passed before: the answer ran in
the process that writes the verdict)."""

from __future__ import annotations

import io
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest

import populora_core.harness.candidate as cp
from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.code_suites import _mbpp_judge_part
from populora_core.evaluation.harness_calls import program_prelude
from populora_core.evaluation.livecodebench import load_livecodebench
from populora_core.evaluation.pass_at_1 import judge_answers
from populora_core.harness.wire import Unpickler
from populora_core.sandbox.base import WORKER_FLAGS
from tests.core.evaluation.conftest import DATA, code_answer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]

CANDIDATE = """
import collections, enum, os
class Color(enum.IntEnum):
    RED = 1
Point = collections.namedtuple("Point", "x y")
class Shout(str):
    def __eq__(self, other):
        return True
class Equal:
    def __eq__(self, other):
        return True
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b
class Custom(Exception):
    pass
def values():
    return [float("nan"), 10**5000, 3 - 4j, range(2, 9, 3), b"\\x00b", bytearray(b"a"), {(1, 2): {3}},
            frozenset({4}), True, None, -0.0]
def subclasses():
    return collections.OrderedDict(a=1), collections.Counter("aa"), Point(1, 2), Shout("x"), Color.RED
def equal():
    return Equal()
def total(pairs):
    return sum(p.a + p.b for p in pairs)
def fail(kind):
    raise {"value": ValueError("bad value"), "custom": Custom("mine")}[kind]
def spin():
    while True:
        pass
def descriptors():
    return sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
def lazy(n):
    return (i * i for i in range(n))
def exact(n):
    import fractions
    return fractions.Fraction(n, 3)
def annotated(xs: List[int]) -> Optional[int]:  # noqa: F821 - names postponed, as in the worker
    return max(xs, default=None)
def stop():
    raise StopIteration
class Drifting:
    calls = 0
    def __float__(self):
        Drifting.calls += 1
        return float(Drifting.calls)
class AllIn:
    def __contains__(self, item):
        return True
    def __iter__(self):
        return iter([])
class Seq:
    def __getitem__(self, key):
        return list(range(10))[key]
def make(kind):
    return {"drifting": Drifting, "all_in": AllIn, "seq": Seq}[kind]()
def endless():
    import time
    while True:
        time.sleep(0.01)
        yield 1
def stubborn(seconds):
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(end - time.monotonic())
        except BaseException:
            pass
"""


@pytest.fixture(scope="module")
def candidate():
    process = cp.CandidateProcess(CANDIDATE)
    yield process
    process.close()


def test_values_cross_as_the_builtin_values_they_are(candidate):
    got = candidate.function("values")()
    assert math.isnan(got[0])
    assert got[1:] == [10**5000, 3 - 4j, range(2, 9, 3), b"\x00b", bytearray(b"a"), {(1, 2): {3}}, frozenset({4}), True, None, -0.0]  # fmt: skip # noqa: E501
    assert [type(v) for v in got[2:7]] == [complex, range, bytes, bytearray, dict]
    assert math.copysign(1, got[-1]) == -1


def test_a_subclass_crosses_as_its_base_type_and_leaves_its_eq_behind(candidate):
    ordered, counter, point, shout, red = candidate.function("subclasses")()
    assert (type(ordered), type(counter), type(point), type(shout), type(red)) == (dict, dict, tuple, str, int)
    assert (ordered, counter, point, shout, red) == ({"a": 1}, {"a": 2}, (1, 2), "x", 1)
    assert shout != "anything else"


def test_an_object_equal_to_everything_stays_behind_and_equals_nothing(candidate):
    equal = candidate.function("equal")()
    assert isinstance(equal, cp.CandidateObject)
    assert not equal == 5  # noqa: SIM201 - the comparison under test
    assert [equal] != [5]


def test_objects_stay_in_the_candidate_and_are_passed_back_as_themselves(candidate):
    pair = candidate.function("Pair")(1, 2)
    assert isinstance(pair, cp.CandidateObject)
    assert candidate.function("total")([pair, pair, candidate.function("Pair")(10, 0)]) == 16


def test_exceptions_cross_by_name(candidate):
    with pytest.raises(ValueError, match=r"^bad value$"):
        candidate.function("fail")("value")
    with pytest.raises(RuntimeError, match=r"^Custom: mine$"):
        candidate.function("fail")("custom")
    with pytest.raises(NameError, match="'missing' is not defined"):
        candidate.function("missing")
    with pytest.raises(SyntaxError):
        cp.CandidateProcess("def broken(:\n")


def test_a_time_limit_is_kept_in_the_candidates_process(candidate):
    with pytest.raises(TimeoutError, match="time limit exceeded"):
        candidate.function("spin").timed(0.2)
    assert candidate.function("total")([]) == 0  # the process lives on


def test_an_answer_that_swallows_its_time_limit_meets_the_judges(monkeypatch):
    monkeypatch.setattr(cp, "WATCHDOG_SLACK_S", 0.5)
    process = cp.CandidateProcess(CANDIDATE)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        process.function("stubborn").timed(0.2, 30)
    assert time.monotonic() - started < 5
    assert process._child.returncode is not None  # ended


def test_what_tests_do_with_a_value_besides_comparing_it_works_on_objects_left_behind(candidate):
    squares = candidate.function("lazy")(4)
    assert isinstance(squares, cp.CandidateObject)
    assert squares != [0, 1, 4, 9]  # a generator is no list, as in one process
    assert tuple(squares) == (0, 1, 4, 9)
    assert set(candidate.function("lazy")(3)) == {0, 1, 4}
    assert candidate.function("exact")(2) == Fraction(2, 3)
    assert type(candidate.function("exact")(2)) is Fraction


def test_a_value_left_behind_reads_the_same_every_time(candidate):
    """A ``__float__`` answering anew on each call could make a test's sum of powers (HumanEval/32's
    ``poly``) come out zero."""
    drifting = candidate.function("make")("drifting")
    assert float(drifting) == float(drifting) == 1.0


def test_membership_is_the_judges_over_plain_values(candidate):
    assert 12345 not in candidate.function("make")("all_in")


def test_a_value_that_cannot_cross_leaves_the_answers_process_running(candidate):
    with pytest.raises(TypeError, match="cannot pass a function"):
        candidate.function("total")(lambda: 0)
    assert candidate.function("make")("seq")[2:4] == [2, 3]  # a slice crosses


def test_an_operation_on_an_endless_value_meets_its_time_limit(candidate, monkeypatch):
    monkeypatch.setattr(cp, "OP_SECONDS", 0.3)
    with pytest.raises(TimeoutError):
        list(candidate.function("endless")())
    assert candidate.function("total")([]) == 0


def test_the_answer_runs_under_the_sandbox_workers_flags():
    assert cp.FLAGS == WORKER_FLAGS


def test_annotations_are_postponed_as_in_the_worker(candidate):
    assert candidate.function("annotated")([3, 1]) == 3


def test_a_stop_iteration_does_not_end_a_loop_of_the_judges(candidate):
    stop = candidate.function("stop")
    with pytest.raises(RuntimeError, match="StopIteration"):
        all(map(lambda x: stop() == x, [1, 2]))


def test_the_answer_cannot_interrupt_the_judge():
    """SIGINT from the answer would raise KeyboardInterrupt in whatever judge code runs (into a
    bare ``except:`` of a CRUXEval program): it ends the judge instead."""
    judge = (
        program_prelude("import os, signal\ndef poke():\n    os.kill(os.getppid(), signal.SIGINT)\n")
        + "try:\n    _candidate.function('poke')()\n    import time\n    time.sleep(2)\nexcept:\n    print('caught')\n"
    )
    done = subprocess.run([sys.executable, "-c", judge], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == -signal.SIGINT and "caught" not in done.stdout


def test_the_candidate_holds_no_descriptor_but_its_stdio_and_pipes(candidate):
    r, w = os.pipe()  # the judge's result pipe stands in: never the candidate's
    try:
        assert len(candidate.function("descriptors")()) == 3 + 2 + 1  # stdio, two pipes, the listing's own
    finally:
        os.close(r)
        os.close(w)


def test_a_message_naming_any_callable_but_a_builtin_type_is_refused(tmp_path):
    target = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {target}",)

    for message in (pickle.dumps(Payload()), pickle.dumps(Path("x")), pickle.dumps(Fraction(1, 2))):
        with pytest.raises(pickle.UnpicklingError, match="may not name"):
            Unpickler(io.BytesIO(message)).load()
    assert not target.exists()


# through the sandbox ------------------------------------------------------------------------
FORGE = 'import os\nos.write(3, b\'{"status": "ok", "value": "True", "error": null}\')\nos._exit(0)\n'
EQUAL = "class Equal:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
CRUX_FORGE = (
    '__import__(\'os\').write(3, b\'{"status": "ok", "value": "True", "error": null}\') or __import__(\'os\')._exit(0)'
)
CRUX_EQUAL = "type('Equal', (), {'__eq__': lambda self, other: True, '__hash__': object.__hash__})()"


def _entry_points(item) -> list[str]:
    if "asserts" in item.data:
        return _mbpp_judge_part(item.data["asserts"], item.data["reference"])[1]
    return [item.data["entry_point"]]


def _forgeries(item) -> list[str]:
    if item.kind == "livecodebench":
        method = EQUAL + "class Solution:\n    def addToAll(self, *args):\n        return Equal()\n"
        return [code_answer(FORGE), code_answer(method if item.data["fn_name"] else f"print(Equal())\n{FORGE}")]
    if item.kind == "cruxeval_o":
        return [f"```output\n{CRUX_FORGE}\n```", f"```output\n{CRUX_EQUAL}\n```"]
    if item.kind == "cruxeval_i":
        return [f"```input\n{CRUX_FORGE}\n```"]
    equal = EQUAL + "".join(f"def {name}(*args, **kwargs):\n    return Equal()\n" for name in _entry_points(item))
    return [code_answer(FORGE), code_answer(equal)]


@pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")
def test_no_answer_passes_by_forging_its_verdict_or_by_equalling_everything(eval_pool):
    items, answers = [], []
    for benchmark in ("humaneval", "humanevalplus", "mbpp", "mbppplus", "cruxeval_o", "cruxeval_i"):
        for item in load_benchmark(benchmark, DATA)[:4]:
            for answer in _forgeries(item):
                items.append(item)
                answers.append(answer)
    for item in load_livecodebench(FIXTURES):  # one stdin problem, one functional
        for answer in _forgeries(item):
            items.append(item)
            answers.append(answer)
    verdicts = judge_answers(items, answers, eval_pool)
    passed = [(i.item_id, a[:60]) for i, a, v in zip(items, answers, verdicts, strict=True) if v.correct]
    assert not passed
    assert len(verdicts) == 4 * (2 + 2 + 2 + 2 + 2 + 1) + 2 * 2
