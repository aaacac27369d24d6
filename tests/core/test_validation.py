"""Proposal validation: banned code, determinism, gold outputs from the sandbox."""

from __future__ import annotations

import pytest

from populora_core.config import ProblemsConfig, SandboxConfig
from populora_core.problems import Proposal, validate_proposals
from populora_core.problems.static import check_program
from populora_core.sandbox import SandboxPool


def proposal(program: str, *inputs: str, message: str = "") -> Proposal:
    return Proposal(program=program, inputs=inputs, message=message)


@pytest.mark.parametrize(
    "program",
    [
        "import os\ndef f(x):\n    return x",
        "from subprocess import run\ndef f(x):\n    return x",
        "import random\ndef f(x):\n    return random.random()",
        "import time\ndef f(x):\n    return time.time()",
        "import socket\ndef f(x):\n    return x",
        "def f(x):\n    return open('/etc/passwd').read()",
        "def f(x):\n    return __import__('os').getcwd()",
        "def f(x):\n    return eval('1')",
        "def f(x):\n    return ().__class__.__bases__[0].__subclasses__()",
        "from . import thing\ndef f(x):\n    return x",
    ],
)
def test_banned_imports_and_calls_are_rejected(program, problems_config):
    reason = check_program(program, problems_config)
    assert reason is not None and ("banned" in reason or "relative" in reason)


def test_banned_lists_are_configurable():
    config = ProblemsConfig(banned_modules=("math",), banned_calls=())
    assert check_program("import math\ndef f(x):\n    return x", config) == "banned import: math"
    assert check_program("import os\ndef f(x):\n    return x", config) is None


def test_program_must_define_f(problems_config):
    assert check_program("def g(x):\n    return x", problems_config) == "no top-level function named f"
    assert "syntax error" in check_program("def f(x) return x", problems_config)
    assert "too long" in check_program("def f(x):\n    return x\n" + "#" * 5000, problems_config)


def test_gold_outputs_come_from_execution(local_pool, problems_config):
    items = [
        ("code_o", proposal("def f(s):\n    return s[::-1].upper()", '"Hello world"')),
        ("code_i", proposal("def f(xs):\n    return sum(x * x for x in xs)", "[1, 2, 3]")),
        ("code_f", proposal("def f(n):\n    return n * n", "1", "2", "3", "4", message="squares")),
    ]
    results = validate_proposals(items, local_pool, problems_config)
    assert [r.valid for r in results] == [True, True, True]
    assert results[0].problem.outputs == ("'DLROW OLLEH'",)
    assert results[1].problem.outputs == ("14",)
    assert results[2].problem.outputs == ("1", "4", "9", "16")
    assert results[2].problem.shown == [("1", "1"), ("2", "4")]
    assert results[2].problem.hidden == [("3", "9"), ("4", "16")]
    assert set(results[0].metrics) == {"ast_depth", "cyclomatic", "loc", "halstead"}
    assert results[0].problem.problem_id.startswith("code_o-")


def test_non_deterministic_programs_are_rejected(problems_config):
    # One worker: both runs are forks of the same process, where addresses
    # would repeat without the salted second run.
    items = [
        ("code_o", proposal("def f(x):\n    return id(object()) + x", "1")),
        ("code_o", proposal("def f(x):\n    return hash(object()) % 9973", "1")),
        ("code_o", proposal("def f(x):\n    return [str(o)[-6:] for o in {object(), object(), object()}]", "1")),
    ]
    with SandboxPool(SandboxConfig(workers=1)) as pool:
        reasons = [r.reason for r in validate_proposals(items, pool, problems_config)]
    assert reasons == ["non-deterministic"] * 3


def test_invalid_runs_are_rejected_with_the_reason(local_pool, problems_config):
    items = [
        ("code_o", proposal("def f(x):\n    while True:\n        pass", "1")),
        ("code_o", proposal("def f(x):\n    return 1 / x", "0")),
        ("code_o", proposal("def f(x):\n    return range(x)", "3")),
        ("code_o", proposal("def f(x):\n    return 'x' * 5000", "0")),
        ("code_o", proposal("def f(x):\n    return x", "1), print(2")),
        ("code_f", proposal("def f(x):\n    return x", "1", "2")),
        ("code_o", "not a completion at all"),
    ]
    reasons = [r.reason for r in validate_proposals(items, local_pool, problems_config)]
    assert reasons[0].startswith("timeout")
    assert reasons[1].startswith("error: ZeroDivisionError")
    assert reasons[2] == "output is not a literal"
    assert reasons[3] == "output too large"
    assert "argument list" in reasons[4]
    assert "at least 4 distinct inputs" in reasons[5]
    assert reasons[6] == "format: no_answer"


def test_induction_drops_failing_inputs_but_needs_enough(local_pool, problems_config):
    program = "def f(x):\n    return 10 // x"
    ok = validate_proposals([("code_f", proposal(program, "1", "2", "0", "5", "10"))], local_pool, problems_config)[0]
    assert ok.valid and ok.problem.inputs == ("1", "2", "5", "10")
    short = validate_proposals([("code_f", proposal(program, "1", "2", "0", "0.0"))], local_pool, problems_config)[0]
    assert not short.valid
