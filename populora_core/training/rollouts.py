"""The rollouts an update learns from, and the log-probabilities of their tokens under a model.

``Rollout`` is one completion with its generation-time log-probs and advantage; the
functions pad a batch of them and compute log π of each completion token, for the whole
(prompt + completion) sequences (``whole_sequence_logprobs``) or, in ``prefix``, with each
shared prompt run once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Rollout:
    """One completion to learn from: token ids, π_old's log-probs (the sampler's, or the
    learner's when ``grpo.old_logprobs: learner``), advantage, and the sampler's log-probs
    when π_old is the learner's (truncated importance sampling weighs by their ratio)."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    old_logprobs: Sequence[float]
    advantage: float
    sampler_logprobs: Sequence[float] | None = None


def completion_values(
    batch: Sequence[Rollout], values: Sequence[Sequence[float]], device, *, aligned_to_targets: bool
) -> torch.Tensor:
    """Per-token ``values`` of each rollout's completion as one float32 tensor in the layout
    the log-prob functions return: aligned to targets from the batch's first completion
    position (``whole_sequence_logprobs``) or left-aligned (``prefix.shared_prompt_logprobs``)."""
    if aligned_to_targets:
        width = max(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
        start = min(len(r.prompt_ids) for r in batch) - 1
        rows = [
            [0.0] * (len(r.prompt_ids) - 1) + [float(x) for x in v] + [0.0] * (width - len(r.prompt_ids) - len(v))
            for r, v in zip(batch, values, strict=True)
        ]
        return torch.tensor(rows, dtype=torch.float32, device=device)[:, start:]
    width = max(len(r.completion_ids) for r in batch)
    rows = [[float(x) for x in v] + [0.0] * (width - len(v)) for v in values]
    return torch.tensor(rows, dtype=torch.float32, device=device)


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """log-softmax of ``logits`` (B, T, V) at ``targets`` (B, T), ``chunk`` positions at a time in
    float32 (x_target − logsumexp x): the full-vocabulary float32 copy is never whole."""
    pieces = []
    for s in range(0, logits.shape[1], chunk):
        part = logits[:, s : s + chunk].float()  # (B, c, V)
        pieces.append(part.gather(-1, targets[:, s : s + chunk, None]).squeeze(-1) - torch.logsumexp(part, -1))
    return torch.cat(pieces, dim=1)


def token_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, chunk: int, start: int = 0
) -> torch.Tensor:
    """log π(x_{t+1} | x_≤t) for t = start … T − 2, shape (B, T − 1 − start).

    ``logits_to_keep`` makes the model project only positions ≥ ``start`` (the
    prompt's log-probs are never used) and return them in its own dtype; the
    float32 log-softmax is then taken a chunk of positions at a time, at the
    target only (x_target − logsumexp x). Asking the model for its hidden states
    and projecting them here instead was 1.6× slower on the 0.5B model.
    """
    keep = input_ids.shape[1] - start
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits[:, :-1]
    return target_logprobs(logits, input_ids[:, start + 1 :], chunk)


def model_device(model) -> torch.device:
    """The device of ``model``'s parameters: where every tensor handed to it must be."""
    return next(model.parameters()).device


def pad_rollouts(batch: Sequence[Rollout], pad_id: int, device=None) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask, completion mask and old log-probs, aligned to targets,
    built as lists and made tensors once, on ``device`` (default: the CPU)."""
    device = torch.device("cpu") if device is None else device
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
    ids, attn, comp, old = [], [], [], []
    for r in batch:
        p, c, pad = len(r.prompt_ids), len(r.completion_ids), width - len(r.prompt_ids) - len(r.completion_ids)
        ids.append([*r.prompt_ids, *r.completion_ids] + [pad_id] * pad)
        attn.append([1] * (p + c) + [0] * pad)
        comp.append([0.0] * (p - 1) + [1.0] * c + [0.0] * pad)  # position t predicts token t + 1
        old.append([0.0] * (p - 1) + [float(x) for x in r.old_logprobs] + [0.0] * pad)
    long, f32 = {"dtype": torch.long, "device": device}, {"dtype": torch.float32, "device": device}
    return torch.tensor(ids, **long), torch.tensor(attn, **long), torch.tensor(comp, **f32), torch.tensor(old, **f32)


def whole_sequence_logprobs(model, batch: Sequence[Rollout], pad_id: int, chunk: int):
    """``prefix.shared_prompt_logprobs``'s triple, every (prompt + completion) right-padded and run whole."""
    ids, attn, comp, old = pad_rollouts(batch, pad_id, model_device(model))
    start = min(len(r.prompt_ids) for r in batch) - 1  # first position predicting a completion token
    return token_logprobs(model, ids, attn, chunk, start), comp[:, start:], old[:, start:]
