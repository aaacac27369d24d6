"""pass@1 (greedy) of the base model and of adapters on held-out benchmarks: completions from
any generation backend (one batch mixing every adapter), code answers judged in the sandbox
pool, math answers by their text judges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pandas as pd

from populora_core.evaluation.benchmarks import PROGRAM_CHECKS, TEXT_JUDGES
from populora_core.evaluation.failures import answer_form, run_class
from populora_core.evaluation.items import EvalItem
from populora_core.evaluation.math_suites import math_failure
from populora_core.inference.base import GenerationRequest, SamplingParams
from populora_core.sandbox import Job

RESULT_COLUMNS = ["benchmark", "item_id", "adapter_id", "correct", "failure", "finish_reason", "detail", "completion"]
"""``failure``: why the answer failed, or ``passed`` (`failures.py`); ``finish_reason``: how
its generation ended ("stop", "eos" or "length", the token cap)."""
TIMEOUT_S = 20.0
"""Seconds a judged program may run when its item sets no limit of its own."""


class Verdict(NamedTuple):
    correct: bool
    detail: str
    failure: str
    """A class of `failures.py`: ``passed`` when correct."""


def judge_answers(
    items: Sequence[EvalItem],
    completions: Sequence[str],
    pool,
    *,
    finish_reasons: Sequence[str | None] | None = None,
) -> list[Verdict]:
    """A verdict per (item, completion) with its failure class; every program runs in ``pool``
    in one batch (``TIMEOUT_S`` each, or the item's own ``timeout_s`` and ``memory_mb``:
    EvalPlus and LiveCodeBench items, whose harnesses limit every test). ``finish_reasons``
    (None: unknown) tell an answer cut at the token cap."""
    finish_reasons = finish_reasons or [None] * len(items)
    verdicts: list[Verdict | None] = []
    jobs: list[Job] = []
    runs: list[tuple[int, str | None]] = []  # per job: the index of its verdict, the answer's form class
    for item, completion, finish in zip(items, completions, finish_reasons, strict=True):
        if item.kind in TEXT_JUDGES:
            ok = TEXT_JUDGES[item.kind](item, completion)
            verdicts.append(Verdict(ok, "", "passed" if ok else math_failure(item, completion, finish)))
            continue
        form = answer_form(item, completion, finish)
        check = PROGRAM_CHECKS[item.kind](item, completion)
        if check is None:
            verdicts.append(Verdict(False, "no answer found", form or "no_code"))
            continue
        runs.append((len(verdicts), form))
        verdicts.append(None)
        limits = {"timeout_s": item.data.get("timeout_s", TIMEOUT_S), "memory_mb": item.data.get("memory_mb")}
        jobs.append(Job(code=check[0], expr=check[1], **limits))
    for r, (at, form) in zip(pool.run(jobs) if jobs else [], runs, strict=True):
        ok = r.status == "ok" and r.value == "True"
        detail = "" if ok else f"{r.status}: {(r.error or r.value or '')[:200]}"
        failure = "passed" if ok else run_class(r) if r.status == "sandbox_failure" else form or run_class(r)
        verdicts[at] = Verdict(ok, detail, failure)
    return verdicts


def evaluate(
    backend,
    adapters: Sequence[str],
    items: Sequence[EvalItem],
    pool,
    *,
    max_new_tokens: int,
    progress: str = "evaluate",
) -> pd.DataFrame:
    """Greedy completions of every item by every adapter (``BASE`` for the base model), judged
    (``progress``: the progress bar's label)."""
    stops = {i.stop for i in items}
    if len(stops) > 1:
        raise ValueError("one evaluate() call asks every item under one protocol (their stop strings differ)")
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=next(iter(stops), ()))
    requests = [
        GenerationRequest(prompt=list(i.messages), adapter=a, prefill=i.prefill) for a in adapters for i in items
    ]
    outputs = backend.generate(requests, params, progress=progress)
    texts = [o[0].text for o in outputs]
    reasons = [o[0].finish_reason for o in outputs]
    flat_items = [i for _ in adapters for i in items]
    verdicts = judge_answers(flat_items, texts, pool, finish_reasons=reasons)
    rows = [
        (item.benchmark, item.item_id, req.adapter, v.correct, v.failure, reason, v.detail, text)
        for req, item, text, reason, v in zip(requests, flat_items, texts, reasons, verdicts, strict=True)
    ]
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)
