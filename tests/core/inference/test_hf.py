"""The transformers + peft backend with the real (embedded) SmolLM2-135M."""

from __future__ import annotations

import pytest
import torch

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.inference.attention import NAME
from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter

MESSAGES = [{"role": "user", "content": "Write a Python function f that reverses a list."}]
OTHER = [{"role": "user", "content": "Name three prime numbers and explain why each is prime."}]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    torch.manual_seed(0)
    model, tokenizer = load_model(resolve_model("embedded:smollm2-135m-instruct"), dtype="float32")
    backend = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=8)
    config = PopulationConfig(teachers=1, students=1, rank=8, alpha=16, init_b_std=0.02)
    members, adapters = create_population(
        config, RatingConfig(), lora_shapes_from_model(model, config.target_modules), 0
    )
    root = tmp_path_factory.mktemp("adapters")
    for m in members:
        save_adapter(adapters[m.adapter_id], root / m.adapter_id)
        backend.load_adapter(m.adapter_id, root / m.adapter_id)
    backend.ids = [m.adapter_id for m in members]
    return backend


GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def test_mixed_adapter_batch_equals_per_adapter_generation(backend):
    names = [*backend.ids, BASE]
    mixed = backend.generate([GenerationRequest(MESSAGES, adapter=a) for a in names], GREEDY)
    alone = [backend.generate([GenerationRequest(MESSAGES, adapter=a)], GREEDY)[0] for a in names]
    assert [c[0].token_ids for c in mixed] == [c[0].token_ids for c in alone]
    assert len({tuple(c[0].token_ids) for c in mixed}) > 1  # the adapters do change the output
    for c in mixed:
        assert len(c[0].logprobs) == len(c[0].token_ids) and all(lp <= 0 for lp in c[0].logprobs)


def test_seeds_give_the_same_samples_whatever_the_batch(backend):
    params = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=12)
    alone = backend.generate([GenerationRequest(MESSAGES, adapter=backend.ids[0], n=2, seed=7)], params)[0]
    crowd = backend.generate(
        [
            GenerationRequest(OTHER, adapter=backend.ids[1], n=3, seed=1),
            GenerationRequest(MESSAGES, adapter=backend.ids[0], n=2, seed=7),
            GenerationRequest(OTHER, n=1, seed=2),
        ],
        params,
    )[1]
    assert [c.token_ids for c in alone] == [c.token_ids for c in crowd]
    assert alone[0].token_ids != alone[1].token_ids  # samples of one request differ
    other_seed = backend.generate([GenerationRequest(MESSAGES, adapter=backend.ids[0], n=1, seed=8)], params)[0]
    assert other_seed[0].token_ids != alone[0].token_ids


def test_an_unseeded_request_samples_afresh(backend):
    """seed=None (benchmarks/request_seeds.py's unseeded arm): each call draws new samples."""
    params = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=12)
    request = GenerationRequest(MESSAGES, adapter=backend.ids[0], n=2, seed=None)
    first, again = ([c.token_ids for c in backend.generate([request], params)[0]] for _ in range(2))
    assert first != again


def test_the_cpu_backend_decodes_through_the_grouped_attention(backend):
    assert backend.base.config._attn_implementation == NAME  # inference.attention


def test_a_prompt_shared_by_rows_of_one_adapter_is_prefilled_once(backend):
    params = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=8)
    a, b = backend.ids
    requests = [
        GenerationRequest(MESSAGES, adapter=a, n=3, seed=1),
        GenerationRequest(OTHER, adapter=b, n=2, seed=2),
        GenerationRequest(MESSAGES, adapter=b, n=1, seed=3),  # same prompt, other adapter: its own prefill
        GenerationRequest(MESSAGES, adapter=a, n=1, seed=4),  # same prompt and adapter as the first
    ]
    shapes = []
    hook = backend.base.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    try:
        together = backend.generate(requests, params)
    finally:
        hook.remove()
    prefills = [shape for shape in shapes if shape[1] > 1]
    assert len(prefills) == 1 and prefills[0][0] == 3  # 7 rows, 3 distinct (adapter, prompt)
    assert shapes[1][0] == 7  # the first decode step feeds every row
    alone = [backend.generate([r], params)[0] for r in requests]
    assert [[c.token_ids for c in cs] for cs in together] == [[c.token_ids for c in cs] for cs in alone]
    assert together[0][0].token_ids != together[0][1].token_ids  # shared prompt, own draws


def test_stop_strings_and_prefill(backend):
    stop = SamplingParams(temperature=0.0, max_new_tokens=40, stop=("def ",))
    [[c]] = backend.generate([GenerationRequest(MESSAGES, prefill="```python\n")], stop)
    # generation ends with the token that completes the stop string
    assert c.finish_reason == "stop" and "def " in c.text
    assert "def " not in backend.tokenizer.decode(c.token_ids[:-1])


def test_unknown_adapter_is_a_clear_error(backend):
    with pytest.raises(KeyError, match="not loaded"):
        backend.generate([GenerationRequest(MESSAGES, adapter="nobody")], GREEDY)


def test_refreshed_adapter_changes_generation_without_reloading_the_base(backend, tmp_path):
    from populora_core.population.evolution import apply_operator

    aid = backend.ids[0]
    before = backend.generate([GenerationRequest(MESSAGES, adapter=aid)], GREEDY)[0][0].token_ids
    base_id = id(backend.base)
    current = backend.adapter_weights(aid)
    child, _ = apply_operator("M4", [current], torch.Generator().manual_seed(0), {"sigma": 3.0})
    save_adapter(child, tmp_path / aid)
    backend.load_adapter(aid, tmp_path / aid)
    after = backend.generate([GenerationRequest(MESSAGES, adapter=aid)], GREEDY)[0][0].token_ids
    assert id(backend.base) == base_id
    assert after != before
