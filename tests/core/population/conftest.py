"""Tiny random adapters shaped like a small decoder."""

from __future__ import annotations

import pytest
import torch

from populora_core.config import PopulationConfig
from populora_core.population.adapters import init_adapter, lora_shapes

TINY = {
    "hidden_size": 16,
    "intermediate_size": 24,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 8,
}


def random_adapter(seed: int, rank: int = 4) -> object:
    config = PopulationConfig(rank=rank, alpha=2.0 * rank, init_b_std=0.5)
    return init_adapter(lora_shapes(TINY, config.target_modules), config, torch.Generator().manual_seed(seed))


def young_adapter(seed: int, rank: int = 8) -> object:
    """An adapter as a run starts it: A Kaiming-uniform, B ~ N(0, 1e-3²) (gaussian_b), wider modules."""
    shape = {**TINY, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2}
    config = PopulationConfig(rank=rank, alpha=2.0 * rank, target_modules=("q_proj", "v_proj"))
    return init_adapter(lora_shapes(shape, config.target_modules), config, torch.Generator().manual_seed(seed))


@pytest.fixture
def parents():
    return random_adapter(1), random_adapter(2)
