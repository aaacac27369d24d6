"""Log-probabilities of completions that share prompts, with each prompt run once.

A student's G samples of one problem share its prompt, and the prompt is most of
each sequence (cpu-small: ~250 prompt tokens against 40–130 completion tokens).
Padding every (prompt + completion) sequence makes the forward and the backward
pay for the prompt G times. Here the distinct prompts of a micro-batch go through
the model once, with their keys and values kept (and their autograd graph); each
completion then runs on its own prompt's cache, selected by index. Gradients of
the completions' losses flow back through the cache into the prompt's pass once,
summed over its completions: the same gradient as G separate passes, for the
prompt's compute once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from populora_core.inference.base import left_padded
from populora_core.training.rollouts import Rollout, model_device, target_logprobs


def shared_prompt_logprobs(
    model, batch: Sequence[Rollout], pad_id: int, chunk: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log π of each completion token, completion mask, generation-time log-probs), each
    (len(batch), longest completion), completion tokens left-aligned; every distinct prompt
    of ``batch`` runs through ``model`` once."""
    slots: dict[tuple[int, ...], int] = {}
    for r in batch:
        slots.setdefault(tuple(r.prompt_ids), len(slots))
    prompts = list(slots)
    device = model_device(model)
    which = torch.tensor([slots[tuple(r.prompt_ids)] for r in batch], device=device)
    p_ids, p_mask = left_padded(prompts, pad_id, device)
    p_pos = (p_mask.cumsum(-1) - 1).clamp_min(0)
    cache = DynamicCache()
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, cache=cache, logits_to_keep=1)
    width = max(len(r.completion_ids) for r in batch)
    rows = [(r, width - len(r.completion_ids)) for r in batch]
    ids = torch.tensor([[*r.completion_ids] + [pad_id] * n for r, n in rows], dtype=torch.long, device=device)
    f32 = {"dtype": torch.float32, "device": device}
    comp = torch.tensor([[1.0] * len(r.completion_ids) + [0.0] * n for r, n in rows], **f32)
    old = torch.tensor([[float(x) for x in r.old_logprobs] + [0.0] * n for r, n in rows], **f32)
    logp = target_logprobs(out.logits[which][:, -1:], ids[:, :1], chunk)  # each prompt's last position
    if width > 1:
        cache.batch_select_indices(which)  # each completion's own prompt (repeated rows share its graph)
        attn = torch.cat([p_mask[which], comp[:, :-1].long()], dim=1)
        pos = p_pos[which, -1:] + 1 + torch.arange(width - 1, device=device)
        rest = model(
            input_ids=ids[:, :-1], attention_mask=attn, position_ids=pos, cache=cache
        ).logits  # position t predicts completion token t + 1
        logp = torch.cat([logp, target_logprobs(rest, ids[:, 1:], chunk)], dim=1)
    return logp, comp, old
