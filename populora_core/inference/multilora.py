"""Many LoRA adapters on one model, applied to a mixed batch in two matmuls per layer.

Every target ``nn.Linear`` is wrapped: the factors of all loaded adapters sit in
one stacked pair, A_cat (C·r × d_in) and B_cat (d_out × C·r), one slot of width
r per adapter. For a batch whose row b uses slot s_b,

    y = W x + B_cat · (m ⊙ (A_cat · x)),   m_b = (α/r)·1[block = s_b]   (B, C·r),

so each row gets exactly its own adapter's (α/r)·B_s A_s x, and base rows get an
all-zero mask. That is two dense matmuls per module per step whatever the number
of adapters, instead of PEFT's loop over the adapters present in the batch (one
index-select, two matmuls and an index-add each). The extra work is C·r columns,
small against W for the ranks used here.
"""

from __future__ import annotations

import torch
from torch import nn

from populora_core.population.lora import LoraAdapter


class Router:
    """The per-row slot mask every wrapped layer reads during a forward."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None  # (B, 1, C·r), scaling folded in


class MultiLoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, router: Router) -> None:
        super().__init__()
        self.base = base
        self.router = router
        like = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.register_buffer("A", torch.zeros(0, base.in_features, **like), persistent=False)
        self.register_buffer("B", torch.zeros(base.out_features, 0, **like), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        mask = self.router.mask
        if mask is None or self.A.shape[0] == 0:
            return y
        h = torch.matmul(x, self.A.T) * mask  # (B, T, C·r)
        return y + torch.matmul(h, self.B.T)


class MultiLora:
    """Wraps a causal LM's target modules and manages adapter slots."""

    def __init__(self, model: nn.Module, target_modules: tuple[str, ...]) -> None:
        self.router = Router()
        self.layers: dict[str, MultiLoraLinear] = {}
        self.slots: dict[str, int] = {}  # adapter id -> slot
        self.scaling: dict[str, float] = {}
        self.weights: dict[str, LoraAdapter] = {}
        self.width = 0  # r of a slot
        self.capacity = 0
        self.model = model
        self.targets = set(target_modules)
        for name, module in list(model.named_modules()):
            if isinstance(module, nn.Linear) and name.split(".")[-1] in self.targets:
                parent = model.get_submodule(name.rsplit(".", 1)[0])
                wrapped = MultiLoraLinear(module, self.router)
                setattr(parent, name.rsplit(".", 1)[1], wrapped)
                self.layers[name] = wrapped

    def _resize(self, capacity: int, width: int) -> None:
        """Re-lays every stacked buffer for ``capacity`` slots of ``width`` columns."""
        for layer in self.layers.values():
            d_out, d_in = layer.base.out_features, layer.base.in_features
            device = layer.base.weight.device
            layer.A = torch.zeros(capacity * width, d_in, dtype=layer.A.dtype, device=device)
            layer.B = torch.zeros(d_out, capacity * width, dtype=layer.B.dtype, device=device)
        self.capacity, self.width = capacity, width
        for adapter_id in self.slots:
            self._write(adapter_id)

    def _write(self, adapter_id: str) -> None:
        slot, adapter = self.slots[adapter_id], self.weights[adapter_id]
        lo = slot * self.width
        for name, layer in self.layers.items():
            layer.A[lo : lo + self.width].zero_()
            layer.B[:, lo : lo + self.width].zero_()
            f = adapter.modules.get(name)
            if f is not None:
                layer.A[lo : lo + f.rank].copy_(f.A)
                layer.B[:, lo : lo + f.rank].copy_(f.B)

    def set_adapter(self, adapter_id: str, adapter: LoraAdapter) -> None:
        """Loads ``adapter`` into its slot (a new slot for a new id), in place."""
        unknown = set(adapter.modules) - set(self.layers)
        if unknown:
            raise KeyError(f"adapter {adapter_id!r} has modules the model lacks: {sorted(unknown)[:3]} …")
        self.weights[adapter_id] = adapter
        self.scaling[adapter_id] = adapter.scaling
        if adapter_id not in self.slots:
            free = sorted(set(range(self.capacity)) - set(self.slots.values()))
            self.slots[adapter_id] = free[0] if free else len(self.slots)
        if self.slots[adapter_id] >= self.capacity or adapter.rank > self.width:
            self._resize(max(self.capacity * 2, self.slots[adapter_id] + 1, 4), max(self.width, adapter.rank))
        else:
            self._write(adapter_id)

    def remove_adapter(self, adapter_id: str) -> None:
        if adapter_id in self.slots:
            lo = self.slots.pop(adapter_id) * self.width
            for layer in self.layers.values():
                layer.A[lo : lo + self.width].zero_()
                layer.B[:, lo : lo + self.width].zero_()
            self.weights.pop(adapter_id)
            self.scaling.pop(adapter_id)

    def route(self, names: list[str] | None, dtype: torch.dtype) -> None:
        """Sets the mask for a batch whose row b uses adapter ``names[b]`` (any
        name not loaded, e.g. the base marker, gets no adapter)."""
        if not names or not self.slots:
            self.router.mask = None
            return
        device = next(iter(self.layers.values())).base.weight.device
        mask = torch.zeros(len(names), 1, self.capacity * self.width, dtype=dtype, device=device)
        for b, name in enumerate(names):
            slot = self.slots.get(name)
            if slot is not None:
                mask[b, 0, slot * self.width : (slot + 1) * self.width] = self.scaling[name]
        self.router.mask = mask
