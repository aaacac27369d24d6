"""Shared test fixtures' building blocks: tiny random models built from a config."""

from __future__ import annotations

TINY_QWEN2 = dict(
    hidden_size=32,
    intermediate_size=48,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    vocab_size=64,
)
"""A 2-layer Qwen2 small enough to build in milliseconds (tests never download it)."""
