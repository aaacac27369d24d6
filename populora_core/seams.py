"""Seams: the named points where the code lets a test act on a run (``tests/faults``: a kill, a
full disk, an update that outgrows memory, a stand-in verdict) without replacing a function by
its name, which a renamed function, or one imported another way, silently disarms.

Each point is declared here, with where it is reached; the code there calls
``seam(POINT, value, **context)``, which returns ``value`` itself while no hook is registered
for the point (one dictionary lookup), else what the hooks make of it. ``register`` refuses a
point not declared here, and ``tests/core/test_seams.py`` reaches every declared point through
the code its line names. Nothing in the library registers a hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

ARTIFACT_WRITE = "artifact.write"
"""``RunDir.write``, before a stage's artifact is written: the frame; ``run``, ``generation``, ``name``."""
TRACKING_SYNC = "tracking.sync"
"""``tracking.sync``, before anything is logged: the run."""
TENSORBOARD_WRITE = "tracking.tensorboard"
"""``tracking``'s TensorBoard sync, with generations to log, before its event file is written: the run."""
SANDBOX_BATCH = "sandbox.batch"
"""``SandboxPool.run``, before a batch of jobs runs: the jobs."""
UPDATE_TRAIN = "update.train"
"""``learn.train_one``, once the attempts file names the adapter, before its update: the ``UpdateJob``."""
UPDATE_WEIGHTS = "update.weights"
"""``learn.save_updated``, before a trained adapter's weights are written: the temp directory; ``target``."""
UPDATE_OPTIMIZER = "update.optimizer"
"""``learn.save_updated``, after the weights, before the optimizer state and metrics.json: the temp
directory; ``target``."""
SNAPSHOT_LINK = "snapshot.link"
"""``adapters.save_population``, before an unchanged member is linked into the snapshot: its directory there."""
VERIFY_VERDICTS = "verify.verdicts"
"""``play.verify``: the answers' verdicts (``problems.CheckResult``), before they become the artifact."""
EVAL_PART = "eval.part"
"""``pipeline.evaluate_benchmark``, every chunk judged, before the benchmark's part is written: its path."""

POINTS = frozenset(
    {
        ARTIFACT_WRITE,
        TRACKING_SYNC,
        TENSORBOARD_WRITE,
        SANDBOX_BATCH,
        UPDATE_TRAIN,
        UPDATE_WEIGHTS,
        UPDATE_OPTIMIZER,
        SNAPSHOT_LINK,
        VERIFY_VERDICTS,
        EVAL_PART,
    }
)
"""Every declared point."""

_hooks: dict[str, list[Callable[..., Any]]] = {}


def register(point: str, hook: Callable[..., Any]) -> Callable[[], None]:
    """From now on ``hook(value, **context)`` is called at ``point`` (after the hooks registered
    before it), and what it returns is passed on. Returns what removes it again; raises
    ValueError for a point not declared here."""
    if point not in POINTS:
        raise ValueError(f"no seam {point!r}: the declared ones are {', '.join(sorted(POINTS))}")
    _hooks.setdefault(point, []).append(hook)

    def remove() -> None:
        hooks = _hooks.get(point, [])
        if hook in hooks:
            hooks.remove(hook)
        if not hooks:
            _hooks.pop(point, None)

    return remove


def seam(point: str, value: T, **context: Any) -> T:
    """``value`` as the hooks registered for ``point`` leave it (each given it and ``context``);
    ``value`` itself when none is."""
    hooks = _hooks.get(point)
    if not hooks:
        return value
    for hook in list(hooks):
        value = hook(value, **context)
    return value
