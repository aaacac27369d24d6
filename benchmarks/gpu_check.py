"""The population's cost at Qwen2.5-Coder-7B's shapes, for a GPU machine with no downloads.

A GPU machine lent to this project has torch, transformers, peft, pandas and pyarrow,
but no model weights, no internet, no Prefect and no vLLM. This script builds the
7B model's shapes from its configuration (below) with random bf16 weights, attaches
8 rank-32 adapters (the paper's population: 4 teachers + 4 students, α 64) and runs
the project's own code on them:
1. generation (``inference.hf.HFBackend``, one mixed-adapter batch per step): the
   same rows, prompts and lengths, once with every row on one adapter and once with
   the rows spread over the 8 adapters; ``population_overhead`` is the ratio of the
   two times (the issue cites the paper's 1.31× at these shapes);
2. the probe's path: greedy answers of the base and the 8 adapters in one mixed batch,
   and the share of answers that differ from the base's (the drift figure);
3. GRPO updates (``training.trainer.Trainer``) of one adapter on 16 sequences of
   256 prompt + 256 completion tokens, 8 completions per prompt as a student's group:
   once without activation checkpointing, where each micro-batch's shared prompts run
   once (``training.prefix``), once with it (whole sequences); tokens per second, how far
   the factors moved (``delta_change``), peak memory beside the memory plan's prediction
   (``engine.shapes.ModelShape.update_bytes``, what ``populora plan`` adds up);
4. two evolution operators (SVD perturbation M1, SVD subspace mixing X3) on the 7B
   factors on the device, and how far the children moved from their first parent;
5. peak memory of each phase (GPU memory on a GPU; the process's peak RSS on CPU).

It imports only torch, transformers, peft, pandas and the project's generation, update,
evolution and shape modules (a test checks this), and prints one final JSON line.

    python benchmarks/gpu_check.py                 # 7B shapes, bf16, on cuda (minutes); refuses the CPU
    python benchmarks/gpu_check.py --tiny          # a tiny model of the same family, on CPU (or --quick)

It runs from any directory with only torch, transformers, peft, pandas and pyarrow installed
(it puts the repository on ``sys.path`` itself). Without a GPU it stops at once and says why
(no driver, or one older than the CUDA 13 build of torch needs).

The tokenizer is a stand-in (``StandInTokenizer``): there are no tokenizer files on
such a machine, and the figures depend only on token counts.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: run from anywhere, not installed

from populora_core.engine.shapes import KNOWN_SHAPES, ModelShape
from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.population.evolution import apply_operator
from populora_core.population.lora import LoraAdapter, LoraFactors, delta_change
from populora_core.training.rollouts import Rollout
from populora_core.training.trainer import Trainer

QWEN_CODER_7B = {  # Qwen/Qwen2.5-Coder-7B's config.json: the shapes the memory plan uses, and the rest
    **KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"],
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
}
TINY = {**QWEN_CODER_7B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
TINY.update(num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def log(msg: str) -> None:
    print(f"[gpu_check] {msg}", file=sys.stderr, flush=True)


class StandInTokenizer:
    """Stands in for the 7B's tokenizer, which such a machine does not have: one token per
    character of a prompt, no text out. Only token counts matter to the figures."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.pad_token_id = 0
        self.eos_token_id = 1

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [2 + ord(c) % (self.vocab_size - 2) for c in text]}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return ""


def build_model(shape: dict, device: str, dtype: torch.dtype):
    """The architecture of ``shape`` with random weights, built on ``device`` in ``dtype``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(Qwen2Config(**shape))
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def random_adapter(model, rank: int, alpha: float, gen: torch.Generator) -> LoraAdapter:
    """Factors on every target module, both non-zero (B ~ N(0, 1e-3²), as a gaussian_b member)."""
    modules = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in TARGETS:
            cpu = {"generator": gen, "device": "cpu"}  # factors as the stages load them from adapter files
            A = (torch.rand((rank, module.in_features), **cpu) * 2 - 1) / module.in_features**0.5
            modules[name] = LoraFactors(A=A, B=torch.randn((module.out_features, rank), **cpu) * 1e-3)
    return LoraAdapter(modules=modules, rank=rank, alpha=alpha)


def peak_memory_gb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def reset_peak(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def generation(args, shape: dict, adapters: list[LoraAdapter], model) -> dict[str, float]:
    """Seconds for the same rows on one adapter and spread over all of them."""
    backend = HFBackend(None, model=model, tokenizer=StandInTokenizer(shape["vocab_size"]), device=args.device)
    backend.batch_size = args.rows
    for i, adapter in enumerate(adapters):
        backend.set_adapter(f"m{i}", adapter)
    params = SamplingParams(temperature=1.0, top_k=50, max_new_tokens=args.new_tokens, ignore_eos=True)
    gen = torch.Generator().manual_seed(1)
    prompts = ["".join(chr(97 + int(c)) for c in torch.randint(0, 26, (args.prompt,), generator=gen))]
    prompts = [p[i:] + p[:i] for i in range(args.rows) for p in prompts]  # distinct rows, equal lengths

    def run(names: list[str]) -> tuple[float, int]:
        requests = [
            GenerationRequest(p, adapter=n, seed=i) for i, (p, n) in enumerate(zip(prompts, names, strict=True))
        ]
        sync(args.device)
        started = time.perf_counter()
        out = backend.generate(requests, params)
        sync(args.device)
        return time.perf_counter() - started, sum(len(c.token_ids) for group in out for c in group)

    run(["m0"] * args.rows)  # warm-up
    one, tokens_one = run(["m0"] * args.rows)
    many, tokens_many = run([f"m{i % len(adapters)}" for i in range(args.rows)])
    out = probe(args, backend, prompts[: args.probe_items], len(adapters))
    return out | {
        "gen_tokens_per_s_1_adapter": tokens_one / one,
        f"gen_tokens_per_s_{len(adapters)}_adapters": tokens_many / many,
        "population_overhead": many / one,
        "gen_peak_memory_gb": peak_memory_gb(args.device),
    }


def probe(args, backend: HFBackend, prompts: list[str], adapters: int) -> dict[str, float]:
    """The probe's greedy answers of the base and every adapter, in one mixed batch: seconds and
    the share of adapter answers whose tokens differ from the base's."""
    names = [BASE, *(f"m{i}" for i in range(adapters))]
    requests = [GenerationRequest(p, adapter=n) for n in names for p in prompts]
    params = SamplingParams(temperature=0.0, max_new_tokens=args.new_tokens, ignore_eos=True)
    sync(args.device)
    started = time.perf_counter()
    out = [group[0].token_ids for group in backend.generate(requests, params)]
    sync(args.device)
    base = out[: len(prompts)]
    changed = [a != base[i % len(prompts)] for i, a in enumerate(out[len(prompts) :])]
    return {"probe_seconds": time.perf_counter() - started, "probe_changed_share": sum(changed) / len(changed)}


def evolution(args, adapters: list[LoraAdapter]) -> dict[str, float]:
    """M1 and X3 on the factors moved to the device: seconds and how far each child moved."""

    def on_device(a: LoraAdapter) -> LoraAdapter:
        return a.with_modules({n: LoraFactors(f.A.to(args.device), f.B.to(args.device)) for n, f in a})

    parents = [on_device(a) for a in adapters[:2]]
    out = {}
    for name, chosen in (("M1", parents[:1]), ("X3", parents)):
        sync(args.device)
        started = time.perf_counter()
        child, _ = apply_operator(name, chosen, torch.Generator().manual_seed(3))
        sync(args.device)
        out[f"evolve_{name}_seconds"] = time.perf_counter() - started
        out[f"evolve_{name}_delta"] = delta_change(chosen[0], child)
    return out


def update(args, shape: dict, adapter: LoraAdapter, trainer: Trainer, checkpointing: bool) -> dict[str, float]:
    """One GRPO update of ``adapter``: completion tokens per second, how far it moved, and its
    peak memory beside the plan's prediction (``checkpointing`` off: shared prompts run once)."""
    label = "update_checkpointed" if checkpointing else "update_shared_prompts"
    grpo = SimpleNamespace(  # the fields Trainer.update reads (a GRPOConfig where pydantic is installed)
        learning_rate=1e-5,
        weight_decay=0.0,
        clip_eps=0.2,
        old_logprobs="sampler",
        importance_cap=None,
        kl_coef=0.0,
        micro_batch_size=args.micro_batch,
        epochs=1,
        minibatches=1,
        max_grad_norm=1.0,
        logprob_chunk=64,
        gradient_checkpointing=checkpointing,
    )
    gen = torch.Generator().manual_seed(2)
    vocab = shape["vocab_size"]
    # prompts of the longest length and of a quarter of it, every other group: a micro-batch cut as
    # the rows come would mix them (the plan counts micro-batch × the longest sequence)
    lengths = [args.prompt if g % 2 == 0 else max(8, args.prompt // 4) for g in range(args.sequences)]
    prompts = [torch.randint(2, vocab, (n,), generator=gen).tolist() for n in lengths]
    groups = max(1, args.sequences // args.group)
    rollouts = [
        Rollout(
            prompts[i % groups],  # a student's group: G completions of one prompt, groups interleaved
            torch.randint(2, vocab, (args.completion,), generator=gen).tolist(),
            [-math.log(vocab)] * args.completion,  # random weights: next-token probabilities near uniform
            float(torch.randn((), generator=gen)),
        )
        for i in range(args.sequences)
    ]
    trainer.update(adapter, rollouts[: args.micro_batch], grpo, None, seed=0)  # warm-up
    sync(args.device)
    reset_peak(args.device)
    started = time.perf_counter()
    after, metrics, _ = trainer.update(adapter, rollouts, grpo, None, seed=0)
    sync(args.device)
    seconds = time.perf_counter() - started
    wb = torch.finfo(next(trainer.model.parameters()).dtype).bits // 8
    predicted = ModelShape.from_config(shape).update_bytes(
        wb, adapter.rank, TARGETS, args.micro_batch, args.prompt + args.completion, args.completion, checkpointing
    )
    return {
        f"{label}_seconds": seconds,
        f"{label}_tokens_per_s": sum(len(r.prompt_ids) + len(r.completion_ids) for r in rollouts) / seconds,
        f"{label}_completion_tokens_per_s": metrics["tokens_per_s"],
        f"{label}_delta": delta_change(adapter, after),
        f"{label}_peak_memory_gb": peak_memory_gb(args.device),
        f"{label}_plan_gb": sum(predicted.values()) / 1e9,
    }


CUDA13_DRIVER = 580
"""The oldest NVIDIA driver branch the registry's torch 2.13 (CUDA 13) runs on."""


def driver_version() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``, else /proc/driver/nvidia/version), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()  # fmt: skip
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    found = [w for w in text.split() if w[:1].isdigit() and "." in w]
    return found[0] if found else None


def why_no_gpu() -> str:
    """Why torch sees no GPU, in one line: no driver, a driver too old for CUDA 13, or another cause."""
    version, built = driver_version(), torch.version.cuda
    if built is None:
        return f"torch {torch.__version__} is a CPU build: install the CUDA one on the GPU node (docs/gpu.md)"
    if version is None:
        return f"no NVIDIA driver found (nvidia-smi, /proc/driver/nvidia/version); torch is built for CUDA {built}"
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if built and built.startswith("13") and major < CUDA13_DRIVER:
        return (
            f"the NVIDIA driver {version} is older than CUDA 13 needs (>= {CUDA13_DRIVER}), and torch "
            f"{torch.__version__} is built for CUDA {built}: upgrade the driver, or install the CUDA 12 builds "
            "of torch and vLLM (docs/gpu.md#drivers)"
        )
    return f"torch {torch.__version__} (CUDA {built}) sees no GPU with driver {version}: is CUDA_VISIBLE_DEVICES empty?"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tiny", "--quick", action="store_true", dest="tiny", help="a tiny model of the same family, on CPU (CI)"
    )
    ap.add_argument("--device", default=None, help="default: cuda (refused without a GPU); with --tiny, cpu")
    ap.add_argument("--adapters", type=int, default=8)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--rows", type=int, default=64, help="rows decoded together")
    ap.add_argument("--prompt", type=int, default=256, help="prompt tokens (generation and update)")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--completion", type=int, default=256, help="completion tokens of an update's sequences")
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--group", type=int, default=8, help="completions per prompt in the update")
    ap.add_argument("--probe-items", type=int, default=8, help="probe prompts answered by the base and each adapter")
    args = ap.parse_args(argv)
    if args.tiny:
        args.rows, args.prompt, args.new_tokens, args.completion, args.sequences, args.rank = 16, 24, 8, 8, 4, 4
        args.group, args.probe_items = 2, 2
    args.device = args.device or ("cpu" if args.tiny else "cuda")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        log(f"refusing to run the 7B check on the CPU (hours in float32): {why_no_gpu()}")
        raise SystemExit(2)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    shape = TINY if args.tiny else QWEN_CODER_7B
    started = time.perf_counter()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = build_model(shape, args.device, dtype)
    params = sum(p.numel() for p in model.parameters())
    log(f"{params / 1e9:.2f}B parameters on {args.device} in {dtype}, built in {time.perf_counter() - started:.0f} s")
    adapters = [random_adapter(model, args.rank, 2.0 * args.rank, gen) for _ in range(args.adapters)]
    out = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"}
    out.update(parameters=params, adapters=args.adapters, rank=args.rank, dtype=str(dtype).removeprefix("torch."))
    out.update(generation(args, shape, adapters, model))
    log(f"generation: {out['population_overhead']:.2f}x the time with {args.adapters} adapters against 1")
    log(f"probe: {out['probe_changed_share']:.2f} of the adapters' greedy answers differ from the base's")
    del model
    reset_peak(args.device)
    out.update(evolution(args, adapters))
    log(f"evolution: M1 moved {out['evolve_M1_delta']:.3g}, X3 {out['evolve_X3_delta']:.3g}")
    population = SimpleNamespace(rank=args.rank, alpha=2.0 * args.rank, target_modules=TARGETS)
    trainer = Trainer(build_model(shape, args.device, dtype), StandInTokenizer(shape["vocab_size"]), population)
    for checkpointing in (False, True):
        out.update(update(args, shape, adapters[0], trainer, checkpointing))
    out["seconds"] = time.perf_counter() - started
    print(json.dumps({k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
