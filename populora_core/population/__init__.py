"""The population: adapter store, TrueSkill matchmaking, LoRA-space evolution."""

from __future__ import annotations
