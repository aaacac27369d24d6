"""The heavy objects a generation needs, built once per process.

Stages pass paths and ids between each other (Prefect hashes task inputs); the
base model, the generation backend, the trainer and the sandbox pool live here,
created on first use and reused by every stage and generation of the process.
Generation and training use two copies of the base model: generation wraps its
target layers for mixed-adapter batches (``MultiLora``), training holds one PEFT
slot that each member's factors are copied into in turn.
"""

from __future__ import annotations

import atexit
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from populora_core.config import RunConfig
from populora_core.engine.trainers import ALLOC_CONF, expandable_segments  # noqa: F401 - ALLOC_CONF re-exported
from populora_core.inference.base import adapter_digest
from populora_core.models import resolve_dtype

if TYPE_CHECKING:  # torch is imported by what needs it: sandbox actors import this module without it
    from populora_core.training.trainer import TrainerPool


class Runtime:
    """Backend, trainer and sandbox pool for one run configuration."""

    def __init__(self, config: RunConfig, model_path: Path) -> None:
        self.config = config
        self.model_path = Path(model_path)
        self._backend = None
        self._trainer: TrainerPool | None = None
        self._pool = None
        self._served: dict[str, str] = {}  # adapter id -> digest of what the backend holds
        if config.model.threads:
            import torch

            torch.set_num_threads(config.model.threads)

    @property
    def backend(self):
        self._start("backend")
        if self._backend is None:
            inf = self.config.inference
            if inf.backend == "vllm":
                from transformers import AutoTokenizer

                from populora_core.engine.placement import vllm_settings
                from populora_core.inference.vllm import VLLMBackend, in_ray_worker

                members = self.config.population.teachers + self.config.population.students
                self._backend = VLLMBackend(
                    self.model_path,
                    AutoTokenizer.from_pretrained(self.model_path),
                    url=inf.vllm_url,
                    max_loras=members,
                    max_lora_rank=self.config.population.rank,
                    dtype=resolve_dtype(self.config.model.dtype, self.config.model.device),
                    extra_args=inf.vllm_args,
                    **vllm_settings(self.config, self.model_path, ray_actor=in_ray_worker()),
                )
            else:
                from populora_core.inference.hf import HFBackend

                self._backend = HFBackend(
                    self.model_path,
                    dtype=self.config.model.dtype,
                    device=self.config.model.device,
                    batch_size=inf.batch_size,
                )
        return self._backend

    @property
    def trainer(self) -> TrainerPool:
        self._start("trainer")
        if self._trainer is None:
            from populora_core.engine.trainers import DeviceTrainers, load_trainer

            devices = self._trainer_devices()  # several: a trainer process per device, the updates in parallel
            self._trainer = (
                DeviceTrainers(self.config, self.model_path, devices)
                if devices
                else load_trainer(self.config, self.model_path)
            )
        return self._trainer

    def _trainer_devices(self) -> list[str]:
        """The local engine's trainer processes (``engine.trainers``): one per GPU of a colocated
        plan, ``cluster.trainers`` on the CPU; none (this process trains) otherwise."""
        from populora_core.engine.trainers import trainer_devices

        if self.config.cluster.engine != "local":
            return []
        gpus: list[str] = []
        if self.config.model.device.startswith("cuda"):
            from populora_core.engine.placement import _physical, machine_plan

            plan = machine_plan(self.config)
            gpus = [_physical(g) for g in plan.trainer_gpus] if plan is not None else []
        return trainer_devices(self.config, gpus)

    @property
    def pool(self):
        self._start("pool")
        if self._pool is None:
            from populora_core.sandbox import SandboxPool

            pool = SandboxPool(self.config.sandbox)
            pool.start()
            self._pool = pool
        return self._pool

    def _start(self, need: str) -> None:
        """Called before ``need`` (backend, trainer or pool) is first built: an engine whose
        objects live elsewhere (``cluster.RayRuntime``) starts them here."""

    def serve(self, adapters: dict[str, Path]) -> None:
        """Makes the backend hold exactly ``adapters`` (id → PEFT dir); reloads changed ones only.

        When the set of ids changes, everything is reloaded in sorted order, so an
        adapter's slot depends only on the set (a resumed process lays out the
        stacked LoRA buffers exactly as the uninterrupted one did: same sums, same
        samples)."""
        backend = self.backend
        if set(adapters) != set(self._served):
            for adapter_id in list(self._served):
                backend.remove_adapter(adapter_id)
            self._served.clear()
        for adapter_id, path in sorted(adapters.items()):
            digest = adapter_digest(Path(path))
            if self._served.get(adapter_id) != digest:
                backend.load_adapter(adapter_id, Path(path))
                self._served[adapter_id] = digest

    def close(self) -> None:
        if hasattr(self._trainer, "close"):  # trainer processes
            self._trainer.close()
            self._trainer = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        closer = getattr(self._backend, "close", None)
        if closer is not None:
            closer()
        self._backend = None


_RUNTIMES: dict[str, Runtime] = {}
_LOCK = threading.Lock()


def get_runtime(config: RunConfig, model_path: Path, kind: type[Runtime] = Runtime) -> Runtime:
    """The process's runtime of ``kind`` for this model, inference, sandbox, population and
    cluster setup (the engine's: ``engine.runtime_of``)."""
    key = json.dumps(
        [
            kind.__qualname__,
            str(model_path),
            config.model.model_dump(mode="json"),
            config.inference.model_dump(mode="json"),
            config.sandbox.model_dump(mode="json"),
            config.population.model_dump(mode="json"),
            config.cluster.model_dump(mode="json"),
        ],
        sort_keys=True,
    )
    with _LOCK:
        if key not in _RUNTIMES:
            _RUNTIMES[key] = kind(config, model_path)
        return _RUNTIMES[key]


@atexit.register
def close_runtimes() -> None:
    with _LOCK:
        for runtime in _RUNTIMES.values():
            runtime.close()
        _RUNTIMES.clear()
