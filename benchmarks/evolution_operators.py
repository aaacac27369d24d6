"""Seconds per child for every evolution operator at Qwen2.5-7B adapter shape.

Rank-32 adapters on q, k, v, o, gate, up, down of 28 layers (hidden 3584,
intermediate 18944, k/v width 512): ~81 M parameters, fp32. Each operator is
timed (median of several children after a warm-up). In the same run, PEFT's
``add_weighted_adapter`` with ``combination_type="svd"`` and ``"dare_linear"``
merges the same two adapters on real ``nn.Linear`` modules of the same shapes;
it forms every ΔW and takes its full SVD, so it is timed on a subset of layers
(or, with --quick, of module types) and scaled to the whole model.

    python benchmarks/evolution_operators.py [--quick] [--peft-layers 1]

Prints progress on stderr and one final JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from populora_core.config import PopulationConfig
from populora_core.population.adapters import init_adapter, lora_shapes
from populora_core.population.evolution import MUTATIONS, OPERATORS, apply_operator
from populora_core.population.lora import LoraAdapter, layer_index

QWEN25_7B = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
}


def log(msg: str) -> None:
    print(f"[evolution_operators] {msg}", file=sys.stderr, flush=True)


def time_operator(name: str, parents: list[LoraAdapter], repeats: int) -> float:
    apply_operator(name, parents, torch.Generator().manual_seed(0))  # warm-up
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        apply_operator(name, parents, torch.Generator().manual_seed(i + 1))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peft_merge_seconds(
    a: LoraAdapter, b: LoraAdapter, layers: list[int], module_types: list[str], combination: str
) -> dict[str, float]:
    """Seconds PEFT's add_weighted_adapter takes per module type, over ``layers``."""
    from peft import LoraConfig, get_peft_model

    names = [n for n in a.modules if layer_index(n) in layers and n.split(".")[-1] in module_types]
    root = torch.nn.Module()
    for name in names:
        d_out, d_in = a.modules[name].B.shape[0], a.modules[name].A.shape[1]
        parent = root
        for part in name.split(".")[:-1]:
            if not hasattr(parent, part):
                parent.add_module(part, torch.nn.Module())
            parent = getattr(parent, part)
        linear = torch.nn.Linear(d_in, d_out, bias=False, device="meta").to_empty(device="cpu")
        parent.add_module(name.split(".")[-1], linear)
    config = LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=module_types, lora_dropout=0.0)
    model = get_peft_model(root, config, adapter_name="first")
    model.add_adapter("second", config)
    modules = dict(model.base_model.model.named_modules())
    for name in names:
        for adapter_name, adapter in (("first", a), ("second", b)):
            modules[name].lora_A[adapter_name].weight.data.copy_(adapter.modules[name].A)
            modules[name].lora_B[adapter_name].weight.data.copy_(adapter.modules[name].B)
    # Time each module type on its own: PEFT merges module by module.
    per_type: dict[str, float] = {}
    for mtype in module_types:
        subset = [n for n in names if n.endswith(mtype)]
        t0 = time.perf_counter()
        _merge_subset(model, subset, combination, f"m_{mtype}")
        per_type[mtype] = (time.perf_counter() - t0) / len(layers)
        log(f"  peft {combination} {mtype}: {per_type[mtype]:.2f} s per layer")
    return per_type


def _merge_subset(model, subset: list[str], combination: str, new_name: str) -> None:
    """Runs PEFT's own add_weighted_adapter, restricted to ``subset``: its loop
    walks ``model.named_modules()``, which is filtered for the call."""
    lora_model = model.base_model
    kwargs = {"density": 0.5} if combination == "dare_linear" else {}
    keep = set(subset)
    real_named_modules = lora_model.model.named_modules

    def named_modules(*args, **kw):
        for n, m in real_named_modules(*args, **kw):
            if not hasattr(m, "lora_A") or n in keep:
                yield n, m

    lora_model.model.named_modules = named_modules
    try:
        lora_model.add_weighted_adapter(
            ["first", "second"], [0.5, 0.5], new_name, combination_type=combination, **kwargs
        )
    finally:
        del lora_model.model.named_modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats; PEFT on q/k/v of one layer only")
    parser.add_argument("--peft-layers", type=int, default=1, help="layers PEFT's merges are timed on (default 1)")
    parser.add_argument("--repeats", type=int, default=None, help="children timed per operator (default 3, quick 1)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    pop = PopulationConfig(rank=32, alpha=64.0, init_b_std=0.01)
    shapes = lora_shapes(QWEN25_7B, pop.target_modules)
    gen = torch.Generator().manual_seed(0)
    a, b = init_adapter(shapes, pop, gen), init_adapter(shapes, pop, gen)
    log(f"adapters: {len(shapes)} modules, {a.num_parameters() / 1e6:.1f} M parameters each, rank {a.rank}")

    figures: dict[str, float | bool | str] = {
        "quick": args.quick,
        "adapter_params_m": round(a.num_parameters() / 1e6, 1),
    }
    for name in OPERATORS:
        parents = [a] if name in MUTATIONS else [a, b]
        seconds = time_operator(name, parents, repeats)
        figures[f"{name}_s"] = round(seconds, 3)
        log(f"{name}: {seconds:.3f} s per child")
    figures["max_operator_s"] = max(v for k, v in figures.items() if k[:2] in OPERATORS and k.endswith("_s"))

    layers = list(range(args.peft_layers))
    module_types = ["q_proj", "k_proj", "v_proj"] if args.quick else list(pop.target_modules)
    for combination in ("svd", "dare_linear"):
        per_type = peft_merge_seconds(a, b, layers, module_types, combination)
        if args.quick:  # o has q's shape; gate/up/down scale from q by SVD cost m·n² (m ≥ n)
            q = per_type["q_proj"]
            per_type["o_proj"] = q
            ratio = (18944 * 3584**2) / (3584 * 3584**2)
            for m in ("gate_proj", "up_proj", "down_proj"):
                per_type[m] = q * ratio if combination == "svd" else q
        total = sum(per_type.values()) * QWEN25_7B["num_hidden_layers"]
        figures[f"peft_{combination}_s"] = round(total, 1)
        log(f"peft {combination}: {total:.1f} s for the whole adapter (scaled from {len(layers)} layer(s))")
    figures["peft_scaled_from_layers"] = len(layers)
    figures["peft_extrapolated_module_types"] = args.quick
    figures["speedup_vs_peft_svd"] = round(figures["peft_svd_s"] / figures["max_operator_s"], 1)
    figures["speedup_vs_peft_dare_linear"] = round(figures["peft_dare_linear_s"] / figures["X1_s"], 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
