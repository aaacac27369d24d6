"""Work sent to Ray actors (``cluster.py``): in order, one piece in flight per actor, and
surviving lost actors and lost nodes; shares of work, and closing actors."""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tqdm.auto import tqdm

from populora_core.config import ClusterConfig

T = TypeVar("T")
C = TypeVar("C", bound=Sequence)
log = logging.getLogger(__name__)


def lost_errors() -> tuple[type[Exception], ...]:
    """What a call whose actor (or its node, or its process's memory) was lost raises."""
    from ray.exceptions import NodeDiedError, ObjectLostError, OutOfMemoryError, RayActorError

    return RayActorError, OutOfMemoryError, NodeDiedError, ObjectLostError


class _Probes:
    """Actors not yet known to be ready (at the start, or lost during the stage), asked
    ``ready`` once a second until they answer, each given up ``timeout_s`` after it was
    lost, or at once if its constructor raised (Ray does not restart such an actor)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.pending: dict = {}  # ready's ref -> (actor, lost since)
        self.later: list = []  # (when, actor, lost since): the probe to send again
        self.error: Exception | None = None  # the last reason an actor did not answer

    def add(self, actor: Any, since: float | None = None) -> None:
        self.pending[actor.ready.remote()] = (actor, time.monotonic() if since is None else since)

    def tick(self) -> None:
        """Sends the probes that are due; forgets those in flight past the timeout (an actor
        that no node can take: its probe would never return)."""
        now = time.monotonic()
        for item in [x for x in self.later if x[0] <= now]:
            self.later.remove(item)
            self.add(item[1], item[2])
        for ref, (_, since) in list(self.pending.items()):
            if now - since > self.timeout_s:
                del self.pending[ref]
                self.error = TimeoutError(f"an actor did not answer `ready` within {self.timeout_s:g} s")
                log.warning("%s", self.error)

    def answer(self, ref: Any) -> Any | None:
        """The actor, if the probe ``ref`` found it ready; else it is probed again later."""
        import ray

        actor, since = self.pending.pop(ref)
        try:
            ray.get(ref)
            return actor
        except lost_errors() as exc:
            self.error = exc
            if getattr(exc, "actor_init_failed", False):
                log.warning("an actor's constructor raised; it gets no more work: %s", exc)
            elif time.monotonic() - since < self.timeout_s:
                self.later.append((time.monotonic() + 1.0, actor, since))
            else:
                log.warning("an actor did not come back within cluster.restart_timeout_s: %s", exc)
            return None

    def __bool__(self) -> bool:
        return bool(self.pending or self.later)


def map_ordered(
    actors: list, call: Callable[[Any, C], Any], chunks: Sequence[C], desc: str | None, cluster: ClusterConfig
) -> list:
    """``call(actor, chunk)`` for every chunk, one chunk in flight per actor, results in order.

    Lost actors are handled here rather than by Ray's ``max_task_retries``, which gave up on
    an actor whose node was lost (seen with Ray 2.60: ``ActorUnavailableError`` raised with
    retries left) and whose budget a restarting actor's fast-failed calls can use up
    (ray-project/ray#44719). An actor gets work once it has answered ``ready``: at the
    start (its first start may take up to ``cluster.restart_timeout_s``) and again after a
    loss (restarted on its node or, the node gone, elsewhere). A chunk whose actor died, was
    killed for memory or became unreachable goes back to the front of the queue, for the
    next ready actor (it may run twice: the work sent here gives the same result again). A
    chunk lost ``cluster.max_retries`` + 1 times raises, as does having no actor left (none
    back within ``cluster.restart_timeout_s``, or their constructors raised: such an actor
    gets no work, the others go on). Errors raised by an actor's methods propagate."""
    import ray

    results: list = [None] * len(chunks)
    queue, idle = deque(range(len(chunks))), []
    running: dict = {}  # call's ref -> (chunk index, actor)
    probes, lost = _Probes(cluster.restart_timeout_s), Counter()
    for actor in actors:  # work goes to actors that answer: one that died since the last stage
        probes.add(actor)  # would fail its first call fast and count it lost
    with tqdm(total=sum(map(len, chunks)), desc=desc, unit="sample", disable=desc is None, leave=False) as bar:
        while queue or running:
            while queue and idle:
                i, actor = queue.popleft(), idle.pop()
                running[call(actor, chunks[i])] = (i, actor)
            probes.tick()
            if not running and not probes:
                raise RuntimeError(
                    f"no actor left: each was lost and not back within cluster.restart_timeout_s "
                    f"({cluster.restart_timeout_s:g} s), or its constructor raised; {len(queue)} of "
                    f"{len(chunks)} pieces of work left" + (f"; the last error: {probes.error}" if probes.error else "")
                ) from probes.error
            if not (refs := [*running, *probes.pending]):  # only probes to send again, in a moment
                time.sleep(0.5)
                continue
            for ref in ray.wait(refs, num_returns=1, timeout=1.0)[0]:
                if ref in probes.pending:
                    idle.extend(a for a in [probes.answer(ref)] if a is not None)
                    continue
                i, actor = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except lost_errors() as exc:
                    lost[i] += 1
                    if lost[i] > cluster.max_retries:
                        raise RuntimeError(
                            f"a piece of work lost its actor {lost[i]} times (cluster.max_retries "
                            f"{cluster.max_retries}): {exc}"
                        ) from exc
                    log.warning("an actor was lost during a call; its work goes to the next ready actor: %s", exc)
                    queue.appendleft(i)
                    probes.add(actor)
                    continue
                idle.append(actor)
                bar.update(len(chunks[i]))
    return results


def split_weighted(items: list[T], parts: int, weights: Sequence[int]) -> list[list[T]]:
    """``items`` in order, cut into at most ``parts`` contiguous pieces of about equal total weight."""
    total, pieces, piece, acc = sum(weights), [], [], 0
    for item, weight in zip(items, weights, strict=True):
        piece.append(item)
        acc += weight
        if acc * parts >= total * (len(pieces) + 1) and len(pieces) < parts - 1:
            pieces.append(piece)
            piece = []
    return [*pieces, piece] if piece else pieces


def close_actors(actors: list) -> None:
    """The actors' own ``close`` (what they started, stopped), then the actors killed. Nothing
    once Ray is shut down: a call would start a new Ray, and the driver's actors ended with
    its connection."""
    import ray

    if not ray.is_initialized():
        return
    try:
        ray.get([a.close.remote() for a in actors], timeout=60)
    except Exception:  # noqa: BLE001 - a dead actor's processes died with it
        pass
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone with its node
            pass
