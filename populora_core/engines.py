"""The runtime of a run's engine (``cluster.engine``): this process's, or the Ray cluster's.

``runtime.Runtime`` holds the heavy objects of one process; the Ray engine's actors and
tasks (``cluster``) run such a local runtime inside their nodes, and ``RayRuntime`` hands
the driver's stages the cluster's drop-ins instead. Choosing between them happens here,
so neither ``runtime`` nor ``cluster`` imports the other at module level.
"""

from __future__ import annotations

from pathlib import Path

from populora_core.config import RunConfig
from populora_core.runtime import Runtime, get_runtime


class RayRuntime(Runtime):
    """The runtime of ``cluster.engine: ray``: its backend, sandbox pool and trainer are the
    cluster's (``cluster.RayBackend``, ``RaySandboxPool``, ``RayTrainer``)."""

    def _start(self, need: str) -> None:
        """The first heavy stage starts all three at once (inference actors, sandbox actors,
        update workers loading their trainer): their start-ups overlap each other and the
        stages before they are needed, instead of each delaying its stage. A process whose
        first heavy stage is `update` (a resume or replay from it) starts the update workers
        only."""
        from populora_core.cluster import RayBackend, RaySandboxPool, RayTrainer

        if need != "trainer" and self._backend is None:
            self._backend = RayBackend(self.config, self.model_path)
        if need != "trainer" and self._pool is None:
            self._pool = RaySandboxPool(self.config)
            self._pool.start()
        if self._trainer is None:
            self._trainer = RayTrainer(self.config, self.model_path)
            if need != "trainer":
                self._trainer.prestart()

    def serve(self, adapters: dict[str, Path]) -> None:
        """Each inference actor loads what changed (``cluster.RayBackend.serve``)."""
        self.backend.serve(adapters)


def runtime_of(config: RunConfig, model_path: Path) -> Runtime:
    """The process's runtime for ``config``'s engine (built once, then reused)."""
    return get_runtime(config, model_path, RayRuntime if config.cluster.engine == "ray" else Runtime)
