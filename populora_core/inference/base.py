"""The generation protocol every backend implements.

Requests in (adapter or base, prompt as chat messages or text, samples, seed),
completions out with token ids and per-token log-probabilities, in request
order. Log-probabilities are those of the unmodified policy (temperature 1, no
top-k/top-p truncation) at the sampled tokens, which is what the policy-gradient
ratio needs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

BASE = "__base__"
"""Adapter name that means: the base model, no adapter."""
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


_DIGESTS: dict[tuple, str] = {}
"""(device, inode, size, mtime) of each adapter file → the directory's digest, in this process."""


def adapter_digest(directory: Path) -> str:
    """SHA-256 of a PEFT adapter directory's weights and config: what a backend holds.

    Read once per version of the files in a process (paper-7b: 8 × 323 MB at every stage that
    serves them, twice with vLLM): the project writes adapter files whole under a temp name and
    renames them into place (``population.adapters.save_adapter``), never in place, so a new
    version is a new inode and (inode, size, mtime) names the content; a snapshot's hard links
    to an unchanged adapter hit the same entry. A file rewritten in place by another tool within
    one clock tick, at the same size, would be missed."""
    paths = [Path(directory) / name for name in ADAPTER_FILES]
    key = tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) for s in map(os.stat, paths))
    if (digest := _DIGESTS.get(key)) is None:
        h = hashlib.sha256()
        for path in paths:
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
        digest = _DIGESTS[key] = h.hexdigest()
    return digest


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    """Generation of a sample ends after the token that completes any of these strings."""
    ignore_eos: bool = False
    """Keep generating past end-of-sequence tokens (fixed-length runs for benchmarks)."""


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str | Sequence[Mapping[str, str]]
    """Chat messages (rendered with the tokenizer's chat template) or raw text."""
    adapter: str = BASE
    n: int = 1
    seed: int | None = 0
    """Sample i of this request is drawn from a generator seeded with (seed, i),
    so it does not depend on which other requests share its batch. None: unseeded, each
    sample from a fresh nondeterministic draw (benchmarks/request_seeds.py measures both)."""
    prefill: str = ""
    """Text the assistant turn starts with (e.g. "<think>"); part of the prompt."""


@dataclass(frozen=True)
class Completion:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_token_ids: list[int] = field(repr=False, default_factory=list)
    finish_reason: str = "length"
    """"stop" (a stop string), "eos", or "length" (max_new_tokens)."""


def encode_prompt(tokenizer, request: GenerationRequest) -> list[int]:
    """Prompt token ids: chat messages through the tokenizer's chat template (with
    the generation prompt), then the prefill. Every backend sends these exact ids."""
    if isinstance(request.prompt, str):
        text = request.prompt + request.prefill
    else:
        text = tokenizer.apply_chat_template(list(request.prompt), tokenize=False, add_generation_prompt=True)
        text += request.prefill
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def left_padded(prompts: Sequence[Sequence[int]], pad_id: int, device=None):
    """(token ids, attention mask), both (len(prompts), longest prompt) long tensors on
    ``device`` (default: the CPU), each prompt padded on the left: every prompt's last token
    in the last column."""
    import torch

    device = torch.device("cpu") if device is None else device
    width = max(len(p) for p in prompts)
    rows = [[pad_id] * (width - len(p)) + list(p) for p in prompts]
    ids = torch.tensor(rows, dtype=torch.long, device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=device)
    return ids, mask


def check_loaded(requests: Sequence[GenerationRequest], loaded: Collection[str]) -> None:
    """Raises KeyError naming the first request whose adapter is neither loaded nor the base."""
    for r in requests:
        if r.adapter != BASE and r.adapter not in loaded:
            raise KeyError(f"adapter {r.adapter!r} is not loaded; loaded: {sorted(loaded)}")


class GenerationBackend(Protocol):
    """A generation backend holding one base model and any number of adapters."""

    def load_adapter(self, adapter_id: str, path: Path) -> None:
        """Loads (or reloads, after an update) a PEFT adapter directory under ``adapter_id``."""

    def remove_adapter(self, adapter_id: str) -> None: ...

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: str | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request, in request order; ``progress`` names a progress bar."""
