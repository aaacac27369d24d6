"""What a seed on every vLLM request costs, and what it buys (issue 53).

Every request the project sends carries a seed (``GenerationRequest.seed``), so vLLM gives it a
``torch.Generator`` of its own; a seeded row's noise is then drawn row by row, and on a GPU the
FlashInfer top-k/top-p sampler is skipped (docs/benchmarks.md#seeds-per-request says where). One
vLLM server (``VLLMBackend``) samples the same batch, ``--requests`` × ``--n`` samples of
``--tokens`` new tokens each (end of sequence ignored, so both arms decode the same tokens),
(a) each request with its own seed and (b) with none (``seed=None``), for each sampler of
``--samplers`` (top_k:top_p; 50:1.0 is the presets'), in alternating order (A B, then B A) for
``--rounds`` timed rounds after one untimed round of each. Reproducibility: whether the seeded
batch samples the same tokens every round, its first requests the same when sent alone, and
whether the unseeded batch does not.

    .venv/bin/python benchmarks/request_seeds.py [--model embedded:smollm2-135m-instruct] [--rounds 4] [--adapters 2]
    .venv/bin/python benchmarks/request_seeds.py --quick     # SmolLM2-135M, 8 × 2 samples of 16 tokens, 2 rounds

Final line (JSON): per sampler, seeded and unseeded tokens/s over all rounds, their ratio and
each round's; the model runner the server chose; the reproducibility shares.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.vllm import DEFAULT_VENV, VLLMBackend
from populora_core.models import load_model, resolve_model

TASK = "Write a Python function that {what}, with a docstring and two doctests, then explain it in a paragraph."
WHATS = (
    "merges two sorted lists", "counts the vowels of a string", "rotates a matrix by 90 degrees",
    "parses an ISO date", "finds the longest common prefix", "flattens a nested list",
    "checks a sudoku row", "computes a running median",
)  # fmt: skip


MICRO = """
import json, statistics, sys, time
import torch
from vllm.platforms import current_platform
from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

current_platform.import_kernels()
rows, vocab, top_k, repeats = (int(x) for x in sys.argv[1:5])
top_p = float(sys.argv[5])
sampler = TopKTopPSampler()
logits = torch.randn(rows, vocab) * 3
k = torch.full((rows,), top_k, dtype=torch.int32) if top_k > 0 else None
p = torch.full((rows,), top_p) if top_p < 1 else None
gens = {"unseeded": {}, "seeded": {i: torch.Generator().manual_seed(1000 + i) for i in range(rows)}}
times = {"unseeded": [], "seeded": []}
for r in range(repeats):
    for arm in ("unseeded", "seeded") if r % 2 else ("seeded", "unseeded"):
        x = logits.clone()
        t0 = time.perf_counter()
        sampler.forward(x, gens[arm], None if k is None else k.clone(), p)
        times[arm].append(time.perf_counter() - t0)
loop = []
for _ in range(repeats * 10):  # what forward_cpu does more for seeded rows: a draw from each one's generator
    seeds = torch.randint(0, 2**31, (rows,), dtype=torch.long)
    t0 = time.perf_counter()
    for i, gen in gens["seeded"].items():
        seeds[i] = torch.randint(0, 2**31, (1,), generator=gen, dtype=torch.long).item()
    loop.append(time.perf_counter() - t0)
out = {"forward": sampler.forward.__name__}
out.update({a + "_ms": round(statistics.median(t) * 1e3, 2) for a, t in times.items()})
out["seed_loop_ms"] = round(statistics.median(loop) * 1e3, 3)
print(json.dumps(out))
"""
"""The server's own sampler (``TopKTopPSampler``) on one decode step's logits, run by the vLLM venv's python:
median ms of a step with every row seeded and with none, and of the per-row seed draws alone."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def make_adapters(path: Path, count: int, rank: int) -> tuple[Path, list[str]]:
    """``count`` rank-``rank`` adapters whose B factors are drawn (each changes the model), saved under a temp dir."""
    from populora_core.config import PopulationConfig, RatingConfig
    from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter

    model, _ = load_model(path, dtype="float32")
    config = PopulationConfig(
        teachers=count // 2, students=count - count // 2, rank=rank, alpha=2.0 * rank, init_b_std=0.02
    )
    members, adapters = create_population(
        config, RatingConfig(), lora_shapes_from_model(model, config.target_modules), 0
    )
    del model
    root = Path(tempfile.mkdtemp(prefix="request-seeds-"))
    for m in members:
        save_adapter(adapters[m.adapter_id], root / m.adapter_id)
    return root, [m.adapter_id for m in members]


def batch(count: int, n: int, adapters: Sequence[str], seeded: bool) -> list[GenerationRequest]:
    """Request i: its own prompt, adapter i mod len(adapters), seed 1000 (i + 1) when ``seeded`` (vLLM
    seeds sample j with seed + j)."""
    names = list(adapters) or [BASE]
    return [
        GenerationRequest(
            [{"role": "user", "content": f"Task {i}. " + TASK.format(what=WHATS[i % len(WHATS)])}],
            adapter=names[i % len(names)],
            n=n,
            seed=1000 * (i + 1) if seeded else None,
        )
        for i in range(count)
    ]


def tokens_of(out: list[list]) -> list[list[tuple[int, ...]]]:
    return [[tuple(c.token_ids) for c in completions] for completions in out]


def same_share(a: list[list[tuple[int, ...]]], b: list[list[tuple[int, ...]]]) -> float:
    """The share of samples of ``b`` whose tokens equal those of ``a``'s sample at the same place."""
    pairs = [(x, y) for xs, ys in zip(a, b, strict=False) for x, y in zip(xs, ys, strict=True)]
    return sum(x == y for x, y in pairs) / len(pairs)


def sampler_step(rows: int, vocab: int, top_k: int, top_p: float, repeats: int) -> dict:
    """``MICRO``'s figures for ``rows`` rows of ``vocab`` logits (top_k 0, top_p 1: vLLM applies neither)."""
    argv = [str(DEFAULT_VENV / "bin" / "python"), "-c", MICRO, *map(str, (rows, vocab, top_k, repeats, top_p))]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def runner_of(log: Path | None) -> str:
    """The model runner the server's log names (v1: the sampler of vllm/v1/sample; v2: vllm/v1/worker/gpu/sample)."""
    text = log.read_text(errors="replace") if log is not None and log.exists() else ""
    if "using the V1 model runner" in text:
        return "v1"
    return "v2" if "Using V2 Model Runner" in text else "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded:qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--dtype", default="bfloat16", help="the vLLM server's")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--n", type=int, default=4, help="samples per request")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per sample")
    ap.add_argument("--rounds", type=int, default=4, help="timed rounds of each arm")
    ap.add_argument("--samplers", default="0:1.0,50:1.0", help="top_k:top_p pairs; 0 disables top-k")
    ap.add_argument("--adapters", type=int, default=0, help="rank --rank LoRA adapters the requests cycle over")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alone", type=int, default=4, help="seeded requests also sent alone (batch independence)")
    ap.add_argument("--micro-repeats", type=int, default=20, help="sampler-alone steps of each arm")
    ap.add_argument("--quick", action="store_true", help="SmolLM2-135M, 8 × 2 samples of 16 tokens, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.model, args.requests, args.n, args.tokens, args.rounds = "embedded:smollm2-135m-instruct", 8, 2, 16, 2
        args.samplers, args.alone, args.micro_repeats = "50:1.0", 2, 6

    started = time.perf_counter()
    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    root, ids = make_adapters(path, args.adapters, args.rank) if args.adapters else (None, [])
    arms = {"seeded": batch(args.requests, args.n, ids, True), "unseeded": batch(args.requests, args.n, ids, False)}
    samplers = [(int(k), float(p)) for k, p in (pair.split(":") for pair in args.samplers.split(","))]
    out: dict = {
        "model": args.model, "dtype": args.dtype, "requests": args.requests, "n": args.n,
        "tokens": args.tokens, "rounds": args.rounds, "adapters": args.adapters, "samplers": {},
    }  # fmt: skip
    repro: dict[str, list[float]] = {"seeded": [], "unseeded": [], "alone": []}
    say(f"starting vLLM ({args.model}, {args.dtype}) ...")
    with VLLMBackend(
        path, tokenizer, dtype=args.dtype, max_loras=max(1, len(ids)), max_lora_rank=args.rank, max_model_len=1024
    ) as vllm:
        for a in ids:
            vllm.load_adapter(a, root / a)
        say(f"server up after {time.perf_counter() - started:.0f} s")
        for top_k, top_p in samplers:
            params = SamplingParams(1.0, top_p=top_p, top_k=top_k, max_new_tokens=args.tokens, ignore_eos=True)
            first = {arm: tokens_of(vllm.generate(reqs, params)) for arm, reqs in arms.items()}  # untimed: warm
            seconds: dict[str, list[float]] = {"seeded": [], "unseeded": []}
            produced = args.requests * args.n * args.tokens
            for r in range(args.rounds):
                for arm in ("seeded", "unseeded") if r % 2 == 0 else ("unseeded", "seeded"):
                    t0 = time.perf_counter()
                    got = vllm.generate(arms[arm], params)
                    seconds[arm].append(time.perf_counter() - t0)
                    assert sum(len(c.token_ids) for cs in got for c in cs) == produced, "a sample stopped short"
                    repro[arm].append(same_share(first[arm], tokens_of(got)))
                    say(f"top_k {top_k} top_p {top_p} round {r + 1}/{args.rounds} {arm}: {seconds[arm][-1]:.1f} s")
            alone = [tokens_of(vllm.generate([req], params))[0] for req in arms["seeded"][: args.alone]]
            repro["alone"].append(same_share(first["seeded"][: args.alone], alone))
            rate = {arm: produced * args.rounds / sum(s) for arm, s in seconds.items()}
            ratios = [u / s for s, u in zip(seconds["seeded"], seconds["unseeded"], strict=True)]
            out["samplers"][f"k{top_k}_p{top_p:g}".replace(".", "_")] = {
                "seeded_tok_s": round(rate["seeded"], 1),
                "unseeded_tok_s": round(rate["unseeded"], 1),
                "seeded_over_unseeded": round(rate["seeded"] / rate["unseeded"], 3),
                "round_ratios": [round(x, 3) for x in ratios],
                "round_ratio_median": round(statistics.median(ratios), 3),
                "step_ms": round(statistics.median(seconds["unseeded"]) / args.tokens * 1e3, 1),  # decode + prefill
            }
        out["runner"] = runner_of(vllm.log_path)
    vocab = AutoConfig.from_pretrained(str(path)).vocab_size
    for (top_k, top_p), figures in zip(samplers, out["samplers"].values(), strict=True):
        say(f"the sampler alone, {args.requests * args.n} rows × {vocab}, top_k {top_k} top_p {top_p} ...")
        step = sampler_step(args.requests * args.n, vocab, top_k, top_p, args.micro_repeats)
        figures["sampler"] = step
        figures["seed_loop_share_of_step"] = round(step["seed_loop_ms"] / figures["step_ms"], 5)
    headline = out["samplers"][next(iter(out["samplers"]))]  # the first of --samplers
    out["seeded_tok_s"], out["unseeded_tok_s"] = headline["seeded_tok_s"], headline["unseeded_tok_s"]
    out["seeded_same_frac_min"] = round(min(repro["seeded"]), 4)  # 1: every seeded round sampled round 0's tokens
    out["seeded_alone_same_frac_min"] = round(min(repro["alone"]), 4)  # 1: the same tokens sent alone
    out["unseeded_same_frac_max"] = round(max(repro["unseeded"]), 4)  # ~0: fresh samples every round
    out["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
