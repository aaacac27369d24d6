"""What every sandbox backend shares: the worker program it runs and the handle of a started worker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

WORKER_PATH = Path(__file__).with_name("worker.py")
JAIL_PATH = Path(__file__).with_name("jail.py")
WORKER_FLAGS = ("-s", "-S", "-P")
"""The worker's interpreter flags: no user site-packages, no site, no script directory on the
path. Not ``-I``: it implies ``-E``, which ignores the PYTHONHASHSEED=0 every backend sets, and
string hashes (set orders) would differ between workers, and between a judge and its answer's
process (`harness/candidate.py` starts that with the same flags)."""
TMPFS_MB = 64
"""Size of the writable /tmp of each sandbox (emptied after every job)."""
SHM_MB = 16
"""Size of the writable /dev/shm of each sandbox (POSIX shared memory and
semaphores; emptied after every job). Both stay below the smallest per-job
memory limit, so leftovers never outgrow a job's caps."""


class SandboxUnavailable(RuntimeError):
    """The configured backend cannot run here; the message says how to get it."""


def worker_source(harness_root: str) -> str:
    """The program every backend runs with ``python -s -S -P -c`` (``WORKER_FLAGS``).

    The worker needs jail.py beside it and nothing of this package is
    installed inside the isolation, so the program carries both sources:
    jail.py becomes module ``jail``, then worker.py runs as ``__main__``.
    ``harness_root``, the directory holding the judges' harness as the worker
    sees it (`harness_copy.py`), goes last on its ``sys.path``, behind the
    standard library, for every program it runs.
    """
    return (
        "import sys, types\n"
        f"sys.path.append({harness_root!r})\n"
        "jail = types.ModuleType('jail')\n"
        f"exec(compile({JAIL_PATH.read_text()!r}, 'jail.py', 'exec'), jail.__dict__)\n"
        "sys.modules['jail'] = jail\n"
        "del jail, types\n"
        f"exec(compile({WORKER_PATH.read_text()!r}, 'worker.py', 'exec'))\n"
    )


def _no_exit_code() -> int | None:
    return None


@dataclass
class WorkerProcess:
    """A started worker: job lines are written to ``in_fd``, result lines read from ``out_fd``.

    ``demux``, when set, turns what ``out_fd`` gives into the worker's plain
    stdout (Docker's attach stream frames it). ``handle`` is whatever the
    backend needs to stop the worker (a Popen, or a container and its socket).
    """

    name: str
    index: int
    in_fd: int
    out_fd: int
    handle: Any
    demux: Callable[[bytes], bytes] | None = None
    exit_code: Callable[[], int | None] = field(default=_no_exit_code)


class SandboxBackend(Protocol):
    name: str

    def check(self) -> None:
        """Raises SandboxUnavailable, with what to do, if this backend cannot run."""

    def start(self, index: int) -> WorkerProcess:
        """Starts worker ``index`` (0-based)."""

    def stop(self, worker: WorkerProcess) -> None:
        """Stops a worker for good, whatever it is doing."""
