"""Linear layers laid out for decoding on CPU: the weight on the left of the product.

A decode step multiplies every weight by a handful of rows (one per sequence still
generating). ``F.linear`` computes x·Wᵀ; with Intel's MKL on the AMD CPUs measured
here that product is slow at few rows, and W·xᵀ (the same numbers, the weight as the
left operand) is up to 2.8× faster for the large layers (both still read the weight
well below the memory bandwidth: docs/benchmarks.md#cpu-floor).
``rows_layout`` switches a model's ``nn.Linear`` layers in place to ``RowsLinear``,
which takes that path for at most ``MAX_ROWS`` rows, on CPU, without gradients
(decoding), and ``F.linear`` otherwise (prefill, training, GPUs). The parameters,
their names and ``isinstance(layer, nn.Linear)`` are unchanged, so PEFT and
``multilora`` wrap the layers as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 256
"""Rows up to which W·xᵀ is used: any decode batch; at 512 rows and more the two orders measured
the same here (a prefill of 8 prompts has ~2,000 rows)."""


class RowsLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if not 0 < rows <= MAX_ROWS or x.device.type != "cpu" or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        # contiguous: W·xᵀ's transpose as a view made every later operation read a transposed
        # tensor, and a decode step 1.4-1.8x slower than F.linear's (measured with one thread:
        # docs/benchmarks.md#cpu-floor); the copy is rows x out_features, a few KB
        y = torch.mm(self.weight, x.reshape(rows, x.shape[-1]).t()).t().contiguous()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


def rows_layout(model: nn.Module) -> int:
    """Switches every plain ``nn.Linear`` of ``model`` to ``RowsLinear``; returns how many."""
    switched = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = RowsLinear
            switched += 1
    return switched
