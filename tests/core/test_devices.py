"""Every tensor the update, the generation and the evolution operators make goes to the device of
what it meets, and what is stored is loadable on the CPU: the bug class that crashes a GPU run at
its first update (ids, masks and advantages built on the CPU and handed to a model on ``cuda``).

This machine has no second device, so the test makes one: torch's default device is set to
``meta`` while the model and the factors sit on the CPU. A tensor the code makes without naming
the device of what it meets then lands on ``meta`` (no data, another device), and the first op
that mixes it with the model's tensors, or reads its values, fails, as a CPU tensor meeting a
CUDA model does on a GPU node. A forward pre-hook also checks that every tensor handed to a
module sits on its parameters' device.
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.population.evolution import MUTATIONS, OPERATORS, apply_operator
from populora_core.population.lora import delta_change
from populora_core.training.rollouts import Rollout
from populora_core.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_check import TARGETS, TINY, StandInTokenizer, build_model, random_adapter


@pytest.fixture
def model():
    model = build_model(TINY, "cpu", torch.float32)
    mismatches: list[str] = []

    def same_device(module, args, kwargs):
        home = next(module.parameters(), None)
        for value in [*args, *kwargs.values()]:
            if isinstance(value, torch.Tensor) and home is not None and value.device != home.device:
                mismatches.append(
                    f"{type(module).__name__} got a tensor on {value.device}, its weights are on {home.device}"
                )

    hooks = [m.register_forward_pre_hook(same_device, with_kwargs=True) for m in model.modules()]
    yield model
    for h in hooks:
        h.remove()
    assert not mismatches, mismatches[:3]


@contextmanager
def off_default_device():
    """Tensors made without a device land on ``meta``, not where the model and factors are.
    (Set after the model and its PEFT slots are built: PEFT leaves ``meta`` weights where they
    are, so a slot made inside would itself be off the model's device.)"""
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def _rollouts(vocab: int, gen: torch.Generator) -> list[Rollout]:
    prompt = torch.randint(2, vocab, (6,), generator=gen, device="cpu").tolist()
    return [  # two samples sharing a prompt, one of another prompt: both the shared and the padded paths
        Rollout(prompt, [5, 6, 7], [-math.log(vocab)] * 3, 1.0),
        Rollout(prompt, [8, 9], [-math.log(vocab)] * 2, -1.0),
        Rollout(prompt[:4], [10, 11, 12, 13], [-math.log(vocab)] * 4, 0.5),
    ]


@pytest.mark.parametrize("checkpointing", [False, True], ids=["shared-prompt", "whole-sequence"])
def test_an_update_makes_its_tensors_on_the_model_device_and_returns_cpu_factors(model, checkpointing):
    gen = torch.Generator().manual_seed(0)
    before = random_adapter(model, 4, 8.0, gen)
    trainer = Trainer(
        model, StandInTokenizer(TINY["vocab_size"]), SimpleNamespace(rank=4, alpha=8.0, target_modules=TARGETS)
    )
    grpo = SimpleNamespace(
        learning_rate=1e-3,
        weight_decay=0.0,
        clip_eps=0.2,
        old_logprobs="sampler",
        importance_cap=None,
        kl_coef=0.05,  # the reference pass (adapter disabled) too
        micro_batch_size=2,
        epochs=1,
        minibatches=2,
        max_grad_norm=1.0,
        logprob_chunk=4,
        gradient_checkpointing=checkpointing,
    )
    rollouts = _rollouts(TINY["vocab_size"], gen)
    with off_default_device():
        after, metrics, state = trainer.update(before, rollouts, grpo, None, seed=3)
        again, _, _ = trainer.update(after, rollouts, grpo, state, seed=4)  # from the stored optimizer state
    assert metrics["steps"] == 2 and math.isfinite(metrics["loss"])
    tensors = [t for _, f in after for t in (f.A, f.B)]
    assert {t.device.type for t in tensors} == {"cpu"}  # written to adapter files from the CPU
    stored = [v for s in state["state"].values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert stored and {t.device.type for t in stored} == {"cpu"}
    with off_default_device():
        assert delta_change(before, after) > 0 and delta_change(after, again) > 0  # they moved


def test_mixed_adapter_generation_makes_its_tensors_on_the_model_device(model):
    backend = HFBackend(None, model=model, tokenizer=StandInTokenizer(TINY["vocab_size"]))
    gen = torch.Generator().manual_seed(1)
    adapters = [random_adapter(model, 4, 8.0, gen) for _ in range(3)]
    requests = [GenerationRequest("abcdef", adapter=a, n=2, seed=i) for i, a in enumerate(["m0", "m1", BASE])]
    requests.append(GenerationRequest("abc", adapter="m0", seed=9))  # another length, another prompt
    for params in (SamplingParams(temperature=1.0, top_k=8, max_new_tokens=4), SamplingParams(max_new_tokens=3)):
        with off_default_device():
            for i in range(2):  # the first one wraps the model's layers (inference.multilora)
                backend.set_adapter(f"m{i}", adapters[i + (params.temperature == 0)])
            out = backend.generate(requests, params)
        assert [len(c) for c in out] == [2, 2, 2, 1]
        assert all(len(c.token_ids) == len(c.logprobs) > 0 for group in out for c in group)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_evolution_operator_makes_its_tensors_beside_the_factors(name):
    model = build_model(TINY, "cpu", torch.float32)
    gen = torch.Generator().manual_seed(2)
    parents = [random_adapter(model, 4, 8.0, gen) for _ in range(1 if name in MUTATIONS else 2)]
    with off_default_device():
        child, _ = apply_operator(name, parents, torch.Generator().manual_seed(5))
    assert {t.device.type for _, f in child for t in (f.A, f.B)} == {"cpu"}
    assert all(torch.isfinite(f.A).all() and torch.isfinite(f.B).all() for _, f in child)
    assert delta_change(parents[0], child) > 0


def test_an_optimizer_state_saved_on_a_gpu_loads_on_the_cpu(tmp_path, monkeypatch):
    """A state file whose storages are tagged ``cuda:0`` (as torch.save tags them on a GPU node)
    loads here: resume and replay of a GPU run work on another machine."""
    from populora_core.population.adapters import load_optimizer_state, save_optimizer_state

    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2, 2)}}, "param_groups": [{"params": [0]}]}
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
    save_optimizer_state(tmp_path, state)
    monkeypatch.undo()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(tmp_path / "optimizer.pt", weights_only=True)  # what a load without map_location does here
    loaded = load_optimizer_state(tmp_path)
    assert loaded["state"][0]["exp_avg"].device.type == "cpu" and torch.equal(
        loaded["state"][0]["exp_avg"], torch.ones(2, 2)
    )
