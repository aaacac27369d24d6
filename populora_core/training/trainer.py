"""The update of one adapter from its own rollouts.

``Trainer`` holds one PEFT LoRA slot on the base model: each update loads an adapter's factors
into it, trains them and reads them back (``extract_adapter``), so updates of different
adapters share one model and never see each other's weights. ``update_adapter`` trains the
named adapter of a PEFT model, the only parameters it marks trainable. Micro-batches of
``micro_batch_size`` sequences accumulate gradients over the whole batch;
the model returns logits for completion positions only (in its own dtype), and
the float32 log-softmax over the vocabulary is taken a chunk of positions at a time. Optimizer state is
returned (and stored beside the adapter by the caller) so training resumes
exactly.

Sampler/learner agreement: every update measures |log π_sampler − log π_learner| over the
tokens of its first optimizer step (all of them with ``grpo.old_logprobs: learner``, which
recomputes π_old before that step) and reports its mean, 99th percentile and the spread of
the ratio π_learner / π_sampler (``sampler_*`` metrics; ``training/grpo.py`` has the loss).
Metric names are the train_metrics columns they become (``stages.learn``), and what tracking
logs per adapter as ``train/<adapter>/<name>``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeVar

import torch
from tqdm.auto import tqdm

from populora_core.training.device import autocast_for, back_to_eval, enable_checkpointing, return_freed_memory
from populora_core.training.grpo import policy_loss
from populora_core.training.prefix import shared_prompt_logprobs
from populora_core.training.rollouts import (
    Rollout,
    completion_values,
    micro_batches,
    model_device,
    whole_sequence_logprobs,
)

if TYPE_CHECKING:  # the config (pydantic) only types: benchmarks/gpu_check.py runs without it
    from populora_core.config import GRPOConfig, PopulationConfig
    from populora_core.population.lora import LoraAdapter


def _rows(values: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Each sequence's completion-token entries of ``values`` (either log-prob layout), on the CPU."""
    values, mask = values.detach().float().cpu(), mask.detach().cpu() > 0
    return [values[i][mask[i]] for i in range(values.shape[0])]


def _importance_weights(batch: Sequence[Rollout], old: torch.Tensor, cap: float) -> torch.Tensor:
    """w = min(π_old / π_sampler, cap) per token, π_old the learner's (``old``)."""
    sampler = completion_values(batch, [r.sampler_logprobs for r in batch], old.device)
    return torch.exp(old - sampler).clamp(max=cap)


def _minibatch_step(
    model,
    chunk: Sequence[Rollout],
    params,
    config: GRPOConfig,
    pad_id: int,
    autocast,
    sums,
    shared: bool,
    measured: list | None = None,
    micro_batch: int | None = None,
) -> float:
    """Gradients of one minibatch (token-mean over it, micro-batch by micro-batch: ``micro_batches``
    at ``micro_batch`` sequences, default ``config.micro_batch_size``); returns the clipped norm.
    ``shared``: each distinct prompt of a micro-batch runs once (``prefix``). ``measured``: gets
    (learner's, π_old's) log-probs of each sequence, before this step."""
    micro_batch = micro_batch or config.micro_batch_size
    chunk_tokens = sum(len(r.completion_ids) for r in chunk)
    logprobs = shared_prompt_logprobs if shared else whole_sequence_logprobs
    cap = config.importance_cap
    for batch in micro_batches(chunk, micro_batch, shared):
        adv = torch.tensor([r.advantage for r in batch], dtype=torch.float32, device=model_device(model))
        with autocast:
            logp, comp, old = logprobs(model, batch, pad_id, config.logprob_chunk)
        if measured is not None:
            measured += zip(_rows(logp, comp), _rows(old, comp), strict=True)
        ref = None
        if config.kl_coef > 0:
            no_adapter = model.disable_adapter() if hasattr(model, "disable_adapter") else nullcontext()
            with torch.no_grad(), no_adapter, autocast:
                ref = logprobs(model, batch, pad_id, config.logprob_chunk)[0]
        weights = _importance_weights(batch, old, cap) if cap is not None else None
        loss, metrics = policy_loss(logp, old, adv, comp, config.clip_eps, ref, config.kl_coef, weights)
        weight = comp.sum() / max(1, chunk_tokens)  # token-mean over the minibatch
        (loss * weight).backward()
        sums["loss"] += float(loss.detach()) * float(weight)
        sums["clip_frac"] += metrics["clip_frac"] * float(weight)
        sums["kl"] += metrics.get("kl", 0.0) * float(weight)
    return float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))


def learner_logprobs(
    model, rollouts: Sequence[Rollout], config: GRPOConfig, pad_id: int, autocast, shared: bool
) -> list[list[float]]:
    """log π of every rollout's completion tokens under the model as it is (no gradients),
    micro-batch by micro-batch on the update's own path: π_old for ``grpo.old_logprobs: learner``."""
    logprobs = shared_prompt_logprobs if shared else whole_sequence_logprobs
    out: list[list[float]] = []
    with torch.no_grad():
        for s in range(0, len(rollouts), config.micro_batch_size):
            batch = rollouts[s : s + config.micro_batch_size]
            with autocast:
                logp, comp, _ = logprobs(model, batch, pad_id, config.logprob_chunk)
            out += [row.tolist() for row in _rows(logp, comp)]
    return out


def _with_learners_old(model, rollouts, config, pad_id, autocast, shared) -> tuple[list[Rollout], dict]:
    """``rollouts`` with π_old recomputed by the learner (the sampler's kept for the importance
    weights), and the agreement over all their tokens."""
    learner = learner_logprobs(model, rollouts, config, pad_id, autocast, shared)
    pairs = list(zip(learner, [r.old_logprobs for r in rollouts], strict=True))
    rollouts = [
        replace(r, old_logprobs=lp, sampler_logprobs=r.old_logprobs) for r, lp in zip(rollouts, learner, strict=True)
    ]
    return rollouts, sampler_agreement(pairs, config.importance_cap)


def sampler_agreement(pairs: Sequence[tuple], cap: float | None = None) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's, over every token of ``pairs``
    ((learner's, sampler's) per sequence): the mean and 99th percentile of the absolute
    difference, the spread (std) and maximum of the ratio π_learner / π_sampler, the tokens
    counted, and with ``cap`` the share of tokens whose weight it truncates."""
    if not pairs:
        return {}
    learner = torch.cat([torch.as_tensor(a, dtype=torch.float64, device="cpu") for a, _ in pairs])
    sampler = torch.cat([torch.as_tensor(b, dtype=torch.float64, device="cpu") for _, b in pairs])
    if learner.numel() == 0:
        return {}
    gap, ratio = (learner - sampler).abs(), torch.exp(learner - sampler)
    out = {
        "sampler_gap_mean": float(gap.mean()),
        "sampler_gap_p99": float(torch.quantile(gap, 0.99)),
        "sampler_ratio_std": float(ratio.std(unbiased=False)),
        "sampler_ratio_max": float(ratio.max()),
        "sampler_tokens": float(learner.numel()),
    }
    if cap is not None:
        out["truncated_frac"] = float((ratio > cap).double().mean())
    return out


def trainable_parameters(model, adapter_id: str) -> list[torch.nn.Parameter]:
    """The parameters of ``adapter_id`` only, marked trainable; all others frozen."""
    params = []
    for name, p in model.named_parameters():
        mine = f".{adapter_id}." in name and "lora_" in name
        p.requires_grad_(mine)
        if mine:
            params.append(p)
    if not params:
        raise KeyError(f"adapter {adapter_id!r} has no LoRA parameters in the model")
    return params


def old_logprobs_source(config: GRPOConfig, *, low_precision: bool) -> str:
    """``grpo.old_logprobs`` made concrete: ``auto`` is the learner's own log-probs on a
    bf16/fp16 base (sampling and scoring round differently there), the sampler's on a float32
    one (they agree to ~1e-6). The vLLM backend's ``auto`` is resolved to ``learner`` before
    the update is sent (``stages.learn``)."""
    if config.old_logprobs != "auto":
        return config.old_logprobs
    return "learner" if low_precision else "sampler"


def update_adapter(
    model,
    adapter_id: str,
    rollouts: Sequence[Rollout],
    config: GRPOConfig,
    *,
    pad_id: int = 0,
    optimizer_state: dict | None = None,
    generator: torch.Generator | None = None,
) -> tuple[dict[str, float], dict]:
    """One update of ``adapter_id`` on ``rollouts``; returns (metrics, optimizer state).
    ``generator`` shuffles the rollouts before they are split into ``config.minibatches``
    (so a baseline's solver samples do not all precede its proposals); None keeps their order."""
    started = time.perf_counter()
    model.set_adapter(adapter_id)
    params = trainable_parameters(model, adapter_id)
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    if optimizer_state:
        optimizer.load_state_dict(optimizer_state)
    model.train()
    checkpointing = enable_checkpointing(model, config.gradient_checkpointing)
    total_tokens = sum(len(r.completion_ids) for r in rollouts)
    autocast = autocast_for(model)
    sums = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0}
    steps, grad_norm = 0, 0.0
    if generator is not None:
        order = torch.randperm(len(rollouts), generator=generator, device="cpu").tolist()  # the generator's device
        rollouts = [rollouts[i] for i in order]
    shared, agreement = not checkpointing, {}
    old = old_logprobs_source(config, low_precision=not isinstance(autocast, nullcontext))
    if old == "learner":
        rollouts, agreement = _with_learners_old(model, rollouts, config, pad_id, autocast, shared)
    parts = min(config.minibatches, len(rollouts))
    bounds = [round(i * len(rollouts) / parts) for i in range(parts + 1)]
    room = {"micro_batch": config.micro_batch_size, "splits": 0}
    for _ in range(config.epochs):
        for lo, hi in itertools.pairwise(bounds):
            chunk = rollouts[lo:hi]
            first = steps == 0 and old == "sampler"
            seen: list | None = [] if first else None
            grad_norm = _fitting_step(
                model, optimizer, chunk, params, config, pad_id, autocast, sums, shared, seen, room
            )
            if seen is not None:
                agreement = sampler_agreement(seen, config.importance_cap)
            optimizer.step()
            steps += 1
    optimizer.zero_grad(set_to_none=True)
    back_to_eval(model, params, checkpointing)
    sums |= {"steps": steps, "grad_norm": grad_norm, "tokens": total_tokens, "epochs": config.epochs}
    sums["seconds"] = time.perf_counter() - started
    return _update_metrics(sums, room) | agreement, to_cpu(optimizer.state_dict())


def _update_metrics(sums: dict, room: dict) -> dict[str, float]:
    """An update's metrics from its running sums (loss, clip fraction and KL summed over its
    steps) and the micro-batch it ended with (``room``)."""
    steps = sums["steps"]
    return {
        "loss": sums["loss"] / steps,
        "clip_frac": sums["clip_frac"] / steps,
        "kl": sums["kl"] / steps,
        "grad_norm": sums["grad_norm"],
        "steps": float(steps),
        "tokens": float(sums["tokens"]),
        "seconds": sums["seconds"],
        "tokens_per_s": sums["tokens"] * sums["epochs"] / sums["seconds"],
        "micro_batch": float(room["micro_batch"]),
        "oom_splits": float(room["splits"]),
    }


def _fitting_step(model, optimizer, chunk, params, config, pad_id, autocast, sums, shared, seen, room) -> float:
    """``_minibatch_step`` from zero gradients at the micro-batch size in ``room``. A micro-batch
    that runs out of device memory halves that size (for the rest of the update; ``room``
    counts the splits) and the minibatch is computed again from zero gradients: from there on
    the update is the smaller ``grpo.micro_batch_size``'s (the loss is a token-weighted sum over
    micro-batches; split in the first minibatch, the whole update is). Out of memory at one
    sequence is raised."""
    while True:
        optimizer.zero_grad(set_to_none=True)
        kept_sums, kept_seen = dict(sums), None if seen is None else list(seen)
        try:
            micro = room["micro_batch"]
            return _minibatch_step(model, chunk, params, config, pad_id, autocast, sums, shared, seen, micro)
        except torch.OutOfMemoryError:
            if room["micro_batch"] == 1:
                raise
        sums.update(kept_sums)
        if seen is not None:
            seen[:] = kept_seen
        room["micro_batch"], room["splits"] = room["micro_batch"] // 2, room["splits"] + 1
        optimizer.zero_grad(set_to_none=True)
        return_freed_memory()  # the failed micro-batch's blocks back before the smaller one


def to_cpu(value):
    """``value`` (an optimizer state: nested dicts and lists of tensors) with every tensor on
    the CPU: what is stored is loadable on any machine."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


def extract_adapter(model, adapter_id: str):
    """The current weights of ``adapter_id`` in a PEFT model, as a LoraAdapter
    (to be written with ``population.adapters.save_adapter``)."""
    from populora_core.population.lora import LoraAdapter, LoraFactors

    modules = {}
    rank = alpha = None
    for name, module in model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        if lora_a is None or adapter_id not in lora_a:
            continue
        path = name.removeprefix("base_model.model.")
        modules[path] = LoraFactors(
            A=lora_a[adapter_id].weight.detach().to("cpu", torch.float32, copy=True),  # files are written from the CPU
            B=module.lora_B[adapter_id].weight.detach().to("cpu", torch.float32, copy=True),
        )
        rank = module.r[adapter_id]
        alpha = module.lora_alpha[adapter_id]
    if not modules:
        raise KeyError(f"adapter {adapter_id!r} is not in the model")
    return LoraAdapter(modules=modules, rank=int(rank), alpha=float(alpha))


T = TypeVar("T")
R = TypeVar("R")


class TrainerPool(Protocol):
    """Whatever runs independent adapter updates: ``Trainer`` (one after another in this
    process) or ``cluster.RayTrainer`` (one Ray task each, on the nodes with room)."""

    def map(self, fn: Callable[[Trainer, T], R], jobs: Sequence[T], *, desc: str | None = None) -> list[R]:
        """``[fn(trainer, job) for job in jobs]``, in order."""
        ...


class Trainer:
    """One PEFT LoRA slot on a base model; ``update`` trains given factors in it."""

    SLOT = "member"

    def __init__(self, model, tokenizer, population: PopulationConfig) -> None:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=population.rank,
            lora_alpha=population.alpha,
            target_modules=list(population.target_modules),
            lora_dropout=0.0,
        )
        self.model = get_peft_model(model, lora, adapter_name=self.SLOT).eval()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._modules = {
            name.removeprefix("base_model.model."): module
            for name, module in self.model.named_modules()
            if self.SLOT in getattr(module, "lora_A", {})
        }

    def load(self, adapter: LoraAdapter) -> None:
        missing = set(self._modules) ^ set(adapter.modules)
        if missing:
            raise ValueError(f"adapter modules do not match the trainer's: {sorted(missing)[:4]}")
        with torch.no_grad():
            for name, f in adapter:
                module = self._modules[name]
                module.lora_A[self.SLOT].weight.copy_(f.A)
                module.lora_B[self.SLOT].weight.copy_(f.B)

    def update(
        self,
        adapter,
        rollouts: Sequence[Rollout],
        config,
        optimizer_state: dict | None,
        *,
        seed: int | None = None,
    ) -> tuple[LoraAdapter, dict[str, float], dict]:
        """(new factors, metrics, optimizer state) after one GRPO update of ``adapter``;
        ``seed`` shuffles the rollouts into minibatches."""
        self.load(adapter)
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        metrics, state = update_adapter(
            self.model,
            self.SLOT,
            rollouts,
            config,
            pad_id=self.pad_id,
            optimizer_state=optimizer_state,
            generator=generator,
        )
        adapter = extract_adapter(self.model, self.SLOT)
        return_freed_memory()
        return adapter, metrics, state

    def map(self, fn: Callable[[Trainer, T], R], jobs: Sequence[T], *, desc: str | None = None) -> list[R]:
        """``[fn(self, job) for job in jobs]`` with a progress bar: independent updates, one after
        another (``cluster.RayTrainer.map`` runs them as one Ray task each)."""
        with tqdm(jobs, desc=desc, unit="adapter", leave=False, disable=desc is None) as bar:  # closed on errors too
            return [fn(self, job) for job in bar]
