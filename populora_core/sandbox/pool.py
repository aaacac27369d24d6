"""A pool of sandbox workers: runs a list of jobs and returns results in order.

One thread multiplexes every worker with ``select``: jobs are streamed to each
worker (a small window in flight, so a worker never waits for the host), and
results are read back as they come. A worker that exits, breaks the protocol or
overruns its job's deadline (the job's timeout plus a grace period; the worker
enforces the timeout itself, so this only catches a hung worker) is stopped and
replaced. The job it was running is retried once; a second failure is recorded
as ``sandbox_failure``. Jobs queued behind it are re-sent untouched. No job is
ever dropped: ``run`` returns exactly one result per job.

A backend whose engine can stop answering (Docker: ``answers``) is checked when a worker
fails: if the engine is gone (restarted, upgraded), no job is blamed. The pool waits for it
(``sandbox.docker_wait_s``, one log line at each end of the wait), then replaces every worker
and runs every job that was in flight again, untried; past the wait it raises
``SandboxUnavailable`` naming ``populora resume``.
"""

from __future__ import annotations

import logging
import os
import select
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from populora_core.config import SandboxConfig
from populora_core.sandbox.backends import SandboxBackend, SandboxUnavailable, WorkerProcess, get_backend
from populora_core.sandbox.protocol import Job, Result, decode_result, encode_job
from populora_core.seams import SANDBOX_BATCH, seam

log = logging.getLogger(__name__)

WINDOW_JOBS = 64
WINDOW_BYTES = 48 * 1024
MAX_TRIES = 2


@dataclass
class _Slot:
    """Host-side state of one worker."""

    worker: WorkerProcess
    out_fd: int
    in_fd: int
    rbuf: bytearray = field(default_factory=bytearray)
    wbuf: bytearray = field(default_factory=bytearray)
    inflight: deque = field(default_factory=deque)
    inflight_bytes: int = 0
    deadline: float = float("inf")
    jobs_done: int = 0


@dataclass
class _Batch:
    """Per-call state of one ``SandboxPool.run``: the jobs' lines, deadlines, results and retries."""

    encoded: list[bytes]
    limits: list[float]
    results: list[Result | None]
    tries: list[int]
    pending: deque[int]
    remaining: int
    engine_waits: int = 0


@dataclass(frozen=True)
class PoolStats:
    jobs: int = 0
    worker_restarts: int = 0
    retries: int = 0
    sandbox_failures: int = 0
    engine_waits: int = 0


class SandboxPool:
    """Runs jobs across ``config.workers`` sandboxed workers.

    Use as a context manager; workers start on entry (the backend is checked
    first and raises ``SandboxUnavailable`` with what to do) and stop on exit.
    """

    def __init__(self, config: SandboxConfig, backend: SandboxBackend | None = None) -> None:
        self.config = config
        self.backend = backend or get_backend(config)
        self._slots: list[_Slot] = []
        self._stats = {"jobs": 0, "worker_restarts": 0, "retries": 0, "sandbox_failures": 0, "engine_waits": 0}
        self._recycle_every = config.docker_recycle_every if self.backend.name == "docker" else None

    @property
    def stats(self) -> PoolStats:
        return PoolStats(**self._stats)

    def __enter__(self) -> SandboxPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self.backend.check()
        self._slots = [self._spawn(i) for i in range(self.config.workers)]

    def close(self) -> None:
        for slot in self._slots:
            self.backend.stop(slot.worker)
        self._slots = []

    def _spawn(self, index: int) -> _Slot:
        worker = self.backend.start(index)
        os.set_blocking(worker.in_fd, False)
        return _Slot(worker=worker, out_fd=worker.out_fd, in_fd=worker.in_fd)

    def _restart(self, slot: _Slot) -> _Slot:
        self.backend.stop(slot.worker)
        self._stats["worker_restarts"] += 1
        return self._spawn(slot.worker.index)

    def _has_room(self, slot: _Slot) -> bool:
        """Whether one more job may be sent to ``slot`` now."""
        if self._recycle_every and slot.jobs_done + len(slot.inflight) >= self._recycle_every:
            return False  # the rest goes to this worker's successor
        if not slot.inflight:
            return True
        return len(slot.inflight) < WINDOW_JOBS and slot.inflight_bytes < WINDOW_BYTES

    def run(self, jobs: Sequence[Job]) -> list[Result]:
        """Runs ``jobs``; returns one Result per job, in the same order."""
        jobs = seam(SANDBOX_BATCH, jobs)
        if not self._slots:
            raise RuntimeError("SandboxPool.run called outside `with SandboxPool(...)` (or before start())")
        batch = self._new_batch(jobs)
        while batch.remaining:
            self._step(batch)
        self._stats["jobs"] += len(jobs)
        return [r for r in batch.results if r is not None]

    def _new_batch(self, jobs: Sequence[Job]) -> _Batch:
        """Encodes ``jobs`` with the configured defaults and sets up their bookkeeping."""
        cfg = self.config
        encoded = [
            encode_job(
                i,
                job,
                timeout_s=cfg.timeout_s,
                memory_mb=cfg.memory_mb,
                max_output_bytes=cfg.max_output_bytes,
                max_procs=cfg.max_procs,
            )
            for i, job in enumerate(jobs)
        ]
        limits = [(job.timeout_s or cfg.timeout_s) + cfg.worker_grace_s for job in jobs]
        return _Batch(
            encoded=encoded,
            limits=limits,
            results=[None] * len(jobs),
            tries=[0] * len(jobs),
            pending=deque(range(len(jobs))),
            remaining=len(jobs),
        )

    def _step(self, batch: _Batch) -> None:
        """One round of the select loop: fill slots, wait, write, read, enforce deadlines."""
        now = time.monotonic()
        self._fill_slots(batch, now)
        readers = {s.out_fd: k for k, s in enumerate(self._slots) if s.inflight}
        writers = {s.in_fd: k for k, s in enumerate(self._slots) if s.wbuf}
        wait = min((s.deadline for s in self._slots if s.inflight), default=now + 1.0) - now
        try:
            r_ready, w_ready, _ = select.select(list(readers), list(writers), [], max(0.0, wait))
        except InterruptedError:
            return
        for fd in w_ready:
            self._write(self._slots[writers[fd]], fd)
        for fd in r_ready:
            self._read(batch, readers[fd], fd)
        now = time.monotonic()
        for k, slot in enumerate(self._slots):
            if slot.inflight and now > slot.deadline:
                self._fail(batch, k, "worker hung past its job's deadline")

    def _fill_slots(self, batch: _Batch, now: float) -> None:
        """Recycles workers that are due, then queues pending jobs on every slot with room."""
        for k, slot in enumerate(self._slots):
            if self._recycle_every and slot.jobs_done >= self._recycle_every and not slot.inflight:
                self.backend.stop(slot.worker)
                self._slots[k] = slot = self._spawn(slot.worker.index)
            while batch.pending and self._has_room(slot):
                j = batch.pending.popleft()
                if not slot.inflight:
                    slot.deadline = now + batch.limits[j]
                slot.inflight.append(j)
                slot.inflight_bytes += len(batch.encoded[j])
                slot.wbuf += batch.encoded[j]

    @staticmethod
    def _write(slot: _Slot, fd: int) -> None:
        """Sends as much of ``slot``'s write buffer as its pipe takes now."""
        try:
            n = os.write(fd, slot.wbuf)
            del slot.wbuf[:n]
        except (BrokenPipeError, ConnectionResetError):
            slot.wbuf.clear()  # the read side sees EOF and handles it
        except BlockingIOError:
            pass

    def _read(self, batch: _Batch, k: int, fd: int) -> None:
        """Reads what worker ``k`` wrote and takes in every complete result line."""
        slot = self._slots[k]
        if slot.out_fd != fd:
            return  # replaced during this round
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            self._fail(batch, k, f"worker exited (code {slot.worker.exit_code()})")
            return
        if slot.worker.demux is not None:
            chunk = slot.worker.demux(chunk)
        slot.rbuf += chunk
        if b"\n" not in chunk:
            return
        *lines, tail = slot.rbuf.split(b"\n")
        slot.rbuf = bytearray(tail)
        self._take_results(batch, k, lines)

    def _take_results(self, batch: _Batch, k: int, lines: list[bytearray]) -> None:
        """Records worker ``k``'s result lines in order; a result out of order fails the worker."""
        slot = self._slots[k]
        for line in lines:
            if not slot.inflight:
                break
            job_id, result = decode_result(bytes(line))
            head = slot.inflight[0]
            if job_id != head:
                self._fail(batch, k, f"protocol error: expected result {head}, got {job_id}")
                break
            slot.inflight.popleft()
            slot.inflight_bytes -= len(batch.encoded[head])
            slot.jobs_done += 1
            batch.results[head] = result
            batch.remaining -= 1
            if slot.inflight:
                slot.deadline = time.monotonic() + batch.limits[slot.inflight[0]]

    def _fail(self, batch: _Batch, k: int, reason: str) -> None:
        """Replaces worker ``k``: its current job is retried (or failed after MAX_TRIES), the rest
        re-queued; when the engine itself is gone, waits for it instead (``_wait_for_engine``)."""
        if not self._engine_answers() or self._every_worker_gone(batch):
            self._wait_for_engine(batch)
            return
        slot = self._slots[k]
        if slot.inflight:
            head = slot.inflight.popleft()
            batch.tries[head] += 1
            if batch.tries[head] >= MAX_TRIES:
                batch.results[head] = Result(status="sandbox_failure", error=reason)
                self._stats["sandbox_failures"] += 1
                batch.remaining -= 1
            else:
                self._stats["retries"] += 1
                batch.pending.appendleft(head)
            batch.pending.extendleft(reversed(slot.inflight))
        log.warning("sandbox worker %s replaced: %s", slot.worker.name, reason)
        slot.inflight.clear()
        try:
            self._slots[k] = self._restart(slot)
        except Exception:
            if getattr(self.backend, "answers", None) is None:
                raise
            # the engine went away between the failure and the new worker (or came back meanwhile):
            # wait for it, then make every worker anew; a failure that is not the engine's raises there
            self._wait_for_engine(batch)

    def _every_worker_gone(self, batch: _Batch) -> bool:
        """Whether the engine answers but every worker's container is gone: it restarted while
        they were idle (between two stages) and took them all. Never for one worker (its own
        program may have killed it), nor more than ``MAX_TRIES`` times in one batch."""
        alive: Callable[[WorkerProcess], bool] | None = getattr(self.backend, "alive", None)
        if alive is None or len(self._slots) < 2 or batch.engine_waits >= MAX_TRIES:
            return False
        return not any(alive(slot.worker) for slot in self._slots)

    def _engine_answers(self) -> bool:
        answers: Callable[[], bool] | None = getattr(self.backend, "answers", None)
        return answers is None or answers()

    def _wait_for_engine(self, batch: _Batch, every_s: float = 1.0) -> None:
        """Waits for the backend's engine to answer again (``sandbox.docker_wait_s`` at most), then
        replaces every worker (an engine restart took their containers) and queues every job in
        flight again, its tries untouched: the engine failed, not the job."""
        since, limit = time.monotonic(), self.config.docker_wait_s
        self._stats["engine_waits"] += 1
        batch.engine_waits += 1
        log.warning(
            "the %s engine stopped answering (or restarted: every container gone); the sandbox waits for it "
            "(up to %.0f s: sandbox.docker_wait_s)",
            self.backend.name,
            limit,
        )
        again = 0
        for slot in self._slots:
            again += len(slot.inflight)
            batch.pending.extendleft(reversed(slot.inflight))
            slot.inflight.clear()
            self.backend.stop(slot.worker)
        indices, last = [slot.worker.index for slot in self._slots], None
        while True:
            if self._engine_answers():
                made: list[_Slot] = []
                try:
                    for index in indices:
                        made.append(self._spawn(index))
                    break
                except Exception as exc:  # noqa: BLE001 - it answers, but cannot make containers yet
                    last = exc
                    for slot in made:
                        self.backend.stop(slot.worker)
            left = since + limit - time.monotonic()
            if left <= 0:
                raise SandboxUnavailable(
                    f"the {self.backend.name} engine has not answered for {limit:.0f} s (sandbox.docker_wait_s); "
                    "the stage stopped, what the run finished is kept: start the engine (`make dockerd`), "
                    "then `populora resume RUN`"
                ) from last
            time.sleep(min(every_s, left))
            every_s = min(2 * every_s, 30.0)
        self._slots = made
        self._stats["worker_restarts"] += len(made)
        log.warning(
            "the %s engine answers again after %.0f s; %d programs in flight run again in new containers",
            self.backend.name,
            time.monotonic() - since,
            again,
        )
