"""Advantages and the clipped policy-gradient loss (pure functions).

Baseline groups (``GRPOConfig.advantage`` picks one family, ``advantage_groups``
builds the groups of one generation's samples):
- task groups, after Absolute Zero Reasoner's task-relative baselines (TRR++: one
  baseline per task type × role over the whole batch): every (role, task type)
  is one group, pooled over all adapters of that role in the generation, so a
  teacher's three proposals over three task types still have a baseline.
- prompt groups (GRPO, Shao et al., 2024): a student's group is the G samples it
  drew for one problem. A proposal prompt is sampled once, so teachers keep task groups.
A group with one member, or whose rewards are all equal, has no contrast of its
own (its advantages would be 0 and its samples wasted): its samples fall back to
the next wider group (prompt → task → role, the role group being every sample of
that role in the generation). So an adapter gets no signal only when every
reward of its role is equal; config validation makes sure a role group always
has two members.

**A deviation from GRPO, on purpose** (``grpo.fallback: wider``, the default). Textbook
GRPO gives a prompt whose G samples are all right or all wrong an advantage of 0 (DAPO
drops such prompts). At the solve rates a small model reaches (~15%), most student
prompt groups are all wrong, and the fallback compares those samples with the task
group's, pooled over the role: a student then learns which problems it fails more than
others (a difficulty signal across problems), not only which of its answers to one
problem were better. ``grpo.fallback: none`` is plain GRPO: the narrowest group is kept,
flat or not.

Estimators over those groups:
    GRPO:                  Â_i = (r_i − mean_g(r)) / (std_g(r) + ε)
    REINFORCE++-baseline:  Â_i = (r_i − mean_g(r)) / (std over the role's batch of (r − mean_g) + ε)
    (Hu et al., 2025: the group mean as baseline, one batch-wide scale).

Loss, per completion token t of sequence i (PPO clipping, token-mean):
    ρ_it = exp(log π_θ − log π_old),
    L = −mean[min(ρ_it Â_i, clip(ρ_it, 1 − ε, 1 + ε) Â_i)] + β · mean[k3],
    k3 = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1   (Schulman's KL estimator).
What is dropped from GRPO: no reference model unless β > 0.

π_old (``grpo.old_logprobs``): the sampler's log-probs as generation returned them
(``sampler``), or the learner's own before its first optimizer step (``learner``). The
sampler (vLLM: other kernels, bf16, its own LoRA path) is not exactly the learner, so with
``sampler`` ρ ≠ 1 before any step. With ``learner`` and ``grpo.importance_cap`` C, the
sampler/learner mismatch is corrected by truncated importance sampling (F. Yao et al., "Your
efficient RL framework secretly brings you off-policy RL training", 2025):
    w_it = min(π_learner_old / π_sampler, C)   (no gradient),
    L = −mean[w_it · min(ρ_it Â_i, clip(ρ_it, 1 − ε, 1 + ε) Â_i)] + β · mean[k3],
with ρ_it = π_θ / π_learner_old.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch


@dataclass(frozen=True)
class Estimator:
    """One ``GRPOConfig.advantage``: how students are grouped and how advantages are scaled."""

    prompt_groups: bool
    """Students: the G samples of one problem form the first candidate group (GRPO)."""
    scale: Literal["group", "batch"]
    """Divide r − mean_g by the group's std (GRPO) or by the std over the batch (REINFORCE++)."""


ESTIMATORS: dict[str, Estimator] = {
    "prompt_grpo": Estimator(prompt_groups=True, scale="group"),
    "task_grpo": Estimator(prompt_groups=False, scale="group"),
    "task_reinforce_pp": Estimator(prompt_groups=False, scale="batch"),
}


def get_estimator(kind: str) -> Estimator:
    """The estimator registered as ``kind``; a miss lists the valid names."""
    try:
        return ESTIMATORS[kind]
    except KeyError:
        raise KeyError(f"unknown advantage estimator {kind!r}; valid: {sorted(ESTIMATORS)}") from None


def advantage_groups(
    rewards: Sequence[float],
    roles: Sequence[str],
    task_types: Sequence[str],
    prompts: Sequence[Hashable],
    kind: str,
    *,
    fallback: bool = True,
) -> tuple[list[tuple], dict[tuple, list[int]]]:
    """The baseline group of every sample (module docstring), and every group's members.

    Candidates, narrowest first: the prompt group (estimators with ``prompt_groups``,
    students only; ``prompts`` identifies a student's problem, e.g. (student, teacher,
    problem)), the task group (role, task type), the role group. A sample takes the first
    candidate with two members whose rewards differ: a one-member or flat group has no
    contrast of its own (its advantages would all be 0), so its samples are compared with
    the wider group. A sample falls through to a flat role group only when every reward of
    its role is equal. ``fallback=False`` (``grpo.fallback: none``, textbook GRPO): every
    sample keeps its narrowest group, flat or not, and a flat group's advantages are 0."""
    per_prompt = get_estimator(kind).prompt_groups
    candidates = [
        ([("prompt", role, prompt)] if per_prompt and role == "student" else [])
        + [("task", role, task), ("role", role)]
        for role, task, prompt in zip(roles, task_types, prompts, strict=True)
    ]
    members: dict[tuple, list[int]] = {}
    for i, keys in enumerate(candidates):
        for key in keys:
            members.setdefault(key, []).append(i)
    spread = {key: max(rewards[i] for i in idx) - min(rewards[i] for i in idx) for key, idx in members.items()}
    chosen = [next((k for k in keys if spread[k] > 1e-12), keys[-1]) if fallback else keys[0] for keys in candidates]
    return chosen, {k: members[k] for k in dict.fromkeys(chosen)}


def _group_stats(
    rewards: torch.Tensor, groups: Sequence[Hashable], members: Mapping[Hashable, Sequence[int]] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-element mean and (population) std of its group; ``members`` (group → indices)
    when a group's statistics span more samples than the ones assigned to it."""
    assigned: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        assigned.setdefault(g, []).append(i)
    members = assigned if members is None else members
    mean = torch.empty_like(rewards)
    std = torch.empty_like(rewards)
    for g, mine in assigned.items():
        idx = torch.tensor(list(members[g]))
        mean[mine] = rewards[idx].mean()
        std[mine] = rewards[idx].std(unbiased=False)
    return mean, std


def normalised_advantages(
    rewards: torch.Tensor,
    groups: Sequence[Hashable],
    members: Mapping[Hashable, Sequence[int]] | None = None,
    batches: Sequence[Hashable] | None = None,
    *,
    scale: Literal["group", "batch"] = "group",
    eps: float = 1e-6,
) -> torch.Tensor:
    """Â = (r − mean_g) / (σ + ε), σ the std of the sample's group g (``scale="group"``,
    GRPO) or of r − mean_g over its batch (``"batch"``, REINFORCE++-baseline; ``batches``,
    e.g. the role, default one batch of everything). rewards: (N,)."""
    mean, std = _group_stats(rewards, groups, members)
    centred = rewards - mean
    if scale == "batch":
        _, std = _group_stats(centred, batches if batches is not None else [0] * len(rewards))
    return centred / (std + eps)


def compute_advantages(
    rewards: torch.Tensor,
    groups: Sequence[Hashable],
    kind: str,
    members: Mapping[Hashable, Sequence[int]] | None = None,
    batches: Sequence[Hashable] | None = None,
) -> torch.Tensor:
    """Advantages by the estimator ``kind`` (``GRPOConfig.advantage``); a miss lists the valid names."""
    return normalised_advantages(rewards, groups, members, batches, scale=get_estimator(kind).scale)


def policy_loss(
    logp: torch.Tensor,  # (B, T) log π_θ of the taken tokens
    logp_old: torch.Tensor,  # (B, T) log π_old, from generation
    advantages: torch.Tensor,  # (B,)
    mask: torch.Tensor,  # (B, T) 1 on completion tokens
    clip_eps: float = 0.2,
    logp_ref: torch.Tensor | None = None,  # (B, T) log π_ref, when kl_coef > 0
    kl_coef: float = 0.0,
    weights: torch.Tensor | None = None,  # (B, T) truncated importance weights w_it, no gradient
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate (module docstring), each token weighted by ``weights`` when
    given; returns (loss, metrics)."""
    ratio = torch.exp(logp - logp_old)  # (B, T)
    adv = advantages[:, None]  # (B, 1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    if weights is not None:
        surrogate = surrogate * weights.detach()
    n = mask.sum().clamp_min(1)
    loss = -(surrogate * mask).sum() / n
    metrics = {"clip_frac": float((((ratio - 1).abs() > clip_eps) * mask).sum() / n)}
    if logp_ref is not None and kl_coef > 0:
        d = logp_ref - logp
        kl = ((torch.exp(d) - d - 1) * mask).sum() / n
        loss = loss + kl_coef * kl
        metrics["kl"] = float(kl)
    return loss, metrics
