"""Format errors and proposal validity of the prompts, on fixed seeds.

The base model (no adapter) answers the same student problems (CRUXEval output and
input prediction, as ``code_o`` / ``code_i``) and writes the same teacher proposals
(one per task type and seed problem) with the project's prompts, prefill, stop
strings and cpu-small's token caps; the sandbox judges every answer and validates
every proposal. Run it on two revisions to compare prompts:

    python benchmarks/prompt_format.py [--problems 16] [--samples 2] [--proposals 4]
    python benchmarks/prompt_format.py --quick      # cpu-tiny (SmolLM2-135M), 2 problems, 1 proposal: plumbing
    git worktree add /tmp/before REV && PYTHONPATH=/tmp/before python benchmarks/prompt_format.py

(``PYTHONPATH`` makes the other revision's ``populora_core`` the one imported.) It also
counts the tokens that stopping at ``</answer>`` saved: the same requests decoded
without the stop string. Prints one final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from populora_core.config import load_config
from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.models import resolve_model
from populora_core.problems import (
    ASSISTANT_PREFILL,
    SEED_PROBLEMS,
    student_prompt,
    teacher_prompt,
    validate_proposals,
)
from populora_core.problems.answering import judge
from populora_core.sandbox import SandboxPool
from populora_core.stages.play import sampling_params
from populora_core.training.fixed_pool import cruxeval_problems


def log(msg: str) -> None:
    print(f"[prompt_format] {msg}", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument(
        "--data",
        type=Path,
        default=None,
        help="data directory holding cruxeval/ (default: `populora data download cruxeval`'s)",
    )
    ap.add_argument("--problems", type=int, default=16, help="CRUXEval problems per task type")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--proposals", type=int, default=4, help="proposals per task type")
    ap.add_argument("--no-stop-check", action="store_true", help="skip decoding without the stop string")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the preset's)")
    ap.add_argument("--quick", action="store_true", help="cpu-tiny, 2 problems of 1 sample, 1 proposal per task type")
    args = ap.parse_args()
    if args.quick:
        args.preset, args.problems, args.samples, args.proposals = "cpu-tiny", 2, 1, 1
    from populora_core.evaluation.datasets import data_dir, require

    args.data = args.data or data_dir()
    require(["cruxeval"], args.data)  # names `populora data download cruxeval` when missing
    config = load_config(preset=args.preset)
    import torch

    torch.set_num_threads(args.threads or config.model.threads or 2)
    started = time.perf_counter()
    backend = HFBackend(resolve_model(config.model.name), dtype=config.model.dtype, batch_size=16)
    inf = config.inference

    rng = np.random.default_rng(args.seed)
    pool_o = cruxeval_problems(args.data / "cruxeval" / "cruxeval.jsonl", ("code_o",))
    pool_i = cruxeval_problems(args.data / "cruxeval" / "cruxeval.jsonl", ("code_i",))
    idx = rng.choice(len(pool_o), size=args.problems * 2, replace=False)
    problems = [pool_o[i] for i in idx[: args.problems]] + [pool_i[i] for i in idx[args.problems :]]
    params = sampling_params(config, inf.student_max_new_tokens)
    requests = [
        GenerationRequest(student_prompt(p), BASE, n=args.samples, seed=args.seed * 1000 + k, prefill=ASSISTANT_PREFILL)
        for k, p in enumerate(problems)
    ]
    with SandboxPool(config.sandbox) as pool:
        log(f"{len(problems)} problems x {args.samples} samples")
        completions = backend.generate(requests, params, progress="solve")
        verdicts = judge(problems, completions, pool, config.problems, config.rewards)
        teacher_requests, types = [], []
        for tt in config.problems.task_types:
            seed_problem = next(p for p in SEED_PROBLEMS if p.task_type == tt)
            for j in range(args.proposals):
                prompt = teacher_prompt(tt, [seed_problem], min_inputs=config.problems.code_f_min_inputs)
                teacher_requests.append(GenerationRequest(prompt, BASE, seed=args.seed * 1000 + 500 + j))
                types.append(tt)
        teacher_requests = [
            GenerationRequest(r.prompt, BASE, seed=r.seed, prefill=ASSISTANT_PREFILL) for r in teacher_requests
        ]
        tparams = sampling_params(config, inf.teacher_max_new_tokens)
        log(f"{len(teacher_requests)} proposals")
        proposals = [c[0] for c in backend.generate(teacher_requests, tparams, progress="propose")]
        results = validate_proposals(
            [(t, c.text) for t, c in zip(types, proposals, strict=True)], pool, config.problems
        )
    tokens_with_stop = int(verdicts["tokens"].sum()) + sum(len(c.token_ids) for c in proposals)
    saved = None
    if not args.no_stop_check:
        nostop = SamplingParams(**{**params.__dict__, "stop": ()})
        again = backend.generate(requests, nostop, progress="solve, no stop")
        tnostop = SamplingParams(**{**tparams.__dict__, "stop": ()})
        again_t = backend.generate(teacher_requests, tnostop, progress="propose, no stop")
        tokens_without = sum(len(c.token_ids) for cs in again for c in cs) + sum(len(c[0].token_ids) for c in again_t)
        saved = 1 - tokens_with_stop / max(1, tokens_without)
    reasons = {}
    for r in results:
        if not r.valid:
            reasons[r.reason.split(":")[0]] = reasons.get(r.reason.split(":")[0], 0) + 1
    student_reasons = verdicts.loc[verdicts["status"] == "format_error", "detail"].value_counts().to_dict()
    for t in verdicts["text"].head(4):
        log("sample: " + t.replace("\n", "\\n")[:300])
    out = {
        "student_samples": len(verdicts),
        "format_error": round(float((verdicts["status"] == "format_error").mean()), 4),
        "format_error_by_type": verdicts.groupby("task_type")["status"]
        .agg(lambda s: round(float((s == "format_error").mean()), 4))
        .to_dict(),
        "format_error_reasons": student_reasons,
        "student_pass_rate": round(float((verdicts["status"] == "correct").mean()), 4),
        "student_tokens_mean": round(float(verdicts["tokens"].mean()), 1),
        "truncated": round(float((verdicts["finish_reason"] == "length").mean()), 4),
        "proposals": len(results),
        "proposals_valid": round(sum(r.valid for r in results) / max(1, len(results)), 4),
        "proposal_invalid_reasons": reasons,
        "stop_tokens_saved": None if saved is None else round(saved, 4),
        "minutes": round((time.perf_counter() - started) / 60, 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
