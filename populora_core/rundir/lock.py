"""One process at a time works on a run: an OS lock on ``<run>/.lock``.

``hold(run_root, command)`` takes an exclusive ``flock`` on the run's lock file and
writes who holds it (host, pid, command, since when) into it. The kernel releases
the lock when the holder dies, however it dies, so a lock left by a killed process
is simply taken over; there is no heartbeat to expire and no stale file to clean.
A second ``train``/``resume``/``replay`` of the same run fails at once with
``RunBusy`` naming the holder. The outermost flow takes it (``populora-train``, or
``populora-generation`` run alone); the CLI only checks beforehand (``check_free``) so that
a busy run fails in one line before any flow starts. It is re-entrant within a process.

``flock`` is per host: a run directory on a shared filesystem is locked by the
driver process, which is the only one that writes a run's progress.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = ".lock"


class RunLockError(RuntimeError):
    """The run's lock cannot be taken (the message says why)."""


class RunBusy(RunLockError):
    """The run is being worked on by another live process (the message names it)."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    command: str
    since: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} ({self.command}, since {self.since})"


_held: dict[str, list] = {}  # resolved lock path -> [fd, depth]
_guard = threading.Lock()


COMMAND_ENV = "POPULORA_COMMAND"
"""The command line a supervised training process records (its supervisor's: ``cli.supervise``)."""


def process_command() -> str:
    """This process's command line as the lock records it (``populora train …``)."""
    return (os.environ.get(COMMAND_ENV) or " ".join(["populora", *sys.argv[1:]]))[:200]


def lock_path(run_root: str | Path) -> Path:
    return Path(run_root) / LOCK_FILE


def _read_holder(fd: int) -> Holder | None:
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return Holder(data["host"], int(data["pid"]), data["command"], data["since"])
    except (ValueError, KeyError, TypeError):
        return None


def _try_lock(fd: int, tries: int = 4) -> bool:
    """An exclusive lock without waiting for a holder; retried briefly, since ``holder()``
    in another process takes a shared lock for an instant."""
    for i in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if i < tries - 1:
                time.sleep(0.05)
    return False


def acquire(run_root: str | Path, command: str | None = None) -> None:
    """Takes the run's lock (again, if this process holds it); raises RunBusy if another does."""
    path = lock_path(run_root).resolve()
    with _guard:
        if str(path) in _held:
            _held[str(path)][1] += 1
            return
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunLockError(f"cannot open the run's lock file {path}: {exc.strerror}") from None
        if not _try_lock(fd):
            holder = _read_holder(fd)
            os.close(fd)
            raise _busy(run_root, holder) from None
        me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": command or process_command(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
        except OSError:
            os.close(fd)  # releases the lock
            raise
        _held[str(path)] = [fd, 1]


def _busy(run_root: str | Path, holder: Holder | None) -> RunBusy:
    who = holder.describe() if holder else "another process"
    return RunBusy(
        f"run {Path(run_root)} is in use by {who}; wait for it to finish or stop it "
        f"(a killed holder releases the run at once)"
    )


def release(run_root: str | Path) -> None:
    path = str(lock_path(run_root).resolve())
    with _guard:
        entry = _held.get(path)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _held[path]
            os.ftruncate(entry[0], 0)
            os.close(entry[0])  # closing the descriptor releases the flock


@contextmanager
def hold(run_root: str | Path, command: str | None = None) -> Iterator[None]:
    """The run's lock for the duration of the block (re-entrant)."""
    acquire(run_root, command)
    try:
        yield
    finally:
        release(run_root)


def holder(run_root: str | Path) -> Holder | None:
    """Who works on the run now, if anyone but this process (None when it is free)."""
    path = lock_path(run_root)
    if not path.is_file() or str(path.resolve()) in _held:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd) or Holder("?", 0, "unknown", "?")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def check_free(run_root: str | Path) -> None:
    """Raises RunBusy naming the live process (another one) that holds the run's lock: what
    a command checks before it starts a flow that takes the lock."""
    found = holder(run_root)
    if found is not None:
        raise _busy(run_root, found)
