"""The runtime of a run's engine (``cluster.engine``): this process's, or the Ray cluster's.

``runtime`` holds the objects of one process; ``cluster`` builds on it (its actors and
tasks run a local runtime inside their nodes). Choosing between them is this module's
only job, so neither of the two imports the other's user.
"""

from __future__ import annotations

from pathlib import Path

from populora_core.config import RunConfig
from populora_core.runtime import Runtime, get_runtime


def runtime_of(config: RunConfig, model_path: Path) -> Runtime:
    """The process's runtime for ``config``'s engine (built once, then reused)."""
    if config.cluster.engine == "ray":
        from populora_core.cluster import RayRuntime  # Ray is imported only by runs that use it

        return get_runtime(config, model_path, RayRuntime)
    return get_runtime(config, model_path)
