"""Advantages and the clipped policy-gradient loss (pure functions).

GRPO (Shao et al., 2024) as Absolute Zero Reasoner uses it, with task-relative
baselines: rewards are normalised within each group (role × task type),
    Â_i = (r_i − mean_g(r)) / (std_g(r) + ε).
REINFORCE++-baseline (Hu et al., 2025): Â_i = (r_i − mean_g(r)) / (std_batch + ε),
the group mean as baseline and one batch-wide scale.

Loss, per completion token t of sequence i (PPO clipping, token-mean):
    ρ_it = exp(log π_θ − log π_old),
    L = −mean[min(ρ_it Â_i, clip(ρ_it, 1 − ε, 1 + ε) Â_i)] + β · mean[k3],
    k3 = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1   (Schulman's KL estimator).
What is dropped from GRPO: no reference model unless β > 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def _group_stats(rewards: torch.Tensor, groups: Sequence[Hashable]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and (population) std of its group."""
    mean = torch.empty_like(rewards)
    std = torch.empty_like(rewards)
    for g in dict.fromkeys(groups):
        idx = torch.tensor([i for i, x in enumerate(groups) if x == g])
        mean[idx] = rewards[idx].mean()
        std[idx] = rewards[idx].std(unbiased=False)
    return mean, std


def grpo_advantages(rewards: torch.Tensor, groups: Sequence[Hashable], eps: float = 1e-6) -> torch.Tensor:
    """Â = (r − mean_g) / (std_g + ε) within each group. rewards: (N,)."""
    mean, std = _group_stats(rewards, groups)
    return (rewards - mean) / (std + eps)


def reinforce_pp_advantages(rewards: torch.Tensor, groups: Sequence[Hashable], eps: float = 1e-6) -> torch.Tensor:
    """Â = (r − mean_g) / (std of (r − mean_g) over the batch + ε). rewards: (N,)."""
    mean, _ = _group_stats(rewards, groups)
    centred = rewards - mean
    return centred / (centred.std(unbiased=False) + eps)


ADVANTAGES = {"grpo": grpo_advantages, "reinforce_pp": reinforce_pp_advantages}


def compute_advantages(rewards: torch.Tensor, groups: Sequence[Hashable], kind: str) -> torch.Tensor:
    """Advantages by the estimator ``kind`` (``GRPOConfig.advantage``); a miss lists the valid names."""
    try:
        estimator = ADVANTAGES[kind]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {kind!r}; valid: {sorted(ADVANTAGES)}") from None
    return estimator(rewards, groups)


def policy_loss(
    logp: torch.Tensor,  # (B, T) log π_θ of the taken tokens
    logp_old: torch.Tensor,  # (B, T) log π_old, from generation
    advantages: torch.Tensor,  # (B,)
    mask: torch.Tensor,  # (B, T) 1 on completion tokens
    clip_eps: float = 0.2,
    logp_ref: torch.Tensor | None = None,  # (B, T) log π_ref, when kl_coef > 0
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate (module docstring); returns (loss, metrics)."""
    ratio = torch.exp(logp - logp_old)  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    n = mask.sum().clamp_min(1)
    loss = -(surrogate * mask).sum() / n
    metrics = {"clip_frac": float((((ratio - 1).abs() > clip_eps) * mask).sum() / n)}
    if logp_ref is not None and kl_coef > 0:
        d = logp_ref - logp
        kl = ((torch.exp(d) - d - 1) * mask).sum() / n
        loss = loss + kl_coef * kl
        metrics["kl"] = float(kl)
    return loss, metrics
