"""Whether this CPU trains and generates faster in bfloat16 than in float32, measured once.

A CPU that computes bf16 dot products natively (AVX512-BF16, AMX) is not always faster in bf16:
on a 2-core Xeon with AVX512-BF16 and no AMX an update took twice as long in bf16 as in float32
(autocast's casts and the element-wise ops are not native there), while AMX Xeons run several
times faster in bf16. ``bf16_is_faster`` times the trainer's kind of work (a LoRA'd MLP block at
the 0.5B's widths, forward and backward under the trainer's autocast) in both dtypes, once per
CPU and torch version, and keeps the answer in ``<cache>/cpu-dtype.json``, so every process and
every resume on this machine resolves ``model.dtype: auto`` alike.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path

MARGIN = 0.8
"""bf16 is chosen only when it takes under this share of float32's time (float32 is exact: the
sampler's and the learner's log-probs agree, and no autocast is needed)."""


def cpu_key() -> str:
    """This CPU's model name, a digest of its flags, and the torch version."""
    import torch

    model, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} | {hashlib.sha256(flags.encode()).hexdigest()[:12]} | torch {torch.__version__}"


def measure(reps: int = 3) -> dict[str, float]:
    """Best seconds of two steps of the block in each dtype (after a warm-up)."""
    import torch

    out = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        gen = torch.Generator().manual_seed(0)
        tensors = [torch.randn(s, generator=gen).to(dtype) for s in ((128, 896), (4864, 896), (896, 4864))]
        tensors += [(0.01 * torch.randn(16, 896, generator=gen)).requires_grad_(), torch.zeros(4864, 16)]
        tensors[-1].requires_grad_()
        _step(*tensors)
        best = float("inf")
        for _ in range(reps):
            started = time.perf_counter()
            _step(*tensors)
            _step(*tensors)
            best = min(best, time.perf_counter() - started)
        out[name] = best
    return out


def _step(x, w1, w2, a, b) -> None:
    """Forward and backward of a LoRA'd MLP block, under autocast when the weights are bf16."""
    import torch

    linear = torch.nn.functional.linear
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=w1.dtype == torch.bfloat16):
        y = linear(torch.nn.functional.silu(linear(x, w1) + linear(linear(x, a), b)), w2)
        loss = y.float().pow(2).mean()
    loss.backward()


def bf16_is_faster(cache: Path) -> bool:
    """The cached answer for this CPU, or a new measurement (written to ``cache``)."""
    key = cpu_key()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known.get(key), dict) or "bfloat16" not in known[key]:
        known[key] = measure()
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{time.time_ns()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(cache)
    seconds = known[key]
    return seconds["bfloat16"] < MARGIN * seconds["float32"]
