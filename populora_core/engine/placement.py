"""Placement on the machine at hand: the memory plan (``engine/memory.py``) of this machine's
GPUs, the vLLM servers' arguments from it, and the checks a Ray inference actor and update
task make of the GPUs they were given (only a node sees its own GPUs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from populora_core.config import RunConfig
from populora_core.engine.memory import (
    DEDICATED_UTILIZATION,
    GIB,
    Plan,
    PlanError,
    _no_fit,
    _utilization,
    lengths,
    make_plan,
    trainer_phase,
    trainers_beside_actor,
)
from populora_core.engine.shapes import ModelShape, model_shape

__all__ = ["DEDICATED_UTILIZATION", "check_ray_update", "machine_gpus", "machine_plan", "vllm_settings"]


def machine_gpus() -> tuple[int, float]:
    """(GPUs visible, GiB of the smallest) on this machine; (0, 0) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return 0, 0.0
    n = torch.cuda.device_count()
    return n, min(torch.cuda.get_device_properties(i).total_memory for i in range(n)) / GIB


def machine_dtype(config: RunConfig) -> str:
    """``model.dtype`` as this machine's GPU makes it (``resolve_dtype``: float32 for ``auto`` on a
    GPU older than compute capability 8.0); trainer and vLLM load the weights in it."""
    from populora_core.models import resolve_dtype

    return resolve_dtype(config.model.dtype, config.model.device)


def _physical(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of this process's GPU ``index`` (Ray and users may
    already have narrowed the visible GPUs: a child given "0" would see another one)."""
    import os

    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def _plans_gpus(config: RunConfig) -> bool:
    inf = config.inference
    return inf.backend == "vllm" and inf.vllm_url is None and config.model.device.startswith("cuda")


def machine_plan(
    config: RunConfig, shape: ModelShape | None = None, *, here: bool = False, ray_actor: bool = False
) -> Plan | None:
    """The plan of ``config`` on this machine's GPUs, or None where it starts no vLLM server on a
    GPU (the CPU, the HF backend, a server at ``inference.vllm_url``) or, unless ``here`` (a Ray
    inference actor planning its own GPUs, ``ray_actor``), where the Ray engine starts them on
    other nodes; raises PlanError when the GPUs cannot hold it."""
    if not _plans_gpus(config) or (config.cluster.engine == "ray" and not here):
        return None
    n, memory = machine_gpus()
    if n == 0:
        raise PlanError(f"model.device is {config.model.device!r} but torch sees no GPU on this machine")
    dtype = machine_dtype(config)
    beside = trainers_beside_actor(config) if ray_actor else None
    return make_plan(config, n, memory, shape=shape, dtype=dtype, trainers_beside=beside)


def check_ray_update(config: RunConfig, model_path: Path) -> None:
    """In a Ray update task on a GPU: refuses (PlanError) when the trainers Ray may place on this
    GPU (``cluster.update.num_gpus`` fractions, beside an inference actor's share or not) exceed it."""
    u = config.cluster.update.num_gpus
    if not config.model.device.startswith("cuda") or u <= 0:
        return
    n, memory = machine_gpus()
    if n == 0:
        raise PlanError(f"an update task holds cluster.update.num_gpus {u} but torch sees no GPU there")
    shape, dtype = shape_at(config, model_path), machine_dtype(config)
    trainer = trainer_phase(
        config, shape, lengths(config, shape).longest_update_sequence,
        checkpointing=config.grpo.gradient_checkpointing, dtype=dtype,
    )  # fmt: skip
    alone = math.floor(1 / u + 1e-9) if u < 1 else 1
    if alone * trainer.total > memory:
        raise PlanError(_no_fit(f"{alone} update tasks on one GPU", trainer, memory, config, copies=alone))
    if config.inference.backend == "vllm" and config.cluster.generation.num_gpus < 1:
        _utilization(config, trainer, trainers_beside_actor(config), memory)  # raises when they do not fit


def shape_at(config: RunConfig, model_path: Path) -> ModelShape:
    """The shape of the model at ``model_path`` (its config.json), else of ``model.name``."""
    cfg = Path(model_path) / "config.json"
    return ModelShape.from_config(json.loads(cfg.read_text())) if cfg.is_file() else model_shape(config.model.name)


def vllm_settings(config: RunConfig, model_path: Path, *, ray_actor: bool = False) -> dict:
    """``VLLMBackend``'s placement arguments: ``max_model_len`` from ``lengths``, and on a GPU
    the servers' GPUs and share from the plan on this machine (``ray_actor``: an inference
    actor's, with the trainers Ray may place beside it)."""
    shape = shape_at(config, model_path)
    out: dict = {"max_model_len": lengths(config, shape).max_model_len, "enforce_eager": config.inference.enforce_eager}
    plan = machine_plan(config, shape, here=True, ray_actor=ray_actor)
    if plan is not None:
        out["gpus"] = [_physical(g) for g in plan.vllm_gpus]
        out["gpu_memory_utilization"] = plan.vllm_utilization
    return out
