"""Checks that an operator's child is what its name says and can still learn.

Each figure is computed from the factors through the factored SVD (never forming
ΔW at full size except in ``learning_speed``, which works on small shapes):
- ``delta_norm_ratio``: ‖ΔW_child‖_F / ‖ΔW_parent‖_F, mean over modules;
- ``effective_rank``: Roy & Vetterli's exp(entropy) of ΔW's singular values;
- ``dead_components``: components whose A row and B column are both zero, a point
  where both gradients vanish forever (∂L/∂A_i = B_iᵀ G, ∂L/∂B_i = G A_iᵀ);
- ``learning_speed``: how far Adam brings an adapter towards a target ΔW on a
  synthetic regression in a few steps, to compare a child with its parent.
``benchmarks/operator_checks.py`` prints them for every operator.
"""

from __future__ import annotations

import torch

from populora_core.population.lora import LoraAdapter, LoraFactors, factored_svd, svd_factors


def effective_rank(S: torch.Tensor) -> float:
    """Roy & Vetterli's effective rank exp(H(p)), p = S / ΣS: r for r equal singular
    values, 1 when one component dominates, 0 for ΔW = 0."""
    total = S.clamp_min(0).sum()
    if total <= 0:
        return 0.0
    p = S.clamp_min(0) / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def rebalanced(adapter: LoraAdapter) -> LoraAdapter:
    """The same ΔW written back with balanced factors (√S each): the write-back the
    operators used before ``lora.factor_scale``, kept to measure against."""
    return adapter.with_modules({n: LoraFactors(*svd_factors(*factored_svd(f.B, f.A))) for n, f in adapter})


def singular_values(f: LoraFactors) -> torch.Tensor:
    """Singular values of B·A (without the α / r scale), decreasing."""
    return factored_svd(f.B, f.A)[1]


def delta_norm_ratio(parent: LoraAdapter, child: LoraAdapter) -> float:
    """‖ΔW_child‖_F / ‖ΔW_parent‖_F, averaged over modules."""
    ratios = [
        float(singular_values(child.modules[n]).norm() / singular_values(f).norm().clamp_min(1e-12)) for n, f in parent
    ]
    return sum(ratios) / len(ratios)


def mean_effective_rank(adapter: LoraAdapter) -> float:
    """``effective_rank`` of ΔW, averaged over modules."""
    return sum(effective_rank(singular_values(f)) for _, f in adapter) / len(adapter.modules)


def dead_components(adapter: LoraAdapter, tol: float = 0.0) -> int:
    """Components (index i of a module) whose A row and B column are both zero."""
    dead = 0
    for _, f in adapter:
        alive = (f.A.abs().amax(dim=1) > tol) | (f.B.abs().amax(dim=0) > tol)
        dead += int((~alive).sum())
    return dead


def component_gradient_norms(f: LoraFactors, G: torch.Tensor) -> torch.Tensor:
    """Per component i, ‖(∂L/∂A_i, ∂L/∂B_i)‖ for L = ⟨G, B·A⟩ (G: d_out × d_in): (r,)."""
    grad_A = f.B.T @ G  # (r, d_in)
    grad_B = G @ f.A.T  # (d_out, r)
    return (grad_A.pow(2).sum(1) + grad_B.pow(2).sum(0)).sqrt()


def learning_speed(
    adapter: LoraAdapter, targets: dict[str, torch.Tensor], *, steps: int = 30, lr: float = 1e-3, seed: int = 0
) -> float:
    """Share of the distance to ``targets`` (a ΔW per module, scaled) that Adam closes in
    ``steps`` steps: 1 − ‖ΔW_T − ΔW*‖² / ‖ΔW_0 − ΔW*‖², mean over modules. The loss is the
    regression ‖X ΔWᵀ − X ΔW*ᵀ‖² on Gaussian inputs X, the factors start as given."""
    gen = torch.Generator().manual_seed(seed)
    closed = []
    for name, f in adapter:
        A = f.A.clone().requires_grad_(True)
        B = f.B.clone().requires_grad_(True)
        target = targets[name]
        X = torch.randn((64, A.shape[1]), generator=gen)
        opt = torch.optim.Adam([A, B], lr=lr)
        start = float((adapter.scaling * f.B @ f.A - target).pow(2).sum())
        for _ in range(steps):
            opt.zero_grad()
            loss = (X @ (adapter.scaling * B @ A - target).T).pow(2).mean()
            loss.backward()
            opt.step()
        end = float((adapter.scaling * B @ A - target).detach().pow(2).sum())
        closed.append(1.0 - end / max(start, 1e-30))
    return sum(closed) / len(closed)
