"""Held-out evaluation: pass@1 of the base model and of every adapter on public benchmarks."""

from __future__ import annotations
