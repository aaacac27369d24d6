"""The memory plan of a GPU run: what each phase needs, and where the pieces go.

Computed from the configuration and the base model's architecture (its ``config.json``,
or the shapes below for models not on this machine), without loading anything:

- **trainer** (one process, one GPU): the base weights in the model dtype; the trained
  LoRA slot in float32 with its gradients and AdamW's two moments (16 bytes a parameter);
  the activations autograd keeps for one micro-batch, with and without activation
  checkpointing; the backward's temporaries; the completion logits and their gradient.
- **vLLM** (a server per GPU it is given): the base weights, the LoRA slots
  (``max_loras`` × the adapters' factors at ``max_lora_rank``), a fixed allowance for its
  activations, CUDA graphs and sampler, and the KV cache in what is left.

Placement (``cluster.placement``): with one GPU the trainer and vLLM share it, and vLLM's
``--gpu-memory-utilization`` is the share the trainer's peak leaves. With two or more,
``colocated`` places that pair on every GPU (a vLLM server each, requests spread over them;
a trainer process each, the adapters' updates in parallel: ``engine.trainers``), and
``dedicated`` the trainer on the model's device (``cuda`` → GPU 0) and a server on each other
GPU (the updates one after another); ``auto`` is colocated where its KV cache holds a longest
request, else dedicated. vLLM's sleep mode is not used: with LoRA in the vLLM versions we
pin, a level-1 wake was reported to stop applying the adapter silently (vllm#53888) and a
level-2 wake to crash (vllm#39934, open). A plan that does not fit raises ``PlanError``
with its numbers.

The activation figures are autograd's saved tensors on the trainer's path (``engine.shapes``); the
vLLM allowance is an estimate to check against the server's log and ``benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from populora_core.config import ConfigError, RunConfig
from populora_core.engine.shapes import KNOWN_SHAPES, ModelShape, lengths, model_shape

__all__ = ["KNOWN_SHAPES", "ModelShape", "Plan", "PlanError", "lengths", "make_plan", "model_shape"]

GIB = 2**30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
CONTEXT_GIB = 1.0
"""Each CUDA process: the CUDA context and the allocator's slack beyond its peak."""
VLLM_OVERHEAD_GIB = 3.0
"""vLLM beyond weights, LoRA slots and KV cache: activations at its batch, CUDA graphs, sampler."""
DEDICATED_UTILIZATION = 0.9
"""vLLM's ``--gpu-memory-utilization`` on a GPU it does not share."""
SHARED_MARGIN_GIB = 2.0
"""Left free on a GPU vLLM shares with a trainer, beyond both peaks: what the estimates may miss
(fragmentation, NCCL or cuBLAS workspaces, a profiler), since neither process can give memory back
to the other."""


class PlanError(ConfigError):
    """The configuration does not fit the GPUs; the message carries the plan's numbers."""


# the plan ---------------------------------------------------------------------------
@dataclass
class Phase:
    """One process's memory on one GPU, in GiB, by piece."""

    pieces: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.pieces.values())


@dataclass
class Plan:
    """Where the trainer and vLLM go, and what each needs (GiB)."""

    gpus: int
    gpu_memory_gib: float
    trainer_gpu: int
    vllm_gpus: list[int]
    trainer_gpus: list[int]
    vllm_utilization: float
    trainer: Phase
    trainer_without_checkpointing: float
    vllm: Phase
    kv_cache_gib: float
    kv_min_gib: float
    concurrent_sequences: int
    stage_sequences: int
    max_model_len: int
    update_sequence: int
    checkpointing: bool
    micro_batch: int

    def as_dict(self) -> dict:
        return asdict(self)


def weight_bytes(dtype: str) -> int:
    """Bytes of a base weight in ``model.dtype`` on a GPU (``auto``: bfloat16, as ``resolve_dtype``
    makes it on compute capability >= 8.0; ``machine_plan`` resolves it on the GPU at hand)."""
    return DTYPE_BYTES.get(dtype, 2)


def trainer_phase(
    config: RunConfig, shape: ModelShape, length: int, *, checkpointing: bool, dtype: str | None = None
) -> Phase:
    """The trainer's peak on its GPU: one update at ``grpo.micro_batch_size`` sequences of ``length``
    (weights in ``dtype``, default ``model.dtype``)."""
    wb = weight_bytes(dtype or config.model.dtype)
    pop, grpo = config.population, config.grpo
    b = grpo.micro_batch_size
    completion = max(config.inference.teacher_max_new_tokens, config.inference.student_max_new_tokens)
    pieces = shape.update_bytes(
        wb, pop.rank, pop.target_modules, b, length, completion, checkpointing, grpo.logprob_chunk
    )
    if grpo.kl_coef > 0:
        pieces["reference pass"] = b * completion * shape.vocab * (4 + wb)
    out = {k: v / GIB for k, v in pieces.items()}
    out["CUDA context, allocator slack"] = CONTEXT_GIB
    return Phase(out)


def make_plan(
    config: RunConfig,
    gpus: int,
    gpu_memory_gib: float,
    *,
    shape: ModelShape | None = None,
    dtype: str | None = None,
    trainers_beside: int | None = None,
) -> Plan:
    """The plan of ``config`` on ``gpus`` GPUs of ``gpu_memory_gib`` each, weights in ``dtype``
    (default ``model.dtype``, ``auto`` read as bfloat16); PlanError, with the numbers, if it cannot fit.

    ``trainers_beside`` None: the local engine's placement (``cluster.placement``). A number: a Ray
    inference actor's, vLLM on all ``gpus`` beside that many trainer peaks on each."""
    if gpus < 1:
        raise PlanError("a GPU plan needs at least one GPU")
    shape = shape or model_shape(config.model.name)
    dtype = dtype or config.model.dtype
    length = lengths(config, shape)
    checkpointing = config.grpo.gradient_checkpointing
    seq = length.longest_update_sequence
    trainer = trainer_phase(config, shape, seq, checkpointing=checkpointing, dtype=dtype)
    without = trainer_phase(config, shape, seq, checkpointing=False, dtype=dtype).total
    vllm = vllm_phase(config, shape, dtype=dtype)
    kv_token = shape.kv_bytes_per_token(weight_bytes(dtype)) / GIB  # the servers' dtype is the model's
    kv_min = length.max_model_len * kv_token
    trainer_gpu = _device_index(config.model.device)
    if trainer_gpu >= gpus:
        raise PlanError(f"model.device {config.model.device} names GPU {trainer_gpu}, but the plan has {gpus}")
    colocate = gpus >= 2 and trainers_beside is None and _colocate(config, trainer, vllm, gpu_memory_gib, kv_min)
    vllm_gpus, utilization, shared = _place(
        config, trainer, trainer_gpu, gpus, gpu_memory_gib, trainers_beside, colocate
    )
    kv = utilization * gpu_memory_gib - vllm.total
    if kv < kv_min:
        raise PlanError(
            _kv_refusal(config, gpu_memory_gib, utilization, vllm, kv, kv_min, length.max_model_len, trainer, shared)
        )
    stage = stage_sequences(config)
    per_seq = max(length.teacher_prompt + length.teacher_completion, length.student_prompt + length.student_completion)
    concurrent = int(kv // (per_seq * kv_token)) * len(vllm_gpus)
    return Plan(
        gpus=gpus,
        gpu_memory_gib=gpu_memory_gib,
        trainer_gpu=trainer_gpu,
        vllm_gpus=vllm_gpus,
        trainer_gpus=list(range(gpus)) if colocate else [trainer_gpu],
        vllm_utilization=utilization,
        trainer=trainer,
        trainer_without_checkpointing=without,
        vllm=vllm,
        kv_cache_gib=kv,
        kv_min_gib=kv_min,
        concurrent_sequences=min(concurrent, stage),
        stage_sequences=stage,
        max_model_len=length.max_model_len,
        update_sequence=seq,
        checkpointing=checkpointing,
        micro_batch=config.grpo.micro_batch_size,
    )


def _colocate(config: RunConfig, trainer: Phase, vllm: Phase, gpu_memory_gib: float, kv_min: float) -> bool:
    """Whether the local engine puts a server and a trainer on every GPU (``cluster.placement``:
    ``auto`` where the server's share beside a trainer holds a longest request's KV cache)."""
    if config.cluster.placement != "auto":
        return config.cluster.placement == "colocated"
    try:
        utilization = _utilization(config, trainer, 1, gpu_memory_gib)
    except PlanError:
        return False
    return utilization * gpu_memory_gib - vllm.total >= kv_min


def stage_sequences(config: RunConfig) -> int:
    """Sequences of a generation's largest generation stage (propose, or solve over the matches)."""
    budget, pop = config.budget, config.population
    matches = pop.teachers * min(config.rating.students_per_teacher, pop.students)
    return max(
        pop.teachers * budget.proposals_per_teacher,
        matches * budget.problems_per_match * budget.samples_per_problem,
    )


def _kv_refusal(config, gpu_memory_gib, utilization, vllm: Phase, kv, kv_min, length, trainer, shared: bool) -> str:
    """Why vLLM's share leaves no KV cache for one longest request, and what to change."""
    checkpointing = config.grpo.gradient_checkpointing
    return (
        f"vLLM on {gpu_memory_gib:.1f} GiB × {utilization:.2f} = {utilization * gpu_memory_gib:.1f} GiB holds "
        f"{vllm.total:.1f} GiB of weights, LoRA slots and overhead and {max(kv, 0):.1f} GiB of KV cache; one "
        f"request of max_model_len {length} needs {kv_min:.2f} GiB"
        + (f" (the trainer needs {trainer.total:.1f} GiB of the same GPU)" if shared else "")
        + (
            ": use a second GPU, or lower grpo.micro_batch_size"
            + ("" if checkpointing else ", or turn on grpo.gradient_checkpointing")
            if shared
            else ": raise inference.gpu_memory_utilization, or lower inference.*_max_new_tokens"
        )
    )


def vllm_phase(config: RunConfig, shape: ModelShape, *, dtype: str | None = None) -> Phase:
    """One vLLM server's memory before its KV cache (weights in ``dtype``, default ``model.dtype``)."""
    from populora_core.inference.vllm import lora_slots, vllm_rank

    wb = weight_bytes(dtype or config.model.dtype)
    members = config.population.teachers + config.population.students
    per_slot = shape.lora_parameters(vllm_rank(config.population.rank), config.population.target_modules)
    return Phase(
        {
            "base weights": shape.parameters() * wb / GIB,
            "LoRA slots": lora_slots(members) * per_slot * wb / GIB,
            "activations, CUDA graphs, sampler": VLLM_OVERHEAD_GIB,
            "CUDA context": CONTEXT_GIB,
        }
    )


def _place(config: RunConfig, trainer: Phase, trainer_gpu: int, gpus: int, gpu_memory_gib: float, beside, colocate):
    """(vLLM's GPUs, its share, whether a trainer shares its GPU): the local engine's placement
    (``beside`` None; ``colocate``: a server beside a trainer on every GPU) or a Ray inference
    actor's, on all its GPUs beside ``beside`` trainers."""
    if colocate:
        return list(range(gpus)), _utilization(config, trainer, 1, gpu_memory_gib), True
    if beside is None:
        return (*_share(config, trainer, trainer_gpu, gpus, gpu_memory_gib), gpus == 1)
    return list(range(gpus)), _utilization(config, trainer, beside, gpu_memory_gib), beside > 0


def _share(config: RunConfig, trainer: Phase, trainer_gpu: int, gpus: int, gpu_memory_gib: float):
    """(vLLM's GPUs, its --gpu-memory-utilization): the other GPUs at ``DEDICATED_UTILIZATION``,
    or the trainer's GPU at the share its peak leaves."""
    if gpus >= 2:
        vllm_gpus = [g for g in range(gpus) if g != trainer_gpu]
        utilization = config.inference.gpu_memory_utilization or DEDICATED_UTILIZATION
        if trainer.total > gpu_memory_gib:
            raise PlanError(_no_fit("the trainer", trainer, gpu_memory_gib, config))
    else:
        vllm_gpus = [trainer_gpu]
        utilization = _utilization(config, trainer, 1, gpu_memory_gib)
    return vllm_gpus, utilization


def _utilization(config: RunConfig, trainer: Phase, trainers: int, gpu_memory_gib: float) -> float:
    """vLLM's share of a GPU with ``trainers`` trainer peaks beside it: what they and
    ``SHARED_MARGIN_GIB`` leave (``DEDICATED_UTILIZATION`` with none), or the config's, checked."""
    if trainers == 0:
        return config.inference.gpu_memory_utilization or DEDICATED_UTILIZATION
    what = "the trainer alone" if trainers == 1 else f"{trainers} trainers alone"
    free = gpu_memory_gib - trainers * trainer.total - SHARED_MARGIN_GIB
    if free <= 0:
        raise PlanError(_no_fit(what, trainer, gpu_memory_gib, config, copies=trainers, margin=SHARED_MARGIN_GIB))
    planned = math.floor(100 * free / gpu_memory_gib) / 100
    utilization = config.inference.gpu_memory_utilization or planned
    if utilization > planned + 1e-9:
        raise PlanError(
            f"inference.gpu_memory_utilization {utilization:.2f} of {gpu_memory_gib:.1f} GiB leaves "
            f"{gpu_memory_gib * (1 - utilization):.1f} GiB of the GPU they share to {trainers} trainer(s) of "
            f"{trainer.total:.1f} GiB and a margin of {SHARED_MARGIN_GIB:.0f} (leave the field empty: the plan "
            f"gives vLLM {planned:.2f})"
        )
    return utilization


def _device_index(device: str) -> int:
    if not device.startswith("cuda"):
        raise PlanError(f"the memory plan is for GPU runs; model.device is {device!r}")
    _, _, index = device.partition(":")
    return int(index) if index else 0


def _no_fit(
    what: str, phase: Phase, gpu_memory_gib: float, config: RunConfig, *, copies: int = 1, margin: float = 0.0
) -> str:
    lines = "\n".join(f"  {k}: {v:.1f} GiB" for k, v in phase.pieces.items())
    if copies > 1:
        lines += f"\n  × {copies} trainers on one GPU (cluster.update.num_gpus lets Ray place them together)"
    hint = (
        "turn on grpo.gradient_checkpointing"
        if not config.grpo.gradient_checkpointing
        else "lower grpo.micro_batch_size or inference.*_max_new_tokens"
    )
    need = copies * phase.total + margin
    if copies > 1:
        hint += ", or raise cluster.update.num_gpus"
    verb = "needs" if copies == 1 else "need"
    return f"{what} {verb} {need:.1f} GiB on a {gpu_memory_gib:.1f} GiB GPU:\n{lines}\n{hint}"


def trainers_beside_actor(config: RunConfig) -> int:
    """How many update tasks Ray's arithmetic lets onto a GPU an inference actor holds
    ``cluster.generation.num_gpus`` of: none beside a whole GPU, else as many of
    ``cluster.update.num_gpus`` as the rest holds."""
    g, u = config.cluster.generation.num_gpus, config.cluster.update.num_gpus
    return 0 if g >= 1 or u <= 0 else math.floor((1 - g) / u + 1e-9)


def format_plan(config: RunConfig, plan: Plan) -> str:
    """The plan as the lines `populora plan` prints."""
    vllm_where = ", ".join(f"cuda:{g}" for g in plan.vllm_gpus)
    trainers = ", ".join(f"cuda:{g}" for g in plan.trainer_gpus)
    lines = [
        f"{config.model.name} on {plan.gpus} GPU(s) of {plan.gpu_memory_gib:.1f} GiB",
        f"  trainer{'s' if len(plan.trainer_gpus) > 1 else ''}: {trainers}, "
        f"micro-batch {plan.micro_batch} × {plan.update_sequence} tokens at most, "
        f"activation checkpointing {'on' if plan.checkpointing else 'off'}",
    ]
    inf = config.inference
    if inf.backend != "vllm":
        lines.insert(
            1, "  (inference.backend is hf: no vLLM server starts; its part below is for inference.backend: vllm)"
        )
    elif inf.vllm_url:
        lines.insert(1, f"  (inference.vllm_url: the server at {inf.vllm_url} is yours; its part below is not started)")
    if config.cluster.engine == "ray":
        lines.insert(
            1,
            "  (cluster.engine ray: one node's GPUs as its inference actor plans them, "
            f"{trainers_beside_actor(config)} update task(s) beside vLLM on each)",
        )
    lines += [f"    {k}: {v:.2f} GiB" for k, v in plan.trainer.pieces.items()]
    lines.append(
        f"    peak: {plan.trainer.total:.1f} GiB (without checkpointing: {plan.trainer_without_checkpointing:.1f} GiB)"
    )
    lines.append(
        f"  vLLM: {len(plan.vllm_gpus)} server(s) on {vllm_where}, "
        f"--gpu-memory-utilization {plan.vllm_utilization:.2f}, --max-model-len {plan.max_model_len}"
    )
    lines += [f"    {k}: {v:.2f} GiB" for k, v in plan.vllm.pieces.items()]
    lines.append(
        f"    KV cache: {plan.kv_cache_gib:.1f} GiB per server (one longest request needs {plan.kv_min_gib:.2f}); "
        f"{plan.concurrent_sequences} of the largest stage's {plan.stage_sequences} sequences at once"
    )
    return "\n".join(lines)


# the CPU ---------------------------------------------------------------------------
PROCESS_GIB = 1.0
"""A CPU run's process beyond its tensors: Python, torch, transformers, Prefect's client."""


def cpu_phase(config: RunConfig, shape: ModelShape, *, dtype: str, micro_batch: int | None = None) -> Phase:
    """The local engine's process on a CPU at an update's worst case (``grpo.micro_batch_size``
    sequences of the longest length the config allows, or ``micro_batch``): the trainer's
    pieces, the hf backend's own copy of the base weights (it stays loaded), the process."""
    if micro_batch is not None:
        config = config.model_copy(update={"grpo": config.grpo.model_copy(update={"micro_batch_size": micro_batch})})
    seq = lengths(config, shape).longest_update_sequence
    trainer = trainer_phase(config, shape, seq, checkpointing=config.grpo.gradient_checkpointing, dtype=dtype)
    pieces = {k: v for k, v in trainer.pieces.items() if not k.startswith("CUDA")}
    if config.inference.backend == "hf":
        pieces["generation model (hf backend)"] = shape.parameters() * weight_bytes(dtype) / GIB
    pieces["Python, torch, libraries"] = PROCESS_GIB
    return Phase(pieces)


def cpu_memory_warning(config: RunConfig, shape: ModelShape, *, dtype: str, memory_gib: float) -> str | None:
    """A warning when ``cpu_phase`` exceeds ``memory_gib`` (the machine's, or its cgroup's limit):
    the numbers, and the largest micro-batch that fits; None when it fits."""
    phase = cpu_phase(config, shape, dtype=dtype)
    if phase.total <= memory_gib:
        return None
    b, checkpointing = config.grpo.micro_batch_size, config.grpo.gradient_checkpointing
    need = {m: cpu_phase(config, shape, dtype=dtype, micro_batch=m).total for m in range(b - 1, 0, -1)}
    if (fits := next((m for m, gib in need.items() if gib <= memory_gib), None)) is not None:
        advice = f"grpo.micro_batch_size={fits} fits"
    elif not checkpointing:
        advice = "no micro-batch fits without grpo.gradient_checkpointing"
    else:
        advice = "no micro-batch fits: lower inference.*_max_new_tokens or budget.references"
    seq = lengths(config, shape).longest_update_sequence
    largest = ", ".join(f"{k} {v:.1f} GiB" for k, v in sorted(phase.pieces.items(), key=lambda kv: -kv[1])[:2])
    return (
        f"an update at the longest sequences this config allows ({b} × {seq} tokens, {dtype}, activation "
        f"checkpointing {'on' if checkpointing else 'off'}) needs up to {phase.total:.1f} GiB ({largest}, ...), "
        f"more than the {memory_gib:.1f} GiB here: the kernel would kill it (SIGKILL) if completions and "
        f"references grew that long; {advice}"
    )
