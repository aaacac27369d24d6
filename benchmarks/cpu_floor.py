"""How far decode, prefill and update are from what this machine's CPU can do.

In one run, on this machine:
1. the hardware: memory bandwidth (a streaming copy of 512 MiB, bytes read + written over
   seconds) and the fp32 GEMM rate at the model's shapes (torch.mm of (M, d) × (d, d_ff)
   for M = 1, 8, 64, 512);
2. the floor of each phase for cpu-small's model, from those two rates and the model's
   shapes (read from its config.json):
   - decode, batch 8, 4 adapters: every step reads every weight once, the LoRA factors of
     the adapters in the batch and each row's KV cache, and does 2 FLOPs per weight per
     row: max(bytes / bandwidth, FLOPs / the best GEMM rate measured). Not the rate at
     M = 8: a GEMM of 8 rows reads its weight well below the bandwidth here, which is
     the library's shortfall, not the machine's;
   - prefill, 8 prompts × 250 tokens: 2 FLOPs per weight per token (the vocabulary
     projection for the last position only) / GEMM rate at M = 512;
   - one student's update (12 sequences of 250 prompt + 100 completion tokens): forward
     2 FLOPs per weight per token, backward 2 more (activation gradients; LoRA weight
     gradients are negligible) / GEMM rate at M = 512;
3. the project's time for each phase, measured with its own code (``HFBackend``,
   ``training.trainer.Trainer``) on the same shapes, and the ratio to the floor; the
   decode step also with every layer through ``F.linear`` (``decode_step_f_linear_s``:
   ``inference.rows`` off), for comparison;
4. with ``--before REV``: one cpu-small generation with this checkout and with the code at
   REV (a git worktree), one after the other in this run; ``generation_speedup`` is the
   ratio of their generation seconds.

    python benchmarks/cpu_floor.py [--quick] [--threads N] [--before REV]

--quick: SmolLM2-135M and smaller shapes (plumbing). Prints one final JSON line with
decode_vs_floor, prefill_vs_floor, update_vs_floor and (with --before) generation_speedup.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

REPO = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(f"[cpu_floor] {msg}", file=sys.stderr, flush=True)


def best_of(fn, repeats: int = 3) -> float:
    """The fastest of ``repeats`` timed calls (seconds), after one warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bandwidth_gbs(mib: int = 512) -> float:
    """Streaming copy: (bytes read + bytes written) / seconds, in GB/s."""
    n = mib * 2**20 // 4
    src, dst = torch.ones(n), torch.empty(n)
    seconds = best_of(lambda: dst.copy_(src))
    return 2 * n * 4 / seconds / 1e9


def gemm_gflops(m: int, k: int, n: int) -> float:
    """The best rate of (m, k) rows times an (n, k) weight as ``nn.Linear`` stores it, over
    both operand orders (x·Wᵀ as ``F.linear`` computes it, and W·xᵀ): what the machine can do."""
    x, w = torch.randn(m, k), torch.randn(n, k)
    repeats = 5 if m < 64 else 3
    seconds = min(best_of(lambda: torch.mm(x, w.t()), repeats), best_of(lambda: torch.mm(w, x.t()), repeats))
    return 2 * m * k * n / seconds / 1e9


def shapes(config: dict) -> dict[str, float]:
    """Weights and KV bytes per token of a Qwen2-style model (fp32)."""
    d, ff, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    heads, kv_heads, vocab = config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]
    head_dim = d // heads
    attn = d * d * 2 + d * kv_heads * head_dim * 2  # q, o; k, v
    per_layer = attn + 3 * d * ff
    return {
        "linear_params": layers * per_layer,
        "vocab_params": vocab * d,
        "kv_bytes_per_token": layers * 2 * kv_heads * head_dim * 4,
        "layers": layers,
        "d": d,
        "ff": ff,
        "kv_dim": kv_heads * head_dim,
    }


def lora_params(s: dict, rank: int) -> float:
    """LoRA factors of one adapter on q, k, v, o, gate, up, down."""
    d, ff, kv = s["d"], s["ff"], s["kv_dim"]
    per_layer = rank * ((d + d) * 2 + (d + kv) * 2 + (d + ff) * 3)
    return s["layers"] * per_layer


def floors(
    s: dict,
    rates: dict[int, float],
    bw: float,
    rank: int,
    *,
    batch=8,
    adapters=4,
    ctx=300,
    prompt=250,
    seqs=12,
    completion=100,
) -> dict[str, float]:
    """Seconds each phase cannot go below (module docstring)."""
    weights = s["linear_params"] + s["vocab_params"]
    decode_bytes = 4 * (weights + adapters * lora_params(s, rank)) + batch * ctx * s["kv_bytes_per_token"]
    decode_flops = 2 * batch * weights
    prefill_flops = 2 * batch * prompt * s["linear_params"] + 2 * batch * s["vocab_params"]
    tokens = seqs * (prompt + completion)
    update_flops = 4 * tokens * s["linear_params"] + 4 * seqs * completion * s["vocab_params"]
    return {
        "decode_step": max(decode_bytes / (bw * 1e9), decode_flops / (max(rates.values()) * 1e9)),
        "decode_step_bytes": decode_bytes,
        "prefill": prefill_flops / (rates[512] * 1e9),
        "update": update_flops / (rates[512] * 1e9),
    }


def measure_project(
    model_name: str, rank: int, *, batch=8, adapters=4, prompt=250, steps=64, seqs=12, completion=100
) -> dict[str, float]:
    """The project's own decode step, prefill and one update on the floors' shapes."""
    from populora_core.config import GRPOConfig, PopulationConfig, RatingConfig
    from populora_core.inference import rows
    from populora_core.inference.base import GenerationRequest, SamplingParams
    from populora_core.inference.hf import HFBackend
    from populora_core.models import load_model, resolve_model
    from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter
    from populora_core.training.rollouts import Rollout
    from populora_core.training.trainer import Trainer

    path = resolve_model(model_name)
    model, tokenizer = load_model(path, dtype="float32")
    backend = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=batch)
    pop = PopulationConfig(teachers=adapters // 2, students=adapters - adapters // 2, rank=rank, alpha=2.0 * rank)
    members, weights = create_population(pop, RatingConfig(), lora_shapes_from_model(model, pop.target_modules), 0)
    g = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for m in members:
            save_adapter(weights[m.adapter_id], Path(tmp) / m.adapter_id)
            backend.load_adapter(m.adapter_id, Path(tmp) / m.adapter_id)
    vocab = tokenizer.vocab_size
    prompts = [torch.randint(100, vocab - 100, (prompt,), generator=g).tolist() for _ in range(batch)]
    texts = [tokenizer.decode(p) for p in prompts]
    requests = [GenerationRequest(t, members[i % len(members)].adapter_id, seed=i) for i, t in enumerate(texts)]

    def run(n: int) -> None:
        backend.generate(requests, SamplingParams(temperature=1.0, top_k=50, max_new_tokens=n, ignore_eos=True))

    prefill = best_of(lambda: run(1), repeats=2)
    full = best_of(lambda: run(steps), repeats=1)
    rows.MAX_ROWS, kept = 0, rows.MAX_ROWS  # the same steps through F.linear (x·Wᵀ), for comparison
    try:
        full_linear = best_of(lambda: run(steps), repeats=1)
    finally:
        rows.MAX_ROWS = kept
    trainer = Trainer(load_model(path, dtype="float32")[0], tokenizer, pop)
    rollouts = [
        Rollout(
            torch.randint(100, vocab - 100, (prompt,), generator=g).tolist(),
            torch.randint(100, vocab - 100, (completion,), generator=g).tolist(),
            (-torch.rand(completion, generator=g)).tolist(),
            float(torch.randn((), generator=g)),
        )
        for _ in range(seqs)
    ]
    grpo = GRPOConfig(micro_batch_size=4, gradient_checkpointing=False)
    adapter = weights[members[-1].adapter_id]
    update = best_of(lambda: trainer.update(adapter, rollouts, grpo, None, seed=0), repeats=1)
    step, step_linear = (full - prefill) / (steps - 1), (full_linear - prefill) / (steps - 1)
    return {"prefill": prefill, "decode_step": step, "decode_step_f_linear": step_linear, "update": update}


def generation_seconds(source: Path, runs: Path, preset: str) -> float:
    """Seconds of one generation of ``preset`` trained with the code in ``source`` (its summary's)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(source))
    env.pop("PREFECT_API_URL", None)
    args = ["train", "--preset", preset, "--generations", "1", "--run-id", "floor", "--runs-dir", str(runs)]
    subprocess.run([sys.executable, "-m", "cli", *args], cwd=source, env=env, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((runs / "floor" / "gen_0000" / "_SUCCESS").read_text())
    return float(summary["seconds"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="SmolLM2-135M, smaller shapes: plumbing only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--before", help="also time one cpu-small generation with the code at this revision")
    ap.add_argument("--preset", default="cpu-small")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from populora_core.config import load_config
    from populora_core.models import resolve_model

    config = load_config(preset=args.preset)
    model_name = "embedded:smollm2-135m-instruct" if args.quick else config.model.name
    rank = config.population.rank
    model_config = json.loads((resolve_model(model_name) / "config.json").read_text())
    s = shapes(model_config)
    log(f"{model_name}: {s['linear_params'] / 1e6:.0f}M linear + {s['vocab_params'] / 1e6:.0f}M vocabulary weights")
    bw = bandwidth_gbs(128 if args.quick else 512)
    rates = {m: gemm_gflops(m, s["d"], s["ff"]) for m in (1, 8, 64, 512)}
    log(f"bandwidth {bw:.1f} GB/s; GEMM GFLOP/s " + ", ".join(f"M={m}: {r:.1f}" for m, r in rates.items()))
    shape_args = {"prompt": 64, "seqs": 4, "completion": 32} if args.quick else {}
    floor = floors(s, rates, bw, rank, **shape_args)
    measured = measure_project(model_name, rank, steps=16 if args.quick else 64, **shape_args)
    out = {
        "threads": args.threads,
        "bandwidth_gbs": round(bw, 2),
        **{f"gemm_gflops_m{m}": round(r, 1) for m, r in rates.items()},
        **{f"{k}_floor_s": round(v, 4) for k, v in floor.items() if not k.endswith("bytes")},
        **{f"{k}_s": round(v, 4) for k, v in measured.items()},
        "decode_vs_floor": round(measured["decode_step"] / floor["decode_step"], 2),
        "prefill_vs_floor": round(measured["prefill"] / floor["prefill"], 2),
        "update_vs_floor": round(measured["update"] / floor["update"], 2),
    }
    if args.before:
        with tempfile.TemporaryDirectory(prefix="cpu-floor-") as tmp:
            tree = Path(tmp) / "before-src"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=REPO, check=True)
            try:
                before = generation_seconds(tree, Path(tmp) / "before", args.preset)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=False)
            now = generation_seconds(REPO, Path(tmp) / "now", args.preset)
        out.update(generation_s_now=round(now, 1), generation_s_before=round(before, 1))
        out["generation_speedup"] = round(before / now, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
