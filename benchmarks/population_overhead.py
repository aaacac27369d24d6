"""Rollout cost of a population against a single agent, and of mixed-adapter batching.

One generation's rollout phase (teacher proposals, then student solutions) for
4 teachers + 4 students is timed against a single adapter producing the same
number of completions of the same length with the same model (every sample runs
to max_new_tokens, EOS ignored, so both sides generate identical token counts).
Then the same 8-adapter workload is timed generated in one mixed-adapter batch
stream against adapter by adapter.

    python benchmarks/population_overhead.py [--quick] [--model REF] [--backend hf]

--quick: SmolLM2-135M, short completions (under 2 minutes). Default: the
embedded Qwen2.5-Coder-0.5B in bf16. Prints one final JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.inference.base import GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter
from populora_core.problems import SEED_PROBLEM, student_prompt, teacher_prompt
from populora_core.problems.prompts import ASSISTANT_PREFILL


def log(msg: str) -> None:
    print(f"[population_overhead] {msg}", file=sys.stderr, flush=True)


def rollout_requests(teachers, students, proposals_per_teacher, problems_per_student, samples):
    """(proposal requests, solution requests) of one generation's rollout phase."""
    proposals = [
        GenerationRequest(
            teacher_prompt("code_o", [SEED_PROBLEM]), adapter=t, seed=100 * i + k, prefill=ASSISTANT_PREFILL
        )
        for i, t in enumerate(teachers)
        for k in range(proposals_per_teacher)
    ]
    solutions = [
        GenerationRequest(
            student_prompt(SEED_PROBLEM), adapter=s, n=samples, seed=1000 * i + k, prefill=ASSISTANT_PREFILL
        )
        for i, s in enumerate(students)
        for k in range(problems_per_student)
    ]
    return proposals, solutions


def timed(backend, phases, params) -> tuple[float, int]:
    t0 = time.perf_counter()
    tokens = 0
    for requests in phases:
        tokens += sum(len(c.token_ids) for group in backend.generate(requests, params) for c in group)
    return time.perf_counter() - t0, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model", default=None, help="model reference (default: 0.5B, or SmolLM2 with --quick)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--backend", default="hf", choices=["hf", "vllm"], help="generation backend (vllm: make vllm-env)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ref = args.model or ("embedded:smollm2-135m-instruct" if args.quick else "embedded:qwen2.5-coder-0.5b-instruct")
    max_new = 24 if args.quick else 64
    ppt, pps, samples = (1, 1, 4) if args.quick else (2, 2, 4)
    params = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=max_new, ignore_eos=True)

    path = resolve_model(ref)
    model, tokenizer = load_model(path, dtype="bfloat16")
    pop = PopulationConfig(teachers=4, students=4, rank=32, alpha=64)
    members, adapters = create_population(pop, RatingConfig(), lora_shapes_from_model(model, pop.target_modules), 0)
    if args.backend == "vllm":
        from populora_core.inference.vllm import VLLMBackend

        del model
        backend = VLLMBackend(path, tokenizer, dtype="bfloat16", max_loras=len(members), max_lora_rank=32)
    else:
        backend = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=args.batch_size)
    tmp = tempfile.TemporaryDirectory()
    for m in members:
        save_adapter(adapters[m.adapter_id], Path(tmp.name) / m.adapter_id)
        backend.load_adapter(m.adapter_id, Path(tmp.name) / m.adapter_id)
    teachers = [m.adapter_id for m in members if m.role == "teacher"]
    students = [m.adapter_id for m in members if m.role == "student"]
    log(f"model {ref}, 4+4 adapters r=32, {max_new} tokens per completion, batch {args.batch_size}")

    pop_phases = rollout_requests(teachers, students, ppt, pps, samples)
    agent = [teachers[0]] * 4
    single_phases = rollout_requests(agent, agent, ppt, pps, samples)
    timed(backend, [pop_phases[0][:1]], params)  # warm-up
    pop_s, pop_tokens = timed(backend, pop_phases, params)
    log(f"population rollout: {pop_s:.1f} s, {pop_tokens} tokens")
    single_s, single_tokens = timed(backend, single_phases, params)
    log(f"single agent rollout: {single_s:.1f} s, {single_tokens} tokens")

    # 8 adapters: one mixed stream against adapter by adapter
    everyone = teachers + students
    per_adapter = [
        GenerationRequest(student_prompt(SEED_PROBLEM), adapter=a, n=2, seed=i) for i, a in enumerate(everyone)
    ]
    mixed_s, mixed_tokens = timed(backend, [per_adapter], params)
    seq_s, seq_tokens = timed(backend, [[r] for r in per_adapter], params)
    log(f"8 adapters mixed: {mixed_s:.1f} s; adapter by adapter: {seq_s:.1f} s")
    if hasattr(backend, "close"):
        backend.close()
    tmp.cleanup()
    print(
        json.dumps(
            {
                "quick": args.quick,
                "model": ref,
                "backend": args.backend,
                "completions": sum(r.n for phase in pop_phases for r in phase),
                "tokens_per_completion": max_new,
                "population_s": round(pop_s, 2),
                "single_s": round(single_s, 2),
                "population_over_single": round(pop_s / single_s, 3),
                "population_tokens_per_s": round(pop_tokens / pop_s, 1),
                "mixed_s": round(mixed_s, 2),
                "sequential_s": round(seq_s, 2),
                "mixed_speedup_vs_sequential": round(seq_s / mixed_s, 2),
                "same_tokens": pop_tokens == single_tokens and mixed_tokens == seq_tokens,
            }
        )
    )


if __name__ == "__main__":
    main()
