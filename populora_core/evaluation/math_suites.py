"""Math benchmarks: the model reasons, then gives its answer in ``\\boxed{}`` (GSM8K:
after ``####``); answers are compared as text and numbers, never executed.

- gsm8k: `gsm8k/test.jsonl` (1319); the number after ``####``, equal as numbers.
- math500: `math500/test.jsonl` (500); equal by math-verify's LaTeX and number paths
  (`mathverify.py`), else after Hendrycks et al.'s normalisation.
- aime24: `aime24/test.jsonl` (30); integers ("025" is 25).
- aime25: `aime25/aime2025-I.jsonl` + `-II.jsonl` (30); integers after the same
  normalisation (the gold "336^\\circ" is 336).
- amc23: `amc23/test.jsonl` (40); gold a JSON float, compared numerically.
- minerva_math: `minerva_math/test.jsonl` (272); gold the last ``\\boxed{}`` of the
  solution; Qwen2.5-Math's comparison: text, numbers within 1e-4 relative (or as
  percentages), expressions by value.
- olympiadbench: `olympiadbench/test.jsonl` (675, OE_TO_maths_en_COMP); OlympiadBench's
  published judge (`mathequiv.answers_equal`): comma-separated answers matched in any
  order, numbers within the record's ``error`` (default 1e-8, relative), expressions
  and equations by value, tuples and intervals element-wise.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from populora_core.evaluation.items import MATH_SYSTEM, EvalItem, chat, math_prompt
from populora_core.evaluation.mathequiv import answers_equal
from populora_core.evaluation.mathexpr import value
from populora_core.evaluation.mathnorm import last_boxed, math_equal, number_equal, strip_string
from populora_core.evaluation.mathverify import verifier


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_gsm8k(data_dir: Path) -> list[EvalItem]:
    items = []
    for i, r in enumerate(_jsonl(Path(data_dir) / "gsm8k" / "test.jsonl")):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        user = f"{r['question']}\nSolve it step by step, then give the final number after '####'."
        items.append(EvalItem("gsm8k", f"gsm8k/{i}", chat(MATH_SYSTEM, user), "number", {"gold": gold}))
    return items


def load_math500(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("math500", r["unique_id"], math_prompt(r["problem"]), "math", {"gold": r["answer"]})
        for r in _jsonl(Path(data_dir) / "math500" / "test.jsonl")
    ]


def load_aime24(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("aime24", f"aime24/{r['id']}", math_prompt(r["problem"]), "integer", {"gold": r["answer"]})
        for r in _jsonl(Path(data_dir) / "aime24" / "test.jsonl")
    ]


def load_aime25(data_dir: Path) -> list[EvalItem]:
    items = []
    for part in ("I", "II"):
        for i, r in enumerate(_jsonl(Path(data_dir) / "aime25" / f"aime2025-{part}.jsonl"), start=1):
            items.append(
                EvalItem("aime25", f"aime25/{part}-{i}", math_prompt(r["question"]), "integer", {"gold": r["answer"]})
            )
    return items


def load_amc23(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("amc23", f"amc23/{r['id']}", math_prompt(r["problem"]), "numeric", {"gold": float(r["answer"])})
        for r in _jsonl(Path(data_dir) / "amc23" / "test.jsonl")
    ]


def load_minerva_math(data_dir: Path) -> list[EvalItem]:
    items = []
    for r in _jsonl(Path(data_dir) / "minerva_math" / "test.jsonl"):
        gold = last_boxed(r["solution"])
        if gold is None:
            raise ValueError(f"minerva_math {r['idx']}: no \\boxed{{}} answer in the solution")
        items.append(
            EvalItem("minerva_math", f"minerva_math/{r['idx']}", math_prompt(r["problem"]), "minerva", {"gold": gold})
        )
    return items


_ANSWER_TYPES = {"Numerical": "a numerical value", "Expression": "an expression", "Tuple": "a tuple", "Interval": "an interval"}  # fmt: skip # noqa: E501


def _olympiad_instruction(r: dict) -> str:
    what = _ANSWER_TYPES.get(r["answer_type"], "a value")
    if r["is_multiple_answer"]:
        text = f"give every answer ({what} each) in one \\boxed{{}}, separated by commas"
    else:
        text = f"put the final answer ({what}) in \\boxed{{}}"
    return text + (f", without its unit ({r['unit']})" if r.get("unit") else "")


def load_olympiadbench(data_dir: Path) -> list[EvalItem]:
    items = []
    for r in _jsonl(Path(data_dir) / "olympiadbench" / "test.jsonl"):
        data = {
            "gold": ",".join(r["final_answer"]),
            "answer_type": r["answer_type"],
            "tol": float(r["error"]) if r.get("error") else 1e-8,
        }
        prompt = math_prompt(r["question"], _olympiad_instruction(r))
        items.append(EvalItem("olympiadbench", f"olympiadbench/{r['id']}", prompt, "olympiad", data))
    return items


# judging ------------------------------------------------------------------------------
def judge_number(item: EvalItem, completion: str) -> bool:
    """GSM8K: the first number after '####' (else the last number) equals the gold."""
    tail = completion.split("####")[-1] if "####" in completion else completion
    numbers = re.findall(r"-?\d[\d,]*\.?\d*", tail)
    return bool(numbers) and number_equal(numbers[-1 if "####" not in completion else 0], item.data["gold"])


def judge_math(item: EvalItem, completion: str) -> bool:
    """MATH-500: the last boxed answer equals the gold by math-verify (`mathverify.py`); where
    it gives no verdict, after Hendrycks et al.'s normalisation."""
    answer = last_boxed(completion)
    if answer is None:
        return False
    verdict = verifier().equal(f"${item.data['gold']}$", f"$\\boxed{{{answer}}}$")
    return math_equal(answer, item.data["gold"]) if verdict is None else verdict


def _boxed_value(completion: str) -> complex | None:
    answer = last_boxed(completion)
    return None if answer is None else value(strip_string(answer))


def judge_integer(item: EvalItem, completion: str) -> bool:
    """AIME: the boxed answer's value is the gold integer ("025" and "336^\\circ" are 25 and 336)."""
    got = _boxed_value(completion)
    gold = int(strip_string(item.data["gold"]))
    return got is not None and abs(got.imag) < 1e-9 and abs(got.real - gold) < 1e-6


def judge_numeric(item: EvalItem, completion: str) -> bool:
    """AMC 2023: the boxed answer's value equals the gold float."""
    got = _boxed_value(completion)
    return got is not None and abs(got.imag) < 1e-9 and math.isclose(got.real, item.data["gold"], abs_tol=1e-9)


def judge_minerva(item: EvalItem, completion: str) -> bool:
    answer = last_boxed(completion)
    return answer is not None and answers_equal(answer, item.data["gold"], tol=1e-4)


def judge_olympiad(item: EvalItem, completion: str) -> bool:
    answer = last_boxed(completion)
    return answer is not None and answers_equal(answer, item.data["gold"], tol=item.data["tol"])


def math_failure(item: EvalItem, completion: str, finish_reason: str | None) -> str:
    """Why a math answer the judge rejected failed (`failures.py`): ``truncated`` (cut at the
    cap with no final answer), ``no_final_answer`` (no ``\\boxed{}``; GSM8K: no number at all),
    ``unparsed`` (a final answer the value judges cannot read), else ``wrong``."""
    cut = finish_reason == "length"
    if item.kind == "number":  # the judge reads the number after ####, else the text's last number
        if "####" in completion:
            return "wrong" if re.search(r"\d", completion.split("####")[-1]) else "unparsed"
        if re.search(r"\d", completion):
            return "wrong"
        return "truncated" if cut else "no_final_answer"
    answer = last_boxed(completion)
    if answer is None:
        return "truncated" if cut else "no_final_answer"
    if item.kind in ("integer", "numeric") and value(strip_string(answer)) is None:
        return "unparsed"
    return "wrong"
