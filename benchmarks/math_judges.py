"""The evaluation's math judge against plain math-verify (docs/evaluation.md#math-judges).

Two sets of answers, each judged by both:

- **reference answers**, where the truth is known: every gold answer of every math benchmark
  written as a model writes it (``\\boxed{gold}``; GSM8K ``#### gold``), MATH-500's published
  worked solutions (they end in a ``\\boxed{}`` that is right), the same texts paired with the
  next item's gold (wrong, unless the two golds are equal as written, which are left out),
  and every boxed gold rewritten as models write it (``\\dfrac``, ``a/b``, ``n.0``, a
  thousands comma, a decimal for a terminating fraction, ``x = n``, no degree sign, no unit)
  and near misses (``n + 1``, numerator + 1);
- **model answers**: greedy answers of ``--model`` (the base model, the evaluation's own
  prompts and caps up to ``--max-new-tokens``) to the first ``--items`` items of every math
  benchmark, generated once into ``--answers`` (a Parquet file) and read from it after.

"adopted" is the evaluation's judge (``benchmarks.TEXT_JUDGES``: math-verify with the
published tolerances, `math_suites.py`); "math-verify" is math-verify alone on the gold as
written, run as the evaluation runs it (``evaluation/mathverify.py``: its LaTeX and number
paths, in a worker process; its plain-expression path evaluates text with Python's ``eval``
and is refused). The hand-written judges these replaced (commit 09410a7) were compared on
the same answers; docs/evaluation.md has both.

    .venv/bin/python benchmarks/math_judges.py [--items 32] [--answers runs/math-answers.parquet]

Final line (JSON): per set and benchmark, the answers, how many each judge accepts, how
often they agree, and (reference answers) how often each is right; the model answers the
two judges disagree on are printed before it, for reading.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd

from populora_core.evaluation.benchmarks import TEXT_JUDGES, load_benchmark
from populora_core.evaluation.datasets import data_dir as default_data_dir
from populora_core.evaluation.math_suites import last_boxed

BENCHMARKS = ("math500", "gsm8k", "amc23", "aime24", "aime25", "minerva_math", "olympiadbench")


def math_verify_judge():
    """``judge(gold, answer) -> bool`` by math-verify as the evaluation runs it
    (``mathverify.MathVerifier``: its own worker, the plain-expression path refused); no
    verdict (nothing read, an error, a time limit) counts as not equal."""
    from populora_core.evaluation.mathverify import verifier

    def judge(gold: str, answer: str) -> bool:
        return bool(verifier().equal(gold if gold.strip().startswith("$") else f"${gold}$", answer))

    return judge


def _same(a: str, b: str) -> bool:
    return re.sub(r"\s", "", a) == re.sub(r"\s", "", b)


def gold_text(item) -> str:
    gold = item.data["gold"]
    if isinstance(gold, float):
        return str(int(gold)) if gold.is_integer() else repr(gold)
    return gold


def reference_answers(data_dir: Path) -> list[tuple[str, object, str, bool]]:
    """(set, item, answer text, truth) for every reference answer."""
    out = []
    for bench in BENCHMARKS:
        items = load_benchmark(bench, data_dir)
        for k, item in enumerate(items):
            gold, other = gold_text(item), items[(k + 1) % len(items)]
            written = f"#### {gold}" if bench == "gsm8k" else f"The answer is $\\boxed{{{gold}}}$."
            out.append(("gold", item, written, True))
            if not _same(gold_text(other), gold):
                out.append(("gold, next item's", other, written, False))
    items = load_benchmark("math500", data_dir)
    records = [json.loads(line) for line in (data_dir / "math500" / "test.jsonl").read_text().splitlines()]
    solutions = {r["unique_id"]: r["solution"] for r in records}
    for k, item in enumerate(items):
        text = solutions[item.item_id]
        if last_boxed(text) is None:
            continue
        out.append(("solution", item, text, True))
        other = items[(k + 1) % len(items)]
        if not _same(gold_text(other), gold_text(item)):
            out.append(("solution, next gold", other, text, False))
    return out


_FRAC = re.compile(r"^\\frac\{(-?\d+)\}\{(\d+)\}$")
_INT = re.compile(r"^-?\d+$")


def rewrites(gold: str) -> list[tuple[str, str, bool]]:
    """(rewrite, answer, truth): MATH-500 gold answers written another way a model writes
    them (equal), and near misses (not equal); only the rewrites that apply to ``gold``."""
    out = []
    if "\\frac" in gold:
        out.append(("\\dfrac", gold.replace("\\frac", "\\dfrac"), True))
    if "\\left" in gold:
        out.append(("no \\left \\right", gold.replace("\\left", "").replace("\\right", ""), True))
    frac = _FRAC.match(gold)
    if frac:
        a, b = int(frac.group(1)), int(frac.group(2))
        out.append(("a/b", f"{a}/{b}", True))
        if b in (2, 4, 5, 8, 10, 20, 25, 40, 50, 100):
            out.append(("decimal", repr(a / b), True))
        out.append(("numerator + 1", f"\\frac{{{a + 1}}}{{{b}}}", False))
    if _INT.match(gold):
        n = int(gold)
        out += [("x = n", f"x = {n}", True), ("n.0", f"{n}.0", True), ("n + 1", str(n + 1), False)]
        if abs(n) >= 1000:
            out.append(("thousands comma", f"{n:,}", True))
    if "^\\circ" in gold:
        out.append(("no degree sign", gold.replace("^\\circ", ""), True))
    if "\\text{" in gold and _INT.match(re.sub(r"\\text\{[^}]*\}", "", gold).strip()):
        out.append(("no unit", re.sub(r"\\text\{[^}]*\}", "", gold).strip(), True))
    return out


def rewritten_answers(data_dir: Path) -> list[tuple[str, object, str, bool]]:
    """(set, item, answer text, truth) for every rewrite of every boxed gold answer."""
    return [
        (f"rewrite {name}", item, f"The answer is $\\boxed{{{text}}}$.", truth)
        for bench in BENCHMARKS
        if bench != "gsm8k"
        for item in load_benchmark(bench, data_dir)
        for name, text, truth in rewrites(gold_text(item))
    ]


def model_answers(path: Path, data_dir: Path, model: str, items_per: int, max_new_tokens: int) -> pd.DataFrame:
    if path.is_file():
        return pd.read_parquet(path)
    if not items_per:
        return pd.DataFrame(columns=["benchmark", "item_id", "completion"])
    from populora_core.evaluation.benchmarks import get_benchmark
    from populora_core.evaluation.pass_at_1 import evaluate
    from populora_core.inference.base import BASE
    from populora_core.inference.hf import HFBackend
    from populora_core.models import load_model, resolve_model

    base, tokenizer = load_model(resolve_model(model), dtype="auto")
    backend = HFBackend(None, model=base, tokenizer=tokenizer, batch_size=16)
    frames = []
    for bench in BENCHMARKS:
        items = load_benchmark(bench, data_dir, items_per)
        cap = min(max_new_tokens, get_benchmark(bench).max_new_tokens)
        frames.append(evaluate(backend, [BASE], items, None, max_new_tokens=cap, progress=f"answers {bench}"))
    answers = pd.concat(frames, ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    answers.to_parquet(path)
    return answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--answers", type=Path, default=Path("runs/math-answers.parquet"))
    ap.add_argument("--model", default="embedded:qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--items", type=int, default=32, help="items per benchmark for the model answers (0: none)")
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--quick", action="store_true", help="the reference answers only: no model, no --answers")
    args = ap.parse_args()
    data_dir = args.data_dir or default_data_dir()
    answers = (
        pd.DataFrame()
        if args.quick
        else model_answers(args.answers, data_dir, args.model, args.items, args.max_new_tokens)
    )
    theirs = math_verify_judge()
    figures: dict[str, dict] = {}

    def record(key: str, adopted: bool, mv: bool, truth: bool | None) -> None:
        f = figures.setdefault(key, {"n": 0, "adopted": 0, "math_verify": 0, "agree": 0})
        f["n"] += 1
        f["adopted"] += adopted
        f["math_verify"] += mv
        f["agree"] += adopted == mv
        if truth is not None:
            f["adopted_right"] = f.get("adopted_right", 0) + (adopted == truth)
            f["math_verify_right"] = f.get("math_verify_right", 0) + (mv == truth)

    misses = []
    for kind, item, text, truth in reference_answers(data_dir) + rewritten_answers(data_dir):
        got, mv = TEXT_JUDGES[item.kind](item, text), theirs(gold_text(item), text)
        record(f"reference {kind} / {item.benchmark}", got, mv, truth)
        if got != truth or mv != truth:
            misses.append((kind, item.item_id, gold_text(item), text[-160:], got, mv))
    for m in misses:
        print("reference miss:", m, file=sys.stderr)
    by_id = {(i.benchmark, i.item_id): i for b in BENCHMARKS for i in load_benchmark(b, data_dir, args.items)}
    for r in answers.itertuples():
        item = by_id[(r.benchmark, r.item_id)]
        got, mv = TEXT_JUDGES[item.kind](item, r.completion), theirs(gold_text(item), r.completion)
        record(f"model / {r.benchmark}", got, mv, None)
        if got != mv:
            print(f"disagree {r.item_id}: gold {gold_text(item)!r}; adopted {got}, math-verify {mv}; "
                  f"answer ends {r.completion[-200:]!r}", file=sys.stderr)  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
