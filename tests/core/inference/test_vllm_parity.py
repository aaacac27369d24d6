"""The vLLM backend (CPU build, its own venv) gives HF+peft's greedy tokens, adapters and base mixed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.inference.vllm import DEFAULT_VENV, VLLMBackend
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter

pytestmark = pytest.mark.vllm

PROMPTS = [
    [{"role": "user", "content": "Write a Python function f that reverses a list."}],
    [{"role": "user", "content": "What does sorted(set([3, 1, 3])) return?"}],
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    venv = Path(os.environ.get("POPULORA_VLLM_VENV", DEFAULT_VENV))
    if not (venv / "bin" / "python").exists():
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"CI needs the vLLM environment at {venv} (make vllm-env)")
        pytest.skip(f"no vLLM environment at {venv} (make vllm-env)")
    path = resolve_model("embedded:smollm2-135m-instruct")
    model, tokenizer = load_model(path, dtype="float32")
    config = PopulationConfig(teachers=2, students=1, rank=8, alpha=16, init_b_std=0.02)
    shapes = lora_shapes_from_model(model, config.target_modules)
    members, adapters = create_population(config, RatingConfig(), shapes, 0)
    root = tmp_path_factory.mktemp("adapters")
    for m in members:
        save_adapter(adapters[m.adapter_id], root / m.adapter_id)
    return path, model, tokenizer, root, [m.adapter_id for m in members], shapes


def test_greedy_tokens_match_hf(setup):
    path, model, tokenizer, root, ids, shapes = setup
    torch.manual_seed(0)
    hf = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=8)
    for a in ids:
        hf.load_adapter(a, root / a)
    requests = [GenerationRequest(p, adapter=a) for a in [*ids, BASE] for p in PROMPTS]
    params = SamplingParams(temperature=0.0, max_new_tokens=12)
    expected = [c[0].token_ids for c in hf.generate(requests, params)]
    with VLLMBackend(
        path, tokenizer, dtype="float32", max_loras=len(ids) + 1, max_lora_rank=8, max_model_len=1024
    ) as vllm:
        for a in ids:
            vllm.load_adapter(a, root / a)
        got = vllm.generate(requests, params)
        assert [c[0].token_ids for c in got] == expected
        for c in got:
            assert len(c[0].logprobs) == len(c[0].token_ids) and all(lp <= 0 for lp in c[0].logprobs)
        # an adapter reloaded after an update is served with its new weights
        changed = create_population(
            PopulationConfig(teachers=1, students=1, rank=8, alpha=16, init_b_std=0.2),
            RatingConfig(),
            shapes,
            seed=9,
        )[1]
        save_adapter(next(iter(changed.values())), root / "updated")
        vllm.load_adapter(ids[0], root / "updated")
        hf.load_adapter(ids[0], root / "updated")
        again = vllm.generate(requests[:1], params)[0][0].token_ids
        assert again == hf.generate(requests[:1], params)[0][0].token_ids
