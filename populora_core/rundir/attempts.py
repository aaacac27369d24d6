"""Who worked on a generation, where each attempt was, and how it ended.

Every process that computes stages of a generation appends short JSON lines to
``gen_NNNN/_attempts.jsonl`` (one ``write`` each, so a killed process leaves whole lines):

- ``{"event": "start", "stage": S, "peak_rss": B}``: it began stage S (its peak memory so far);
- ``{"event": "adapter", "stage": "update", "detail": A, "peak_rss": B}``: it began training
  adapter A (the local engine; a Ray task trains in another process and says nothing here);
- ``{"event": "writing", "stage": S, "detail": "its artifacts"}``: it computed S and writes it;
- ``{"stage": S, "seconds": T, "peak_rss": B}``: it finished stage S in T seconds;
- ``{"event": "ended", "signal": "SIGKILL" | "exit_status": N, "peak_rss": B, "memory": M,
  "memory_limit": L}``: written by the `populora` process that supervised it (``cli.supervise``)
  when it exited other than 0: the signal or exit status, its peak resident memory as the
  kernel counted it (``wait4``), and the machine's memory (and a cgroup's limit, if lower).

Each line also carries the attempt id, the pid and the time. A process killed by SIGKILL —
the kernel's out-of-memory killer is the usual sender — cannot say so itself: its supervisor
does, and ``last_attempt`` reads back which stage and adapter it was in.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30  # as engine.memory's (the run directory does not import the engine)


def peak_rss() -> int:
    """This process's peak resident memory so far, in bytes (Linux counts ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max"]
            candidates.append(Path("/sys/fs/cgroup/unified") / path.lstrip("/") / "memory.max")
        elif "memory" in controllers.split(","):
            candidates = [Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for file in candidates:
            try:
                text = file.read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                return int(text)
    return None


def machine_memory() -> tuple[int, int | None]:
    """(the machine's memory, the memory limit of this process's cgroup where it is lower), bytes."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = _cgroup_limit()
    return total, (limit if limit is not None and limit < total else None)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


# what a working process writes ------------------------------------------------------------
_current: dict = {}
"""The stage this process is computing: its attempts file and the line fields (``stage``)."""


def append(path: Path, line: dict) -> None:
    """One whole JSON line appended to ``path`` (a killed writer leaves whole lines)."""
    with open(path, "a") as fh:
        fh.write(json.dumps(line | {"at": round(time.time(), 3)}) + "\n")


@contextlib.contextmanager
def stage(path: Path, attempt: str, name: str) -> Iterator[None]:
    """Records that this process begins stage ``name``; ``note_adapter`` inside it says which
    adapter it trains. Best effort: a line that cannot be written (a full disk) is skipped, the
    stage's own writes report that."""
    _current.update(path=Path(path), attempt=attempt, stage=name)
    _write({"event": "start"})
    try:
        yield
    finally:
        _current.clear()


def note(event: str, what: str) -> None:
    """Records where this process is inside its stage (nothing outside a ``stage``):
    ``("adapter", id)`` as it begins training an adapter, ``("writing", what)`` as it writes."""
    if _current:
        _write({"event": event, "detail": what})


def _write(fields: dict) -> None:
    line = {"attempt": _current["attempt"], "pid": os.getpid(), "stage": _current["stage"], **fields}
    with contextlib.suppress(OSError):
        _current["path"].parent.mkdir(parents=True, exist_ok=True)  # a generation's first stage
        append(_current["path"], line | {"peak_rss": peak_rss()})


# reading them back ---------------------------------------------------------------------
_DOING = {"adapter": "training adapter", "writing": "writing"}


@dataclass(frozen=True)
class AttemptEnd:
    """Where the last attempt at a generation was, and how it ended (None: not recorded)."""

    attempt: str | None
    pid: int | None
    stage: str | None
    """The stage it had begun and not finished (None: none, or it stopped between stages)."""
    doing: str | None
    """What it was doing in that stage: ``training adapter A`` (the local engine's update),
    ``writing its artifacts``."""
    signal: str | None
    exit_status: int | None
    peak_rss: int | None
    memory: int | None
    memory_limit: int | None

    def describe(self) -> str:
        """One line: what stopped it, where, and its memory against the machine's."""
        where = f"in stage {self.stage}" if self.stage else "between stages"
        if self.doing:
            where += f" ({self.doing})"
        if self.signal:
            how = f"was killed by {self.signal}"
        elif self.exit_status is not None:
            how = f"exited with status {self.exit_status}"
        else:
            how = "stopped without a recorded exit (killed with its supervisor, or run without one)"
        text = f"the last attempt (pid {self.pid}) {how} {where}"
        if self.peak_rss:
            memory = f" of {gib(self.memory)} on this machine" if self.memory else ""
            limit = f", its cgroup's limit {gib(self.memory_limit)}" if self.memory_limit else ""
            text += f"; peak memory {gib(self.peak_rss)}{memory}{limit}"
        if self.signal == "SIGKILL":
            text += (
                "; a SIGKILL is most often the kernel's out-of-memory killer (`dmesg` says): lower"
                " grpo.micro_batch_size, turn on grpo.gradient_checkpointing or shorten the completions"
            )
        return text


def read_lines(path: Path) -> list[dict]:
    """Every whole line of an attempts file (none if it does not exist)."""
    if not Path(path).is_file():
        return []
    out = []
    for text in Path(path).read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(text))
    return out


def last_attempt(path: Path) -> AttemptEnd | None:
    """How the last attempt recorded in ``path`` stopped, if it stopped unfinished: None when
    nothing is recorded, or when its last line is a finished stage with no end recorded after
    it (it may still be running, or it stopped cleanly between stages)."""
    lines = read_lines(path)
    if not lines:
        return None
    attempt = lines[-1].get("attempt")
    mine = [x for x in lines if x.get("attempt") == attempt]  # by attempt id: a pid may come back
    pid = mine[-1].get("pid")
    ended = next((x for x in reversed(mine) if x.get("event") == "ended"), None)
    work = [x for x in mine if x.get("event") != "ended"]
    last = work[-1] if work else {}
    busy = last.get("event") in ("start", *_DOING)
    if ended is None and not busy:
        return None
    peak = [x["peak_rss"] for x in mine if x.get("peak_rss")]
    return AttemptEnd(
        attempt=last.get("attempt"),
        pid=pid,
        stage=last.get("stage") if busy else None,
        doing=f"{_DOING[last['event']]} {last['detail']}" if last.get("event") in _DOING else None,
        signal=(ended or {}).get("signal"),
        exit_status=(ended or {}).get("exit_status"),
        peak_rss=max(peak) if peak else None,
        memory=(ended or {}).get("memory"),
        memory_limit=(ended or {}).get("memory_limit"),
    )


def record_end(path: Path, attempt: str, pid: int, wait_status: int, rusage: resource.struct_rusage) -> dict:
    """Appends how ``attempt`` (process ``pid``) ended, from ``os.wait4``, to ``path``; returns the
    line. Its peak is the largest resident memory of the process or of a child it reaped."""
    total, limit = machine_memory()
    line: dict = {"event": "ended", "attempt": attempt, "pid": pid, "peak_rss": rusage.ru_maxrss * 1024}
    line["memory"] = total
    if limit:
        line["memory_limit"] = limit
    if os.WIFSIGNALED(wait_status):
        line["signal"] = signal_name(os.WTERMSIG(wait_status))
    else:
        line["exit_status"] = os.waitstatus_to_exitcode(wait_status)
    append(path, line)
    return line


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 35`` for a number without a name (real-time signals)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
