"""One adapter's update on a tiny model: direction, isolation, resumable optimizer state."""

from __future__ import annotations

import copy
import io
from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.config import GRPOConfig
from populora_core.training.rollouts import Rollout, token_logprobs
from populora_core.training.trainer import micro_batches, old_logprobs_source, update_adapter
from tests.helpers import TINY_QWEN2

TINY = TINY_QWEN2
CFG = GRPOConfig(learning_rate=5e-3, micro_batch_size=2, gradient_checkpointing=False)


@pytest.fixture
def model():
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(**TINY))
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], init_lora_weights="gaussian")
    peft_model = get_peft_model(base, lora, adapter_name="alice")
    peft_model.add_adapter("bob", lora)
    return peft_model.eval()


def seq_logp(model, adapter, prompt, completion):
    model.set_adapter(adapter)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        lp = token_logprobs(model, ids, torch.ones_like(ids), chunk=2)
    return float(lp[0, len(prompt) - 1 :].sum())


def rollouts(model, adapter):
    prompt, good, bad = [1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]
    model.set_adapter(adapter)
    out = []
    for completion, adv in ((good, 1.0), (bad, -1.0)):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            lp = token_logprobs(model, ids, torch.ones_like(ids), chunk=3)[0, len(prompt) - 1 :].tolist()
        out.append(Rollout(prompt, completion, lp, adv))
    return out


def test_token_logprobs_match_the_full_logits(model):
    ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
    with torch.no_grad():
        full = (
            torch.log_softmax(model(input_ids=ids).logits.float(), -1)[0, :-1].gather(-1, ids[0, 1:, None]).squeeze(-1)
        )
        chunked = token_logprobs(model, ids, torch.ones_like(ids), chunk=2)[0]
        tail = token_logprobs(model, ids, torch.ones_like(ids), chunk=2, start=3)[0]
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(tail, full[3:], atol=1e-5, rtol=1e-5)


def test_a_step_moves_probability_towards_positive_advantage(model):
    batch = rollouts(model, "alice")
    good_before = seq_logp(model, "alice", [1, 2, 3], [4, 5, 6, 7])
    bad_before = seq_logp(model, "alice", [1, 2, 3], [8, 9, 10, 11])
    metrics, _ = update_adapter(model, "alice", batch, CFG)
    assert seq_logp(model, "alice", [1, 2, 3], [4, 5, 6, 7]) > good_before
    assert seq_logp(model, "alice", [1, 2, 3], [8, 9, 10, 11]) < bad_before
    assert metrics["tokens"] == 8 and metrics["grad_norm"] > 0


def test_updating_one_adapter_leaves_the_others_bit_identical(model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    update_adapter(model, "alice", rollouts(model, "alice"), CFG)
    after = model.state_dict()
    untouched = [k for k in before if ".alice." not in k]
    assert all(torch.equal(before[k], after[k]) for k in untouched)
    assert any(not torch.equal(before[k], after[k]) for k in before if ".alice." in k)


def test_optimizer_state_resumes_exactly(model):
    twin = copy.deepcopy(model)
    batch = rollouts(model, "alice")
    # straight through: two updates
    _, state = update_adapter(model, "alice", batch, CFG)
    update_adapter(model, "alice", batch, CFG, optimizer_state=state)
    # interrupted: the state goes through a save/load round trip in between
    _, state2 = update_adapter(twin, "alice", batch, CFG)
    buffer = io.BytesIO()
    torch.save(state2, buffer)
    buffer.seek(0)
    update_adapter(twin, "alice", batch, CFG, optimizer_state=torch.load(buffer, weights_only=True))
    for (k, v), (_, w) in zip(model.state_dict().items(), twin.state_dict().items(), strict=True):
        assert torch.equal(v, w), k


def test_extracted_weights_are_the_trained_ones(model, tmp_path):
    from populora_core.population.adapters import load_adapter, save_adapter
    from populora_core.training.trainer import extract_adapter

    update_adapter(model, "alice", rollouts(model, "alice"), CFG)
    adapter = extract_adapter(model, "alice")
    assert adapter.rank == 4 and adapter.alpha == 8
    q = model.base_model.model.model.layers[1].self_attn.q_proj
    assert torch.equal(adapter.modules["model.layers.1.self_attn.q_proj"].B, q.lora_B["alice"].weight.float())
    save_adapter(adapter, tmp_path / "alice")
    assert set(load_adapter(tmp_path / "alice").modules) == set(adapter.modules)


def test_minibatches_are_shuffled_by_the_given_generator_only(model):
    """Two minibatches of one sequence each: the order they are stepped in changes the
    result; the same seed gives the same adapter, another seed another order."""
    cfg = GRPOConfig(learning_rate=5e-3, micro_batch_size=1, minibatches=2, gradient_checkpointing=False)
    batch = rollouts(model, "alice")

    def trained(seed):
        twin = copy.deepcopy(model)
        gen = None if seed is None else torch.Generator().manual_seed(seed)
        metrics, _ = update_adapter(twin, "alice", batch, cfg, generator=gen)
        assert metrics["steps"] == 2
        return {k: v for k, v in twin.state_dict().items() if ".alice." in k}

    def same(a, b):
        return all(torch.equal(a[k], b[k]) for k in a)

    runs = {seed: trained(seed) for seed in range(6)}
    assert same(trained(3), runs[3])
    assert not all(same(runs[0], runs[s]) for s in range(1, 6))  # some seed steps them the other way round
    ordered = trained(None)
    assert any(same(ordered, r) for r in runs.values()) and not all(same(ordered, r) for r in runs.values())


def test_the_local_and_the_ray_trainer_share_the_trainer_pool_protocol():
    import inspect

    from populora_core.engine.cluster import RayTrainer
    from populora_core.training.trainer import Trainer, TrainerPool

    wanted = inspect.signature(TrainerPool.map).parameters
    for cls in (Trainer, RayTrainer):
        got = inspect.signature(cls.map).parameters
        assert list(got) == list(wanted), cls
        assert got["desc"].kind is inspect.Parameter.KEYWORD_ONLY, cls


@pytest.mark.parametrize(("dtype", "expected"), [(torch.float32, "sampler"), (torch.bfloat16, "learner")])
def test_auto_old_logprobs_follows_the_bases_precision(model, dtype, expected):
    """`old_logprobs: auto` takes the sampler's log-probs on a float32 base (they agree with the
    learner's to ~1e-6) and the learner's on a bf16 base (they do not): the update is the one
    the explicit setting gives, step for step."""
    batch = [replace(r, old_logprobs=[x - 0.3 for x in r.old_logprobs]) for r in rollouts(model, "alice")]
    for name, p in model.named_parameters():  # the frozen base; LoRA factors stay float32
        if "lora_" not in name:
            p.data = p.data.to(dtype)
    start = copy.deepcopy(model.state_dict())
    runs = {}
    for old in ("auto", expected):
        model.load_state_dict(start)
        metrics, _ = update_adapter(model, "alice", batch, CFG.model_copy(update={"old_logprobs": old}))
        metrics = {k: v for k, v in metrics.items() if k not in ("seconds", "tokens_per_s")}
        runs[old] = (metrics, {k: v.clone() for k, v in model.state_dict().items() if ".alice." in k})
    assert runs["auto"][0] == runs[expected][0]
    other = "learner" if expected == "sampler" else "sampler"
    model.load_state_dict(start)
    assert update_adapter(model, "alice", batch, CFG.model_copy(update={"old_logprobs": other}))[0] != runs["auto"][0]
    assert all(torch.equal(v, runs[expected][1][k]) for k, v in runs["auto"][1].items())
    assert old_logprobs_source(CFG, low_precision=dtype != torch.float32) == expected
    assert old_logprobs_source(CFG.model_copy(update={"old_logprobs": "sampler"}), low_precision=True) == "sampler"


def test_vllm_sampling_takes_the_learners_old_logprobs():
    from populora_core.config import load_config
    from populora_core.stages.learn import _update_settings

    hf = load_config(preset="cpu-tiny")
    vllm = load_config(preset="cpu-tiny", overrides=["inference.backend=vllm"])
    assert _update_settings(hf).old_logprobs == "auto" and _update_settings(vllm).old_logprobs == "learner"


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_bf16_update_skips_peft_float32_input_copies_and_gives_the_same_adapter(model, monkeypatch, checkpointing):
    """On a bf16 base the trainer's passes run under autocast with PEFT's cast of each LoRA input
    to float32 turned off (``LowPrecision``): autocast cast that copy straight back, so the
    update is bit for bit the one with the cast, and autograd keeps fewer bytes for it (without
    checkpointing; with it the forward keeps each layer's input either way)."""
    from populora_core.training import device, trainer

    batch = rollouts(model, "alice")
    for name, p in model.named_parameters():
        if "lora_" not in name:
            p.data = p.data.to(torch.bfloat16)
    start = copy.deepcopy(model.state_dict())
    config = CFG.model_copy(update={"gradient_checkpointing": checkpointing, "old_logprobs": "sampler"})
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def update() -> tuple[dict, dict, int]:
        model.load_state_dict(start)
        saved: dict[int, int] = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in params:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            metrics, _ = update_adapter(model, "alice", batch, config)
        weights = {k: v.clone() for k, v in model.state_dict().items() if ".alice." in k}
        return (
            {k: v for k, v in metrics.items() if not k.startswith("seconds") and k != "tokens_per_s"},
            weights,
            sum(saved.values()),
        )

    metrics, weights, saved = update()
    assert isinstance(device.autocast_for(model), device.LowPrecision)
    with monkeypatch.context() as m:  # PEFT's own behaviour: every LoRA input cast to float32 first
        m.setattr(trainer, "autocast_for", lambda mdl: torch.autocast("cpu", dtype=torch.bfloat16))
        cast_metrics, cast_weights, cast_saved = update()
    assert metrics == cast_metrics
    assert all(torch.equal(v, cast_weights[k]) for k, v in weights.items())
    assert any(not torch.equal(v, start[k]) for k, v in weights.items())  # it did train
    # checkpointed, the forward keeps only each layer's input (the recompute is the backward's)
    assert saved < cast_saved if not checkpointing else saved == cast_saved, (saved, cast_saved)


def test_a_micro_batch_out_of_memory_is_split_and_the_update_is_the_smaller_micro_batchs(model):
    """A stand-in for a GPU running out of memory (none here): the model raises torch's
    OutOfMemoryError for any training pass over more than one sequence. The update halves its
    micro-batch, computes the minibatch again from zero gradients, says so in its metrics, and
    ends bit for bit where `grpo.micro_batch_size: 1` ends; out of memory at one sequence is raised."""
    batch = rollouts(model, "alice")
    start = copy.deepcopy(model.state_dict())

    def too_big(limit: int):
        def hook(_module, _args, kwargs):
            if torch.is_grad_enabled() and kwargs["input_ids"].shape[0] > limit:
                raise torch.OutOfMemoryError("stand-in: CUDA out of memory")

        return hook

    def update(micro_batch: int) -> tuple[dict, dict]:
        model.load_state_dict(start)
        config = CFG.model_copy(update={"micro_batch_size": micro_batch, "old_logprobs": "sampler"})
        metrics, _ = update_adapter(model, "alice", batch, config)
        return metrics, {k: v.clone() for k, v in model.state_dict().items() if ".alice." in k}

    hook = model.register_forward_pre_hook(too_big(1), with_kwargs=True)
    try:
        split, split_weights = update(2)
    finally:
        hook.remove()
    one, one_weights = update(1)
    assert (split["oom_splits"], split["micro_batch"]) == (1.0, 1.0)
    assert (one["oom_splits"], one["micro_batch"]) == (0.0, 1.0)
    assert split["loss"] == one["loss"] and split["grad_norm"] == one["grad_norm"]
    assert all(torch.equal(v, one_weights[k]) for k, v in split_weights.items())
    hook = model.register_forward_pre_hook(too_big(0), with_kwargs=True)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            update(2)
    finally:
        hook.remove()


def _mixed_rollouts(n: int = 10) -> list[Rollout]:
    """Rollouts of very different prompt and completion lengths, shuffled."""
    gen = torch.Generator().manual_seed(3)
    out = []
    for i in range(n):
        p, c = (40 if i % 3 == 0 else 4), (3 + 5 * (i % 4))
        prompt = torch.randint(1, 60, (p,), generator=gen).tolist()
        completion = torch.randint(1, 60, (c,), generator=gen).tolist()
        out.append(Rollout(prompt, completion, [-2.0] * c, 1.0 if i % 2 else -1.0))
    return out


def test_whole_sequence_micro_batches_keep_the_token_budget_and_pad_less():
    """Longest first under a budget of micro-batch × the longest sequence (and × the longest
    completion for the logits): each row once, no micro-batch over either budget, fewer padded
    positions than cutting the rows as they come."""
    rows = _mixed_rollouts()
    longest = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    widest = max(len(r.completion_ids) for r in rows)
    batches = micro_batches(rows, 2, shared=False)
    assert sorted(id(r) for b in batches for r in b) == sorted(id(r) for r in rows)

    def padded(b):
        return len(b) * max(len(r.prompt_ids) + len(r.completion_ids) for r in b)

    assert all(
        padded(b) <= 2 * longest and len(b) * max(len(r.completion_ids) for r in b) <= 2 * widest for b in batches
    )
    plain = [rows[s : s + 2] for s in range(0, len(rows), 2)]
    assert sum(map(padded, batches)) < sum(map(padded, plain))
    assert len(batches) < len(plain)  # short rows share a micro-batch beyond two


def test_the_token_budget_cut_leaves_the_gradient_as_one_micro_batch_gives_it(model):
    """The minibatch's gradient is a token-weighted sum: the token-budget micro-batches give the
    gradient the whole minibatch in one micro-batch gives (to float32 rounding)."""
    from populora_core.training.trainer import _minibatch_step, trainable_parameters

    rows, cfg = _mixed_rollouts(), CFG.model_copy(update={"max_grad_norm": 1e9})
    model.set_adapter("alice")
    params = trainable_parameters(model, "alice")
    model.train()
    grads = []
    for micro in (len(rows), 2):
        for p in params:
            p.grad = None
        sums = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0}
        _minibatch_step(model, rows, params, cfg, 0, nullcontext(), sums, False, None, micro)
        grads.append(torch.cat([p.grad.flatten() for p in params]))
    model.eval()
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-7)
