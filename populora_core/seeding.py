"""Seeds derived from (run seed, generation, adapter id, purpose).

Every sampling stage takes its generator from here, so a resumed or replayed
run draws exactly what the uninterrupted run drew.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(run_seed: int, generation: int, *keys: object) -> int:
    """A 63-bit seed, stable across processes and Python versions."""
    text = "\x1f".join(str(k) for k in (run_seed, generation, *keys))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & (2**63 - 1)


def torch_generator(run_seed: int, generation: int, *keys: object) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(run_seed, generation, *keys))


def numpy_generator(run_seed: int, generation: int, *keys: object) -> np.random.Generator:
    return np.random.default_rng(derive_seed(run_seed, generation, *keys))
