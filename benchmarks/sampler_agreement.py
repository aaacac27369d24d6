"""How far the sampler's log-probabilities are from the learner's (docs/models.md#sampler-and-learner).

A population of LoRA adapters (``--rank``, their B factors drawn so that each adapter changes
the model) is served by a vLLM server in ``--vllm-dtype``; each adapter samples
``--requests`` / adapters completions of a teacher-length prompt at temperature 1. The
learner (transformers + peft, the update's own model and forward pass) then scores the same tokens under the
same adapters in each of ``--learner-dtypes``; the gap |log π_sampler − log π_learner| over
every sampled token is what ``train_metrics.sampler_gap_*`` records at an update.

    .venv/bin/python benchmarks/sampler_agreement.py [--vllm-dtype bfloat16] [--device cuda]
    .venv/bin/python benchmarks/sampler_agreement.py --quick     # 2 rank-8 adapters, 4 requests of 16 tokens

Final line (JSON): per learner dtype, the mean, 99th percentile and maximum gap, the ratio
π_learner / π_sampler's spread and maximum, and the share of tokens beyond GRPO's clip (1.2).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.inference.base import GenerationRequest, SamplingParams
from populora_core.inference.vllm import VLLMBackend
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter
from populora_core.population.lora import LoraAdapter
from populora_core.training.rollouts import token_logprobs
from populora_core.training.trainer import Trainer, sampler_agreement

PROMPT = "Write a new Python function f and an input for it, as in these examples.\n\n" + "\n\n".join(
    f"```python\ndef f(x):\n    return [v * {i} for v in x if v % {i + 2}]\n```" for i in range(8)
)


def learner_logprobs(trainer: Trainer, adapter: LoraAdapter, prompt: list[int], tokens: list[int]) -> list[float]:
    """The learner's log π of ``tokens`` after ``prompt`` under ``adapter``: the update's own
    model (peft, one slot) and forward pass (``token_logprobs``)."""
    trainer.load(adapter)
    device = next(trainer.model.parameters()).device
    seq = torch.tensor([prompt + tokens], device=device)
    with torch.no_grad():
        lp = token_logprobs(trainer.model, seq, torch.ones_like(seq), chunk=64, start=len(prompt) - 1)
    return lp[0].float().cpu().tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded:smollm2-135m-instruct")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--vllm-dtype", default="float32")
    ap.add_argument("--learner-dtypes", default="float32,bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="2 rank-8 adapters, 4 requests of 16 tokens")
    args = ap.parse_args()
    if args.quick:
        args.adapters, args.rank, args.requests, args.tokens = 2, 8, 4, 16

    path = resolve_model(args.model)
    model, tokenizer = load_model(path, dtype="float32")
    config = PopulationConfig(
        teachers=args.adapters // 2, students=args.adapters - args.adapters // 2, rank=args.rank,
        alpha=2.0 * args.rank, init_b_std=0.02,
    )  # fmt: skip
    members, adapters = create_population(
        config, RatingConfig(), lora_shapes_from_model(model, config.target_modules), 0
    )
    del model
    root, ids = Path(tempfile.mkdtemp(prefix="agreement-")), [m.adapter_id for m in members]
    for m in members:
        save_adapter(adapters[m.adapter_id], root / m.adapter_id)
    requests = [
        GenerationRequest([{"role": "user", "content": f"Problem {i}.\n{PROMPT}"}], adapter=ids[i % len(ids)], seed=i)
        for i in range(args.requests)
    ]
    started = time.perf_counter()
    with VLLMBackend(path, tokenizer, dtype=args.vllm_dtype, max_loras=len(ids), max_lora_rank=args.rank) as vllm:
        for a in ids:
            vllm.load_adapter(a, root / a)
        sampled = [c for [c] in vllm.generate(requests, SamplingParams(1.0, top_k=0, max_new_tokens=args.tokens))]
    sample_s = time.perf_counter() - started

    out = {"vllm_dtype": args.vllm_dtype, "rank": args.rank, "requests": args.requests, "sample_s": round(sample_s, 1)}
    for dtype in args.learner_dtypes.split(","):
        base, _ = load_model(path, dtype=dtype, device=args.device)
        trainer = Trainer(base, tokenizer, config)
        pairs = [
            (learner_logprobs(trainer, adapters[r.adapter], c.prompt_token_ids, c.token_ids), c.logprobs)
            for r, c in zip(requests, sampled, strict=True)
        ]
        figures = sampler_agreement(pairs, cap=1.2)
        out[f"learner_{dtype}"] = {
            "tokens": int(figures["sampler_tokens"]),
            "gap_mean": round(figures["sampler_gap_mean"], 6),
            "gap_p99": round(figures["sampler_gap_p99"], 6),
            "gap_max": round(max(abs(a - b) for x, y in pairs for a, b in zip(x, y, strict=True)), 6),
            "ratio_std": round(figures["sampler_ratio_std"], 6),
            "ratio_max": round(figures["sampler_ratio_max"], 6),
            "beyond_clip_frac": round(figures["truncated_frac"], 6),
        }
        del trainer, base
    print(json.dumps(out))


if __name__ == "__main__":
    main()
