"""What every evolution operator does to its parent, in numbers.

Parents: two adapters shaped like a small decoder (hidden 256, 2 layers, q/k/v/o/gate/
up/down, rank 8), made as a run makes them (A Kaiming-uniform, B ~ N(0, 1e-3²)) and
then moved by 200 steps of a synthetic regression, so ΔW has a spread spectrum.
For each operator (default settings, seed 0):
- ``norm_ratio``: ‖ΔW_child‖_F / ‖ΔW_parent‖_F (mean over modules; parent = the first
  or better parent);
- ``eff_rank`` parent and child (Roy & Vetterli, mean over modules);
- ``dead``: components whose A row and B column are both zero (untrainable forever);
- ``formula_error``: max relative error against the operator's formula on dense ΔW
  (X3: the splice; X4: trunc_r(ΔW_w + η(ΔW_b − ΔW_w)); X3(a, a) and X4(a, a) against a);
- ``speed``: how far a child made under identity settings (same ΔW as its parent)
  moves towards a target in 10 Adam steps at lr 1e-5, relative to its parent, for the
  parent-scaled write-back (what the operators do) and a balanced one (√S each).

    python benchmarks/operator_checks.py [--quick]

--quick: parents moved by 50 steps instead of 200 (plumbing: not the figures docs/benchmarks.md reports).

Prints a table on stderr and one final JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from populora_core.config import PopulationConfig
from populora_core.population.adapters import init_adapter, lora_shapes
from populora_core.population.evolution import MUTATIONS, OPERATORS, apply_operator
from populora_core.population.evolution.checks import (
    dead_components,
    delta_norm_ratio,
    learning_speed,
    mean_effective_rank,
    rebalanced,
)
from populora_core.population.lora import LoraAdapter, LoraFactors

SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 384,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
}
IDENTITY = {"M1": {"sigma": 0.0, "step": 0.0}, "X1": {"p": 0.0}, "X3": {"k": 4}, "X4": {"eta": 1.25}}


def log(msg: str) -> None:
    print(f"[operator_checks] {msg}", file=sys.stderr, flush=True)


def trained(seed: int, steps: int = 200) -> LoraAdapter:
    """A run's initial adapter after ``steps`` Adam steps towards a random target ΔW."""
    config = PopulationConfig(rank=8, alpha=16.0)
    young = init_adapter(lora_shapes(SHAPE, config.target_modules), config, torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(100 + seed)
    modules = {}
    for name, f in young:
        A, B = f.A.clone().requires_grad_(True), f.B.clone().requires_grad_(True)
        target = 0.02 * torch.randn((B.shape[0], A.shape[1]), generator=gen) / A.shape[1] ** 0.5
        opt = torch.optim.Adam([A, B], lr=1e-3)
        for _ in range(steps):
            opt.zero_grad()
            (young.scaling * B @ A - target).pow(2).sum().backward()
            opt.step()
        modules[name] = LoraFactors(A=A.detach(), B=B.detach())
    return young.with_modules(modules)


def dense_truncate(delta: torch.Tensor, r: int) -> torch.Tensor:
    U, S, Vh = torch.linalg.svd(delta)
    return U[:, :r] @ torch.diag(S[:r]) @ Vh[:r]


def formula_error(name: str, a: LoraAdapter, b: LoraAdapter, child: LoraAdapter, params: dict) -> float | None:
    errors = []
    for module in a.modules:
        Da, Db, Dc = a.delta(module), b.delta(module), child.delta(module)
        if name == "X3":
            k = params["k"]
            Ua, Sa, Vha = torch.linalg.svd(Da)
            Ub, Sb, Vhb = torch.linalg.svd(Db)
            r = a.rank
            want = Ua[:, :k] @ torch.diag(Sa[:k]) @ Vha[:k] + Ub[:, k:r] @ torch.diag(Sb[k:r]) @ Vhb[k:r]
        elif name == "X4":
            want = dense_truncate(Db + params["eta"] * (Da - Db), a.rank)
        else:
            return None
        errors.append(float((Dc - want).norm() / want.norm()))
    return max(errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="parents trained 50 steps, not 200")
    args = parser.parse_args()
    steps = 50 if args.quick else 200
    a, b = trained(1, steps), trained(2, steps)
    gen = torch.Generator().manual_seed(9)
    targets = {n: 0.01 * torch.randn(a.delta(n).shape, generator=gen) for n in a.modules}
    parent_speed = learning_speed(a, targets, steps=10, lr=1e-5)
    figures: dict[str, dict] = {}
    log("op  norm_ratio  eff_rank(parent→child)  dead  formula_err  speed(child/parent, balanced/parent)")
    for name in sorted(OPERATORS):
        parents = [a] if name in MUTATIONS else [a, b]
        child, params = apply_operator(name, parents, torch.Generator().manual_seed(0))
        row = {
            "norm_ratio": round(delta_norm_ratio(a, child), 4),
            "eff_rank_parent": round(mean_effective_rank(a), 3),
            "eff_rank_child": round(mean_effective_rank(child), 3),
            "dead": dead_components(child),
            "formula_error": formula_error(name, a, b, child, params),
        }
        if name in ("X3", "X4"):
            same, _ = apply_operator(name, [a, a], torch.Generator().manual_seed(0), IDENTITY[name])
            row["self_cross_error"] = max(
                float((same.delta(m) - a.delta(m)).norm() / a.delta(m).norm()) for m in a.modules
            )
        if name in IDENTITY:
            twin, _ = apply_operator(name, [a for _ in parents], torch.Generator().manual_seed(0), IDENTITY[name])
            row["speed_vs_parent"] = round(learning_speed(twin, targets, steps=10, lr=1e-5) / parent_speed, 3)
            row["balanced_speed_vs_parent"] = round(
                learning_speed(rebalanced(twin), targets, steps=10, lr=1e-5) / parent_speed, 3
            )
        figures[name] = row
        log(
            f"{name}  {row['norm_ratio']:.3f}  {row['eff_rank_parent']:.2f}→{row['eff_rank_child']:.2f}  "
            f"{row['dead']}  {row['formula_error']}  "
            f"{row.get('speed_vs_parent')}, {row.get('balanced_speed_vs_parent')}"
        )
    print(json.dumps({"quick": args.quick, "rank": a.rank, "modules": len(a.modules), "operators": figures}))


if __name__ == "__main__":
    main()
