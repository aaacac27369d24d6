"""The adapters' updates in parallel on one machine: a trainer process per device.

``DeviceTrainers`` is a ``training.trainer.TrainerPool`` of one long-lived process per device
(a GPU, or on the CPU a stand-in for one), each holding its own copy of the base and one LoRA
slot, built at its first update and kept for the next generation. ``map`` hands each free
process the next adapter's update, so on a node of N GPUs the N updates of a round run at once
instead of one after another on GPU 0 while the others wait (``populora plan`` prints both
timelines). The updates are independent and file-based (``stages.learn.train_one`` reads one
adapter and writes its successor), so where one ran changes nothing in what it wrote.

A GPU worker sees only its GPU (``CUDA_VISIBLE_DEVICES`` set before its first CUDA call, so
the trainer cannot follow another device) and reports it as ``<host>/<slot>`` in the
train_metrics ``node`` column.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import TypeVar

from tqdm.auto import tqdm

from populora_core.config import RunConfig
from populora_core.inference.vllm_server import TRAINER_ALLOC_MARK

T = TypeVar("T")
R = TypeVar("R")

SLOT_ENV = "POPULORA_TRAINER_SLOT"
"""Set in a trainer worker: the slot it stands for (``gpu3``, or ``cpu1`` for a stand-in)."""

_WORKER: dict = {}
"""In a worker process: its config, model path and, once built, its trainer."""


def trainer_devices(config: RunConfig, gpus: Sequence[str]) -> list[str]:
    """The devices of a ``DeviceTrainers`` pool: every GPU in ``gpus`` (physical ids), or on the
    CPU ``cluster.trainers`` stand-ins (``cpu0``, ``cpu1``, …), each a process of ``model.threads``
    threads; empty where updates stay in this process (one GPU, one trainer)."""
    if config.model.device.startswith("cuda"):
        return [f"gpu{g}" for g in gpus] if len(gpus) > 1 else []
    n = config.cluster.trainers
    return [f"cpu{i}" for i in range(n)] if n > 1 else []


class DeviceTrainers:
    """One trainer process per device; ``map`` runs independent updates on whichever is free."""

    def __init__(self, config: RunConfig, model_path: Path, devices: Sequence[str]) -> None:
        if not devices:
            raise ValueError("DeviceTrainers needs at least one device")
        self.devices = list(devices)
        spawn = get_context("spawn")  # a fresh interpreter: no CUDA context or threads inherited
        payload = config.model_dump_json()
        self._workers = [
            ProcessPoolExecutor(1, mp_context=spawn, initializer=_start, initargs=(payload, str(model_path), d))
            for d in self.devices
        ]

    def map(self, fn: Callable[[object, T], R], jobs: Sequence[T], *, desc: str | None = None) -> list[R]:
        """``[fn(trainer, job) for job in jobs]``, in order, each job on the next free worker's
        trainer; the first error (after the jobs already running finish) is raised."""
        todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(len(jobs)):
            todo.put(i)
        results: list = [None] * len(jobs)
        errors: list[BaseException] = []
        bar = tqdm(total=len(jobs), desc=desc, unit="adapter", leave=False, disable=desc is None)

        def drain(worker: ProcessPoolExecutor) -> None:
            while not errors:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[i] = worker.submit(_run, fn, jobs[i]).result()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                    errors.append(exc)
                bar.update(1)

        threads = [threading.Thread(target=drain, args=(w,), daemon=True) for w in self._workers]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            bar.close()
        if errors:
            raise errors[0]
        return results

    def close(self) -> None:
        for worker in self._workers:
            worker.shutdown(wait=True, cancel_futures=True)


def _start(config_json: str, model_path: str, device: str) -> None:
    """A worker's initializer: its one device, before anything touches CUDA."""
    os.environ[SLOT_ENV] = device
    config = RunConfig.model_validate_json(config_json)
    if device.startswith("gpu"):
        os.environ["CUDA_VISIBLE_DEVICES"] = device.removeprefix("gpu")
        config = config.model_copy(update={"model": config.model.model_copy(update={"device": "cuda:0"})})
    _WORKER.update(config=config, model_path=Path(model_path), trainer=None)


def _run(fn: Callable[[object, T], R], job: T) -> R:
    """In a worker: ``fn(trainer, job)`` with this worker's trainer (built at its first job)."""
    if _WORKER["trainer"] is None:
        import torch

        torch.set_num_threads(_WORKER["config"].model.threads)
        _WORKER["trainer"] = load_trainer(_WORKER["config"], _WORKER["model_path"])
    return fn(_WORKER["trainer"], job)


def load_trainer(config: RunConfig, model_path: Path):
    """A ``Trainer`` on ``model.device``: the base loaded from ``model_path``, the allocator set first
    (this process's trainer, ``engine.runtime``, and each worker's)."""
    from populora_core.models import load_model
    from populora_core.training.trainer import Trainer

    expandable_segments()
    model, tokenizer = load_model(model_path, dtype=config.model.dtype, device=config.model.device)
    return Trainer(model, tokenizer, config.population)


ALLOC_CONF = "expandable_segments:True"


def expandable_segments() -> None:
    """CUDA's caching allocator for the trainer: every micro-batch has other prompt and completion
    lengths, so its activations come in ever new sizes, which fragment fixed segments until a
    request fails with memory free; expandable segments grow one mapping instead (PyTorch's
    advice for such loads). A ``PYTORCH_CUDA_ALLOC_CONF`` the user set wins; set before the
    process's first CUDA allocation, or, in a process that already made one (the hf backend
    generating on the GPU), applied to the segments allocated from now on."""
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        return
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF
    os.environ[TRAINER_ALLOC_MARK] = "1"  # a vLLM server this process starts goes without it
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.memory._set_allocator_settings(ALLOC_CONF)  # the documented setting, applied late
