"""Work sent to Ray actors (``cluster.py``): in order, one piece in flight per actor, and
surviving lost actors and lost nodes; shares of work, and closing actors."""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tqdm.auto import tqdm

from populora_core.config import ClusterConfig

T = TypeVar("T")


class _Probes:
    """Actors lost during a stage, asked ``ready`` until they answer (restarted), once a
    second, each given up ``timeout_s`` after it was lost."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.pending: dict = {}  # ready's ref -> (actor, lost since)
        self.later: list = []  # (when, actor, lost since): the probe to send again

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

    def answer(self, ref: Any) -> Any | None:
        """The actor, if the probe ``ref`` found it ready; else it is probed again later."""
        import ray
        from ray.exceptions import RayActorError

        actor, since = self.pending.pop(ref)
        try:
            ray.get(ref)
            return actor
        except RayActorError:
            if time.monotonic() - since < self.timeout_s:
                self.later.append((time.monotonic() + 1.0, actor, since))
            return None

    def __bool__(self) -> bool:
        return bool(self.pending or self.later)


def map_ordered(
    actors: list, call: Callable[[Any, T], Any], chunks: Sequence[Sequence], desc: str | None, cluster: ClusterConfig
) -> list:
    """``call(actor, chunk)`` for every chunk, one chunk in flight per actor, results in order.

    Lost actors are handled here rather than by Ray's ``max_task_retries``, which gave up on
    an actor whose node was lost (seen with Ray 2.60: ``ActorUnavailableError`` raised with
    retries left) and whose budget a restarting actor's fast-failed calls can use up
    (ray-project/ray#44719): a chunk whose actor
    died or became unreachable goes back to the front of the queue; an actor gets work only
    once it has answered ``ready``, at the start and again after a loss (restarted, on its
    node or, the node gone, elsewhere), and is dropped if it has not within
    ``cluster.restart_timeout_s``. A chunk
    lost ``cluster.max_retries`` + 1 times raises (a chunk that kills whoever runs it), as
    does running out of actors."""
    import ray
    from ray.exceptions import RayActorError

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
                    f"every actor was lost and none came back within cluster.restart_timeout_s "
                    f"({cluster.restart_timeout_s:g} s); {len(queue)} of {len(chunks)} pieces of work left"
                )
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
                except RayActorError as exc:
                    lost[i] += 1
                    if lost[i] > cluster.max_retries:
                        raise RuntimeError(
                            f"a piece of work lost its actor {lost[i]} times (cluster.max_retries "
                            f"{cluster.max_retries}): {exc}"
                        ) from exc
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
    """The actors' own ``close`` (what they started, stopped), then the actors killed."""
    import ray

    try:
        ray.get([a.close.remote() for a in actors], timeout=60)
    except Exception:  # noqa: BLE001 - a dead actor's processes died with it
        pass
    for actor in actors:
        try:
            ray.kill(actor)
        except Exception:  # noqa: BLE001 - already gone with its node
            pass
