"""Math benchmarks: the model reasons, then gives its answer in ``\\boxed{}`` (GSM8K:
after ``####``); answers are compared as text and numbers, never executed. Every boxed
answer is judged by math-verify (`mathverify.py`), beside Minerva's and OlympiadBench's
published numeric tolerances; where math-verify reads nothing from one side, the answer
equals the gold only as the same text (whitespace aside). Why, and how it was measured:
docs/evaluation.md#math-judges-ours-and-math-verify.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

from populora_core.evaluation.items import MATH_SYSTEM, EvalItem, chat, math_prompt, read_jsonl
from populora_core.evaluation.mathverify import verifier

MINERVA_TOL = 1e-4  # relative, where answer and gold are plain numbers (Qwen2.5-Math's Minerva judge)


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    depth, i = 0, text.index("{", start)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def clean_gold(text: str) -> str:
    """A gold (or boxed answer) as the judge reads it: no ``$`` delimiters (``\\$`` stays), no
    final period."""
    return re.sub(r"(?<!\\)\$", "", text).strip().rstrip(".").strip()


def _number(text: str) -> float | None:
    """A plain number (thousands commas and ``\\$`` allowed), else None."""
    text = text.replace("\\$", "").strip().rstrip(".")
    if "," in text and not re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d*)?", text):
        return None  # "1,2" is two answers, not 12
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def load_gsm8k(data_dir: Path) -> list[EvalItem]:
    items = []
    for i, r in enumerate(read_jsonl(Path(data_dir) / "gsm8k" / "test.jsonl")):
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        user = f"{r['question']}\nSolve it step by step, then give the final number after '####'."
        items.append(EvalItem("gsm8k", f"gsm8k/{i}", chat(MATH_SYSTEM, user), "number", {"gold": gold}))
    return items


def load_math500(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("math500", r["unique_id"], math_prompt(r["problem"]), "math", {"gold": r["answer"]})
        for r in read_jsonl(Path(data_dir) / "math500" / "test.jsonl")
    ]


def load_aime24(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("aime24", f"aime24/{r['id']}", math_prompt(r["problem"]), "integer", {"gold": r["answer"]})
        for r in read_jsonl(Path(data_dir) / "aime24" / "test.jsonl")
    ]


def load_aime25(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("aime25", f"aime25/{part}-{i}", math_prompt(r["question"]), "integer", {"gold": r["answer"]})
        for part in ("I", "II")
        for i, r in enumerate(read_jsonl(Path(data_dir) / "aime25" / f"aime2025-{part}.jsonl"), start=1)
    ]


def load_amc23(data_dir: Path) -> list[EvalItem]:
    return [
        EvalItem("amc23", f"amc23/{r['id']}", math_prompt(r["problem"]), "numeric", {"gold": float(r["answer"])})
        for r in read_jsonl(Path(data_dir) / "amc23" / "test.jsonl")
    ]


def load_minerva_math(data_dir: Path) -> list[EvalItem]:
    items = []
    for r in read_jsonl(Path(data_dir) / "minerva_math" / "test.jsonl"):
        gold = last_boxed(r["solution"])
        if gold is None:
            raise ValueError(f"minerva_math {r['idx']}: no \\boxed{{}} answer in the solution")
        data = {"gold": clean_gold(gold), "tol": MINERVA_TOL}
        items.append(EvalItem("minerva_math", f"minerva_math/{r['idx']}", math_prompt(r["problem"]), "minerva", data))
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
    for r in read_jsonl(Path(data_dir) / "olympiadbench" / "test.jsonl"):
        data = {
            "gold": ", ".join(clean_gold(a) for a in r["final_answer"]),
            "answer_type": r["answer_type"],
            "tol": float(r["error"]) if r.get("error") else None,  # one record has one
        }
        prompt = math_prompt(r["question"], _olympiad_instruction(r))
        items.append(EvalItem("olympiadbench", f"olympiadbench/{r['id']}", prompt, "olympiad", data))
    return items


# judging ------------------------------------------------------------------------------
def judge_number(item: EvalItem, completion: str) -> bool:
    """GSM8K: the first number after '####' (else the last number) equals the gold."""
    tail = completion.split("####")[-1]  # the whole text when there is no ####
    numbers = re.findall(r"-?\d[\d,]*\.?\d*", tail)
    got = _number(numbers[-1 if "####" not in completion else 0]) if numbers else None
    return got is not None and abs(got - float(item.data["gold"])) < 1e-6


def _gold(item: EvalItem) -> str:
    gold = item.data["gold"]  # AMC's is a float
    if isinstance(gold, float):
        return str(int(gold)) if gold.is_integer() else repr(gold)
    return gold


def boxed_verdict(item: EvalItem, completion: str) -> bool | None:
    """Whether the last boxed answer equals the gold (module docstring); None when there is
    no boxed answer or math-verify reads nothing from it."""
    answer = last_boxed(completion)
    return None if answer is None else _equal(_gold(item), clean_gold(answer), item.data.get("tol"))


@functools.lru_cache(maxsize=4096)  # a rejected answer is judged again for its failure class
def _equal(gold: str, answer: str, tol: float | None) -> bool | None:
    got, want = _number(answer), _number(gold)
    if tol and got is not None and want is not None:
        return math.isclose(got, want, rel_tol=tol)
    return verifier().equal(f"${gold}$", f"$\\boxed{{{answer}}}$")


def judge_boxed(item: EvalItem, completion: str) -> bool:
    """MATH-500, AIME, AMC, Minerva, OlympiadBench: ``boxed_verdict``, or the same text."""
    verdict = boxed_verdict(item, completion)
    if verdict is None:
        answer = last_boxed(completion)
        return answer is not None and re.sub(r"\s", "", answer) == re.sub(r"\s", "", _gold(item))
    return verdict


def math_failure(item: EvalItem, completion: str, finish_reason: str | None) -> str:
    """Why a math answer the judge rejected failed (`failures.py`): ``truncated`` (cut at the
    cap with no final answer), ``no_final_answer`` (no ``\\boxed{}``; GSM8K: no number at all),
    ``unparsed`` (a final answer math-verify reads nothing from, or AIME's and AMC's without a
    digit; GSM8K: no number after ``####``), else ``wrong``."""
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
    if item.kind in ("integer", "numeric") and not re.search(r"\d", answer):  # AIME, AMC: a number asked
        return "unparsed"
    return "unparsed" if boxed_verdict(item, completion) is None else "wrong"
