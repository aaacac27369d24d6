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
    """One completion to learn from: token ids, generation-time log-probs, advantage."""

    prompt_ids: Sequence[int]
    completion_ids: Sequence[int]
    old_logprobs: Sequence[float]
    advantage: float


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


def pad_rollouts(batch: Sequence[Rollout], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask, completion mask and old log-probs, aligned to targets."""
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    comp = torch.zeros((len(batch), width - 1))
    old = torch.zeros((len(batch), width - 1))
    for b, r in enumerate(batch):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        ids[b, : p + c] = torch.tensor([*r.prompt_ids, *r.completion_ids])
        attn[b, : p + c] = 1
        comp[b, p - 1 : p - 1 + c] = 1  # position t predicts token t + 1
        old[b, p - 1 : p - 1 + c] = torch.tensor(list(r.old_logprobs), dtype=torch.float32)
    return ids, attn, comp, old


def whole_sequence_logprobs(model, batch: Sequence[Rollout], pad_id: int, chunk: int):
    """``prefix.shared_prompt_logprobs``'s triple, every (prompt + completion) right-padded and run whole."""
    ids, attn, comp, old = pad_rollouts(batch, pad_id)
    start = min(len(r.prompt_ids) for r in batch) - 1  # first position predicting a completion token
    return token_logprobs(model, ids, attn, chunk, start), comp[:, start:], old[:, start:]
