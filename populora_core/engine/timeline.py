"""The timeline a GPU plan expects: seconds per phase of one generation at the config's token caps,
and how busy the GPUs are in each (``populora plan`` prints it beside the memory plan).

An estimate from the plan and a roofline, not a measurement: no GPU is lent to the machines this
project is tested on. Generation is bandwidth-bound (each decode step reads the weights and the
KV cache of the sequences in flight), prefill and the update compute-bound (2 FLOPs a parameter
a token forward; the update's forward, recomputed forward under checkpointing, backward to the
inputs, and π_old's forward with ``grpo.old_logprobs: learner``). The GPU's figures and the
efficiencies below are assumptions to correct with ``benchmarks/gpu_check.py`` on the node;
every sequence is counted at its role's longest prompt and cap (an upper bound). The sandbox's
stages (validate, verify) run on the CPUs and are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from populora_core.config import RunConfig
from populora_core.engine.memory import Plan, weight_bytes
from populora_core.engine.shapes import ModelShape, lengths

GPU_TFLOPS = 989.0
"""Dense bf16 tensor throughput of an H100 SXM (TFLOP/s), the GPU the figures assume."""
GPU_TBPS = 3.35
"""Its memory bandwidth (TB/s)."""
COMPUTE_EFFICIENCY = 0.4
"""Share of ``GPU_TFLOPS`` a prefill or a LoRA update reaches (assumed)."""
BANDWIDTH_EFFICIENCY = 0.6
"""Share of ``GPU_TBPS`` a decode step reaches (assumed)."""


@dataclass(frozen=True)
class PhaseTime:
    name: str
    work: str
    seconds: float
    busy_gpus: float
    """GPUs working, averaged over the phase."""


def generation_seconds(shape: ModelShape, dtype_bytes: int, sequences: int, prompt: int, new: int, servers: int,
                       at_once: int) -> tuple[float, float]:  # fmt: skip
    """(seconds, busy servers) of one generation stage spread evenly over ``servers`` servers that
    each hold ``at_once`` sequences in flight."""
    per_server = math.ceil(sequences / servers)
    busy = sequences / per_server if per_server else 0.0
    seconds, left = 0.0, per_server
    while left > 0:
        n = min(left, max(1, at_once))
        prefill = n * prompt * 2 * shape.parameters() / (GPU_TFLOPS * 1e12 * COMPUTE_EFFICIENCY)
        kv = n * (prompt + new / 2) * shape.kv_bytes_per_token(dtype_bytes)  # the mean context of the decode
        step = (shape.parameters() * dtype_bytes + kv) / (GPU_TBPS * 1e12 * BANDWIDTH_EFFICIENCY)
        seconds += prefill + new * step
        left -= n
    return seconds, busy


def update_seconds(shape: ModelShape, tokens: int, config: RunConfig) -> float:
    """One adapter's update of ``tokens`` (prompt + completion) on one GPU."""
    passes = 2 + 2 + (2 if config.grpo.gradient_checkpointing else 0)  # forward, backward to inputs, recompute
    passes += 2 if config.grpo.old_logprobs == "learner" else 0
    flops = passes * shape.parameters() * tokens * config.grpo.epochs
    return flops / (GPU_TFLOPS * 1e12 * COMPUTE_EFFICIENCY)


def timeline(config: RunConfig, plan: Plan, shape: ModelShape, dtype: str | None = None) -> list[PhaseTime]:
    """Propose, solve and update of one generation on ``plan``'s placement."""
    wb = weight_bytes(dtype or config.model.dtype)
    length, pop, budget = lengths(config, shape), config.population, config.budget
    servers = len(plan.vllm_gpus)
    at_once = (
        max(1, plan.concurrent_sequences // servers) if plan.concurrent_sequences < plan.stage_sequences else 10**9
    )
    proposals = pop.teachers * budget.proposals_per_teacher
    matches = pop.teachers * min(config.rating.students_per_teacher, pop.students)
    solutions = matches * budget.problems_per_match * budget.samples_per_problem
    out = []
    for name, n, prompt, new in (
        ("propose", proposals, length.teacher_prompt, length.teacher_completion),
        ("solve", solutions, length.student_prompt, length.student_completion),
    ):
        seconds, busy = generation_seconds(shape, wb, n, prompt, new, servers, at_once)
        out.append(PhaseTime(name, f"{n} sequences on {servers} server(s)", seconds, busy))
    teacher = budget.proposals_per_teacher * (length.teacher_prompt + length.teacher_completion)
    student = solutions // max(1, pop.students) * (length.student_prompt + length.student_completion)
    jobs = sorted([update_seconds(shape, teacher, config)] * pop.teachers
                  + [update_seconds(shape, student, config)] * pop.students, reverse=True)  # fmt: skip
    trainers = [0.0] * len(plan.trainer_gpus)
    for job in jobs:  # longest first, each to the trainer that frees first
        trainers[trainers.index(min(trainers))] += job
    seconds = max(trainers)
    out.append(PhaseTime("update", f"{len(jobs)} adapters on {len(trainers)} trainer(s)", seconds,
                         sum(trainers) / seconds if seconds else 0.0))  # fmt: skip
    return out


def format_timeline(config: RunConfig, plan: Plan, shape: ModelShape, dtype: str | None = None) -> str:
    """The lines `populora plan` prints under the memory plan."""
    phases = timeline(config, plan, shape, dtype)
    total = sum(p.seconds for p in phases)
    busy = sum(p.seconds * p.busy_gpus for p in phases) / (plan.gpus * total) if total else 0.0
    lines = [
        f"  timeline of one generation (estimated: {GPU_TFLOPS:.0f} TFLOP/s at {COMPUTE_EFFICIENCY:.0%}, "
        f"{GPU_TBPS} TB/s at {BANDWIDTH_EFFICIENCY:.0%}, every sequence at its caps; the sandbox's stages left out)"
    ]
    lines += [
        f"    {p.name:<8} {p.seconds:7.0f} s  {p.busy_gpus:.1f} of {plan.gpus} GPU(s) busy  ({p.work})" for p in phases
    ]
    lines.append(f"    total    {total:7.0f} s  GPU-busy share {busy:.0%}")
    return "\n".join(lines)
