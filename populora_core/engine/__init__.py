"""Where a run's heavy work executes (``cluster.engine``): this process, or a Ray cluster.

It owns the heavy objects of a process (``runtime``: the generation backend, the trainer,
the sandbox pool, built once and reused), their drop-ins on Ray (``cluster``: inference and
sandbox actors per node, one update task per adapter) and the calls to those actors
(``actor_calls``: ordered maps that re-send a lost actor's work). It may import the config,
the models, inference, training and the sandbox; never the run directory or the stages.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from populora_core.config import RunConfig
    from populora_core.engine.runtime import Runtime


def runtime_of(config: RunConfig, model_path: Path) -> Runtime:
    """The process's runtime for ``config``'s engine (built once, then reused)."""
    from populora_core.engine.runtime import Runtime, get_runtime

    if config.cluster.engine == "ray":
        from populora_core.engine.cluster import RayRuntime

        return get_runtime(config, model_path, RayRuntime)
    return get_runtime(config, model_path, Runtime)
