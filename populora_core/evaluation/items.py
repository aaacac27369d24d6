"""What every benchmark family shares: one question with its chat prompt, the published
JSON Lines its records are read from, and the fenced-block extraction code answers are read with."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

CODE_SYSTEM = "You are an expert Python programmer."
MATH_SYSTEM = "You are a careful mathematician."


@dataclass(frozen=True)
class EvalItem:
    """One benchmark question: the chat prompt, and what judging an answer needs."""

    benchmark: str
    item_id: str
    messages: tuple[dict, ...]
    kind: str  # how an answer is judged: a key of benchmarks.PROGRAM_CHECKS or benchmarks.TEXT_JUDGES
    data: dict = field(default_factory=dict, repr=False)
    prefill: str = ""
    """The start of the answer, given (the trained protocol's ``<think>``)."""
    stop: tuple[str, ...] = ()
    """Generation ends after any of these."""


PROTOCOLS = ("standard", "trained")
"""How an answer is asked for (docs/evaluation.md#protocols). ``standard``: each benchmark's own
prompt; ``trained``: the code benchmarks (``TRAINED_KINDS``) in the adapters' training format."""
TRAINED_KINDS = ("code", "livecodebench", "cruxeval_o", "cruxeval_i")


def with_protocol(item: EvalItem, protocol: str) -> EvalItem:
    """``item`` asked for under ``protocol`` (``PROTOCOLS``)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; protocols: {', '.join(PROTOCOLS)}")
    if protocol == "standard" or item.kind not in TRAINED_KINDS:
        return item
    from populora_core.problems.prompts import ASSISTANT_PREFILL, STOP_STRINGS, STUDENT_FORMAT, SYSTEM

    user = next(m["content"] for m in reversed(item.messages) if m["role"] == "user")
    messages = chat(SYSTEM, f"{STUDENT_FORMAT}\n\n{user}")
    return replace(item, messages=messages, prefill=ASSISTANT_PREFILL, stop=STOP_STRINGS)


def chat(system: str, user: str) -> tuple[dict, ...]:
    return ({"role": "system", "content": system}, {"role": "user", "content": user})


def code_prompt(text: str) -> tuple[dict, ...]:
    return chat(CODE_SYSTEM, f"{text}\n\nWrite the complete Python function in one ```python block.")


def math_prompt(problem: str, instruction: str = "put the final answer in \\boxed{}") -> tuple[dict, ...]:
    return chat(MATH_SYSTEM, f"{problem}\nSolve it step by step and {instruction}.")


def read_jsonl(path: Path) -> list[dict]:
    """Every record of a JSON Lines file (gzip-compressed when its name ends in ``.gz``), blank lines skipped."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)


def fenced(text: str, *tags: str) -> str | None:
    """The last fenced block whose tag is in ``tags`` ("" = untagged); an unclosed last block counts."""
    block = fenced_block(text, *tags)
    return None if block is None else block[0]


def fenced_block(text: str, *tags: str) -> tuple[str, bool] | None:
    """``fenced``'s block and whether it was closed (False: cut off, e.g. by the token cap)."""
    wanted = [body for t, body in _FENCE.findall(text) if t.lower() in tags]
    if wanted:
        return wanted[-1].strip("\n"), True
    for tag in tags:  # a block cut off by the token cap
        start = text.rfind(f"```{tag}\n") if tag else -1
        if start >= 0:
            return text[start + len(tag) + 4 :].strip("\n"), False
    return None
