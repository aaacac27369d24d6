"""Sampler/learner agreement and its correction (training/trainer.py, training/grpo.py): the
metric is ~0 when the sampler is the learner (on a tiny model, and on SmolLM2-135M sampled
through the HF backend in fp32), moves when the sampler is broken, and
``grpo.old_logprobs: learner`` with ``grpo.importance_cap`` bounds what a broken sampler does."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.config import ConfigError, GRPOConfig, PopulationConfig, RatingConfig, load_config
from populora_core.inference.base import GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter
from populora_core.training.grpo import policy_loss
from populora_core.training.rollouts import Rollout, token_logprobs
from populora_core.training.trainer import Trainer, sampler_agreement, update_adapter
from tests.helpers import TINY_QWEN2


@pytest.fixture
def model():
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2))
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights="gaussian")
    return get_peft_model(base, lora, adapter_name="alice").eval()


def sampled(model) -> list[Rollout]:
    """Rollouts whose log-probs the model itself computed (as the HF backend's are): two prompts,
    three completions each, mixed advantages."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for prompt in ([1, 2, 3], [4, 5, 6, 7, 8]):
        for k, adv in enumerate((1.0, -1.0, 0.5)):
            completion = torch.randint(2, 60, (3 + k,), generator=gen).tolist()
            ids = torch.tensor([prompt + completion])
            with torch.no_grad():
                lp = token_logprobs(model, ids, torch.ones_like(ids), chunk=4)[0, len(prompt) - 1 :].tolist()
            out.append(Rollout(prompt, completion, lp, adv))
    return out


def broken(rollouts: list[Rollout], shift: float) -> list[Rollout]:
    """A stand-in for a broken sampler (named as such): its log-probs moved by ``shift``."""
    return [replace(r, old_logprobs=[x + shift for x in r.old_logprobs]) for r in rollouts]


def cfg(**kw) -> GRPOConfig:
    return GRPOConfig(learning_rate=1e-3, micro_batch_size=2, **kw)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["shared-prompt", "whole-sequence"])
@pytest.mark.parametrize("old", ["sampler", "learner"])
def test_the_sampler_is_the_learner_on_hf_so_the_gap_is_zero(model, checkpointing, old):
    metrics, _ = update_adapter(
        model, "alice", sampled(model), cfg(gradient_checkpointing=checkpointing, old_logprobs=old)
    )
    assert metrics["sampler_tokens"] == sum(3 + k for k in range(3)) * 2
    assert metrics["sampler_gap_mean"] < 1e-5 and metrics["sampler_gap_p99"] < 1e-5
    assert metrics["sampler_ratio_std"] < 1e-5


def test_a_broken_sampler_moves_the_metric_and_the_cap_bounds_the_update(model):
    clean, shift, cap = sampled(model), -3.0, 2.0  # the sampler thinks its tokens e^3 times less likely
    runs = {}
    for name, rollouts, config in [
        ("clean", clean, cfg()),
        ("broken", broken(clean, shift), cfg()),
        ("corrected", broken(clean, shift), cfg(old_logprobs="learner", importance_cap=cap)),
    ]:
        m = copy.deepcopy(model)
        runs[name] = update_adapter(m, "alice", rollouts, config)[0]
    assert runs["clean"]["sampler_gap_mean"] < 1e-5
    assert runs["broken"]["sampler_gap_mean"] == pytest.approx(3.0, abs=1e-4)
    assert runs["broken"]["sampler_ratio_max"] == pytest.approx(math.exp(3.0), rel=1e-3)
    # uncorrected, the clipped ratio is e^3 on every token: the negative-advantage tokens' gradient is
    # multiplied by it, the positive ones' is clipped to zero
    assert runs["broken"]["grad_norm"] > 5 * runs["clean"]["grad_norm"]
    # corrected: ρ = π_θ / π_learner is 1 at the step, every weight is truncated to C, so the
    # gradient is C times the clean one, exactly
    assert runs["corrected"]["truncated_frac"] == 1.0
    assert runs["corrected"]["grad_norm"] == pytest.approx(cap * runs["clean"]["grad_norm"], rel=1e-4)


def test_the_weighted_loss_is_the_papers_formula():
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    old = torch.tensor([[-1.5, -1.0, -0.5]])
    sampler = torch.tensor([[-1.2, -3.0, -0.1]])
    adv, mask, eps, cap = torch.tensor([-1.0]), torch.tensor([[1.0, 1.0, 0.0]]), 0.2, 2.0
    w = torch.exp(old - sampler).clamp(max=cap)
    loss, _ = policy_loss(logp, old, adv, mask, eps, weights=w)
    by_hand = 0.0
    for t in range(2):  # the masked third token counts for nothing
        rho = math.exp(float(logp[0, t] - old[0, t]))
        a = float(adv[0])
        by_hand += min(math.exp(float(old[0, t] - sampler[0, t])), cap) * min(
            rho * a, min(max(rho, 1 - eps), 1 + eps) * a
        )
    assert float(loss) == pytest.approx(-by_hand / 2, rel=1e-6)
    unweighted, _ = policy_loss(logp, old, adv, mask, eps)
    assert float(policy_loss(logp, old, adv, mask, eps, weights=torch.ones_like(w))[0]) == pytest.approx(
        float(unweighted)
    )


def test_agreement_figures_on_known_pairs():
    pairs = [([0.0, -1.0], [0.0, -1.5]), ([-2.0], [-2.0])]
    out = sampler_agreement(pairs, cap=1.5)
    assert out["sampler_gap_mean"] == pytest.approx(0.5 / 3)
    assert out["sampler_ratio_max"] == pytest.approx(math.exp(0.5))
    assert out["truncated_frac"] == pytest.approx(1 / 3)  # e^0.5 = 1.65 > 1.5
    assert out["sampler_tokens"] == 3 and sampler_agreement([]) == {}


def test_a_cap_without_the_learners_old_logprobs_is_refused():
    with pytest.raises(ConfigError, match="old_logprobs: learner"):
        load_config(preset="cpu-tiny", overrides=["grpo.importance_cap=2"])
    load_config(preset="cpu-tiny", overrides=["grpo.importance_cap=2", "grpo.old_logprobs=learner"])


@pytest.fixture(scope="module")
def smollm_sampled(tmp_path_factory):
    """Completions sampled by the HF backend (the real SmolLM2-135M in fp32, two LoRA members),
    with a learner on a separate copy of the model, as the update stage has it."""
    path = resolve_model("embedded:smollm2-135m-instruct")
    model, tokenizer = load_model(path, dtype="float32")  # fp32 whatever the CPU (auto is bf16 on some)
    population = PopulationConfig(teachers=1, students=1, rank=8, alpha=16, init_b_std=0.02)
    members, adapters = create_population(
        population, RatingConfig(), lora_shapes_from_model(model, population.target_modules), 0
    )
    backend = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=8)
    root = tmp_path_factory.mktemp("adapters")
    ids = [m.adapter_id for m in members]
    for a in ids:
        save_adapter(adapters[a], root / a)
        backend.load_adapter(a, root / a)
    prompts = [  # two lengths, so the batch is left-padded
        [{"role": "user", "content": "Write a Python function f that reverses a list."}],
        [{"role": "user", "content": "Write a Python function f(x) whose output is hard to predict, and an input."}],
    ]
    requests = [
        GenerationRequest(p, adapter=a, n=2, seed=i) for i, (a, p) in enumerate((a, p) for a in ids for p in prompts)
    ]
    # not temperature 1: the sampler must record the model's log π, not the tempered one it drew from
    params = SamplingParams(temperature=0.7, top_k=50, max_new_tokens=24)
    completions = backend.generate(requests, params)
    learner_model, _ = load_model(path, dtype="float32")
    trainer = Trainer(learner_model, tokenizer, population)
    by_adapter = {a: [] for a in ids}
    for request, samples in zip(requests, completions, strict=True):
        for k, c in enumerate(samples):
            by_adapter[request.adapter].append(
                Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), 1.0 if k == 0 else -1.0)
            )
    return trainer, adapters, by_adapter


@pytest.mark.heavy  # the real SmolLM2 samples
@pytest.mark.parametrize("old", ["sampler", "learner"])
def test_hf_samples_are_scored_by_the_learner_within_1e_4_in_fp32(smollm_sampled, old):
    """The HF backend's sampled tokens and log-probs (KV-cached decode, left padding, mixed
    adapters in a batch) against the learner's full forward pass under the same adapter: the
    gap an update measures is rounding only. Scored under the other member's factors, the same
    tokens are far off, so the figure does read which adapter sampled them."""
    trainer, adapters, by_adapter = smollm_sampled
    ids = list(by_adapter)
    config = GRPOConfig(learning_rate=1e-4, micro_batch_size=4, old_logprobs=old)
    for a in ids:
        _, metrics, _ = trainer.update(adapters[a], by_adapter[a], config, None)
        assert metrics["sampler_tokens"] == sum(len(r.completion_ids) for r in by_adapter[a]) > 40
        assert metrics["sampler_gap_p99"] < 1e-4, metrics
        assert metrics["sampler_ratio_std"] < 1e-4
    _, swapped, _ = trainer.update(adapters[ids[1]], by_adapter[ids[0]], config, None)
    assert swapped["sampler_gap_mean"] > 1e-2, swapped  # seen: 0.073 (in place: 2.7e-6)
