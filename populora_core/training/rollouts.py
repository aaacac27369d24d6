"""The rollouts an update learns from, and the log-probabilities of their tokens under a model.

``Rollout`` is one completion with its generation-time log-probs and advantage; the
functions pad a batch of them and compute log π of each completion token, for the whole
(prompt + completion) sequences (``whole_sequence_logprobs``) or, in ``prefix``, with each
shared prompt run once; both return (sequence, completion token) tensors, left-aligned, and
project only completion positions to the vocabulary.
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


def _by_prompt(chunk: Sequence[Rollout]) -> list[Rollout]:
    """``chunk`` with the rollouts of each prompt together (in order of first appearance), so
    that a micro-batch's completions share as few prompts as possible."""
    first: dict[tuple[int, ...], int] = {}
    for r in chunk:
        first.setdefault(tuple(r.prompt_ids), len(first))
    return sorted(chunk, key=lambda r: first[tuple(r.prompt_ids)])


def micro_batches(chunk: Sequence[Rollout], micro_batch: int, shared: bool) -> list[list[Rollout]]:
    """``chunk`` cut into the micro-batches an update runs. Shared prompts (``prefix``): each
    prompt's rollouts together, ``micro_batch`` at a time. Whole sequences: longest first, and
    each micro-batch as many rows as fit a token budget of ``micro_batch`` × the chunk's longest
    sequence (padded) and ``micro_batch`` × its longest completion (the logits): never more than
    the plan counts for ``micro_batch`` sequences, and a few long rows no longer pad many short
    ones. The loss is a token-weighted sum over micro-batches, so the cut changes no gradient."""
    if shared:
        chunk = _by_prompt(chunk)
        return [list(chunk[s : s + micro_batch]) for s in range(0, len(chunk), micro_batch)]
    rows = sorted(chunk, key=lambda r: len(r.prompt_ids) + len(r.completion_ids), reverse=True)
    if not rows:
        return []
    budget = micro_batch * (len(rows[0].prompt_ids) + len(rows[0].completion_ids))
    logits_budget = micro_batch * max(len(r.completion_ids) for r in rows)
    out: list[list[Rollout]] = []
    for r in rows:
        batch = out[-1] if out else None
        if batch:
            n, widest = len(batch) + 1, len(batch[0].prompt_ids) + len(batch[0].completion_ids)
            completion = max(len(r.completion_ids), *(len(x.completion_ids) for x in batch))
            if n * widest <= budget and n * completion <= logits_budget:
                batch.append(r)
                continue
        out.append([r])
    return out


def completion_values(batch: Sequence[Rollout], values: Sequence[Sequence[float]], device) -> torch.Tensor:
    """Per-token ``values`` of each rollout's completion as one float32 tensor (len(batch),
    longest completion), left-aligned: the layout both log-prob paths return."""
    width = max(len(r.completion_ids) for r in batch)
    rows = [[float(x) for x in v] + [0.0] * (width - len(v)) for v in values]
    return torch.tensor(rows, dtype=torch.float32, device=device)


class _TargetLogprobs(torch.autograd.Function):
    """x_target − logsumexp x per position, in float32 a chunk of positions at a time, forward and
    backward: autograd keeps only the logits (in their own dtype) and one float32 logsumexp per
    position, never a float32 copy of the vocabulary-wide logits (which ``logsumexp`` on a
    ``.float()`` chunk saves for its backward: chunking then bounded nothing)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
        picked, lse = [], []
        for s in range(0, logits.shape[1], chunk):
            part = logits[:, s : s + chunk].float()  # (B, c, V), freed at the end of the iteration
            lse.append(torch.logsumexp(part, -1))
            picked.append(part.gather(-1, targets[:, s : s + chunk, None]).squeeze(-1))
        lse_t = torch.cat(lse, dim=1)
        ctx.save_for_backward(logits, targets, lse_t)
        ctx.chunk = chunk
        return torch.cat(picked, dim=1) - lse_t

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        out = torch.empty_like(logits)
        for s in range(0, logits.shape[1], ctx.chunk):
            g = grad[:, s : s + ctx.chunk, None].float()
            part = (logits[:, s : s + ctx.chunk].float() - lse[:, s : s + ctx.chunk, None]).exp_().mul_(-g)
            part.scatter_add_(-1, targets[:, s : s + ctx.chunk, None], g)  # d/dx (x_t − lse) = onehot − softmax
            out[:, s : s + ctx.chunk] = part
        return out, None, None


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """log-softmax of ``logits`` (B, T, V) at ``targets`` (B, T), in float32 ``chunk`` positions at a
    time (x_target − logsumexp x): the full-vocabulary float32 copy is never whole, in the forward,
    in what autograd keeps, or in the backward (``_TargetLogprobs``)."""
    return _TargetLogprobs.apply(logits, targets, chunk)


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
    """Right-padded ids, attention mask, completion mask and old log-probs, aligned to targets (the
    plain layout tests compare both log-prob paths with),
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
    """``prefix.shared_prompt_logprobs``'s triple (each (len(batch), longest completion),
    completions left-aligned), every (prompt + completion) run whole: prompts left-padded and
    completions right-padded, with positions counted from each row's first real token, so every
    completion starts at the same column and only completion positions are projected to the
    vocabulary, whatever the mix of prompt lengths (right-padding whole sequences projected from
    the shortest prompt's end: ~2,000 positions a row where 1,024 were completions)."""
    device = model_device(model)
    p_max = max(len(r.prompt_ids) for r in batch)
    c_max = max(len(r.completion_ids) for r in batch)
    ids, attn, comp, old = [], [], [], []
    for r in batch:
        lead, tail = p_max - len(r.prompt_ids), c_max - len(r.completion_ids)
        ids.append([pad_id] * lead + [*r.prompt_ids, *r.completion_ids] + [pad_id] * tail)
        attn.append([0] * lead + [1] * (len(r.prompt_ids) + len(r.completion_ids)) + [0] * tail)
        comp.append([1.0] * len(r.completion_ids) + [0.0] * tail)
        old.append([float(x) for x in r.old_logprobs] + [0.0] * tail)
    long, f32 = {"dtype": torch.long, "device": device}, {"dtype": torch.float32, "device": device}
    ids_t, attn_t = torch.tensor(ids, **long), torch.tensor(attn, **long)
    positions = (attn_t.cumsum(-1) - 1).clamp_min(0)
    # the last c_max + 1 positions: p_max − 1 (predicts the first completion token) … the end
    logits = model(input_ids=ids_t, attention_mask=attn_t, position_ids=positions, logits_to_keep=c_max + 1).logits
    logp = target_logprobs(logits[:, :-1], ids_t[:, p_max:], chunk)  # (B, c_max)
    return logp, torch.tensor(comp, **f32), torch.tensor(old, **f32)
