"""pass@1 (greedy) of the base model and of adapters on held-out benchmarks.

Completions come from any generation backend (one batch mixing every adapter);
code answers are judged in the sandbox pool, math answers by normalised equality.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from populora_core.evaluation.benchmarks import TEXT_JUDGES, check_program, judge_text
from populora_core.evaluation.items import EvalItem
from populora_core.inference.base import GenerationRequest, SamplingParams
from populora_core.sandbox import Job

RESULT_COLUMNS = ["benchmark", "item_id", "adapter_id", "correct", "detail", "completion"]


def judge(
    items: Sequence[EvalItem], completions: Sequence[str], pool, *, timeout_s: float = 20.0
) -> list[tuple[bool, str]]:
    """(correct, detail) per (item, completion); every program runs in ``pool`` in one batch
    (``timeout_s`` each, or the item's own ``timeout_s`` and ``memory_mb``: EvalPlus and
    LiveCodeBench items, whose harnesses limit every test)."""
    verdicts: list[tuple[bool, str] | int] = []
    jobs: list[Job] = []
    for item, completion in zip(items, completions, strict=True):
        if item.kind in TEXT_JUDGES:
            verdicts.append((judge_text(item, completion), ""))
            continue
        check = check_program(item, completion)
        if check is None:
            verdicts.append((False, "no answer found"))
            continue
        verdicts.append(len(jobs))
        limits = {"timeout_s": item.data.get("timeout_s", timeout_s), "memory_mb": item.data.get("memory_mb")}
        jobs.append(Job(code=check[0], expr=check[1], **limits))
    results = pool.run(jobs) if jobs else []
    out = []
    for v in verdicts:
        if isinstance(v, tuple):
            out.append(v)
            continue
        r = results[v]
        ok = r.status == "ok" and r.value == "True"
        out.append((ok, "" if ok else f"{r.status}: {(r.error or r.value or '')[:200]}"))
    return out


def evaluate(
    backend,
    adapters: Sequence[str],
    items: Sequence[EvalItem],
    pool,
    *,
    max_new_tokens: int,
    timeout_s: float = 20.0,
    progress: str = "evaluate",
) -> pd.DataFrame:
    """Greedy completions of every item by every adapter (``BASE`` for the base model), judged
    (``progress``: the progress bar's label)."""
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    requests = [GenerationRequest(prompt=list(i.messages), adapter=a) for a in adapters for i in items]
    outputs = backend.generate(requests, params, progress=progress)
    texts = [o[0].text for o in outputs]
    flat_items = [i for _ in adapters for i in items]
    verdicts = judge(flat_items, texts, pool, timeout_s=timeout_s)
    rows = []
    for req, item, text, (ok, detail) in zip(requests, flat_items, texts, verdicts, strict=True):
        rows.append(
            {
                "benchmark": item.benchmark,
                "item_id": item.item_id,
                "adapter_id": req.adapter,
                "correct": ok,
                "detail": detail,
                "completion": text,
            }
        )
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)
