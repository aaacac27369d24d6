"""Decode attention (inference.attention): no decode step asks SDPA to repeat the cache, and the
numbers are SDPA's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

from populora_core.inference.attention import NAME, grouped_decode
from tests.helpers import TINY_QWEN2


def _decode(model, ids: torch.Tensor, steps: int, monkeypatch) -> tuple[torch.Tensor, list[tuple]]:
    """Greedy ``steps`` tokens after ``ids`` (no padding: transformers drops the mask), with every
    SDPA call's ((query heads, query length), enable_gqa) recorded."""
    calls = []
    sdpa = F.scaled_dot_product_attention

    def recording(query, *args, **kwargs):
        calls.append((tuple(query.shape[1:3]), kwargs.get("enable_gqa", False)))  # (heads, length)
        return sdpa(query, *args, **kwargs)

    cache, out, step = DynamicCache(), [], ids
    with monkeypatch.context() as patched, torch.no_grad():
        patched.setattr(F, "scaled_dot_product_attention", recording)
        for _ in range(steps):
            logits = model(input_ids=step, cache=cache, use_cache=True).logits[:, -1]
            out.append(logits)
            step = logits.argmax(-1, keepdim=True)
    return torch.stack(out, 1), calls


def test_decode_steps_attend_to_the_cache_as_is_with_sdpas_numbers(monkeypatch):
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2, attn_implementation="sdpa")).eval()
    ids = torch.randint(0, TINY_QWEN2["vocab_size"], (3, 7))
    want, plain = _decode(model, ids, 5, monkeypatch)
    layers, heads, kv_heads = (
        TINY_QWEN2[k] for k in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    )
    prefill = [((heads, 7), True)] * layers
    assert plain == prefill + [((heads, 1), True)] * 4 * layers  # transformers' own: SDPA repeats the cache
    assert grouped_decode(model) and model.config._attn_implementation == NAME
    got, grouped = _decode(model, ids, 5, monkeypatch)
    # decode steps: a group's query heads as the query length, against the cache as it is
    assert grouped == prefill + [((kv_heads, heads // kv_heads), False)] * 4 * layers
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_other_attention_implementations_are_left_alone():
    model = Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2, attn_implementation="eager")).eval()
    assert not grouped_decode(model) and model.config._attn_implementation == "eager"
