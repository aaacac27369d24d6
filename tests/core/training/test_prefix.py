"""Completions that share a prompt, the prompt run once: the same log-probs and gradients as
every (prompt + completion) sequence run whole."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.training.prefix import shared_prompt_logprobs
from populora_core.training.rollouts import Rollout, pad_rollouts, token_logprobs
from tests.helpers import TINY_QWEN2


def test_shared_prompts_give_the_whole_sequences_log_probs_and_gradients():
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "up_proj"])
    lora.init_lora_weights = "gaussian"
    model = get_peft_model(Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2)), lora, adapter_name="member").train()
    g = torch.Generator().manual_seed(1)
    short, long = [5, 6, 7], [9, 10, 11, 12, 13, 14]
    lengths = [(short, 4), (long, 1), (short, 2), (long, 5), (short, 4)]
    batch = [
        Rollout(p, torch.randint(2, 64, (n,), generator=g).tolist(), (-torch.rand(n, generator=g)).tolist(), 0.0)
        for p, n in lengths
    ]
    weights = torch.randn(len(batch), 5, generator=g)
    params = [p for p in model.parameters() if p.requires_grad]

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in params]

    logp, comp, old = shared_prompt_logprobs(model, batch, pad_id=0, chunk=2)
    got = [logp[b, : len(r.completion_ids)] for b, r in enumerate(batch)]
    got_grads = grads(sum((lp * weights[b, : len(lp)]).sum() for b, lp in enumerate(got)))

    ids, attn, mask, _ = pad_rollouts(batch, 0)
    whole = token_logprobs(model, ids, attn, chunk=3)
    want = [whole[b][mask[b].bool()] for b in range(len(batch))]
    want_grads = grads(sum((lp * weights[b, : len(lp)]).sum() for b, lp in enumerate(want)))

    for b, r in enumerate(batch):
        torch.testing.assert_close(got[b], want[b], rtol=1e-4, atol=1e-5)
        assert comp[b].sum() == len(r.completion_ids)
        torch.testing.assert_close(old[b, : len(r.completion_ids)], torch.tensor(r.old_logprobs))
    for a, b in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-6)
    assert any(float(gr.abs().sum()) > 0 for gr in got_grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_target_logprobs_and_their_gradient_are_autograds_bit_for_bit(dtype):
    """The chunked log-softmax with its own backward gives the values and gradients autograd gives
    for x_target − logsumexp(x.float()), chunk by chunk (what it replaced), in both dtypes."""
    from populora_core.training.rollouts import target_logprobs

    torch.manual_seed(0)
    logits = (torch.randn(3, 37, 500) * 3).to(dtype).requires_grad_()
    targets, weights = torch.randint(0, 500, (3, 37)), torch.randn(3, 37)
    pieces = []
    for s in range(0, 37, 8):
        part = logits[:, s : s + 8].float()
        pieces.append(part.gather(-1, targets[:, s : s + 8, None]).squeeze(-1) - torch.logsumexp(part, -1))
    expected = torch.cat(pieces, dim=1)
    (expected * weights).sum().backward()
    expected_grad, logits.grad = logits.grad, None
    got = target_logprobs(logits, targets, 8)
    (got * weights).sum().backward()
    assert torch.equal(got, expected) and torch.equal(logits.grad, expected_grad)
