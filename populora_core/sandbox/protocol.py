"""Jobs and results exchanged with sandbox workers (JSON lines)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "sandbox_failure"]
STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "memory", "output_limit", "sandbox_failure")


@dataclass(frozen=True)
class Job:
    """One program to run.

    ``code`` is executed as a module; ``expr``, if given, is then evaluated in
    its namespace and the repr of its value comes back as ``Result.value``.
    Limits left as None take the pool's configured defaults.
    """

    code: str
    expr: str | None = None
    timeout_s: float | None = None
    memory_mb: int | None = None
    max_output_bytes: int | None = None
    salt: int = 0
    """Non-zero: the worker allocates this many objects before running the
    program, so object addresses (id, default hash) differ from an unsalted run."""


@dataclass(frozen=True)
class Result:
    """What running one job gave. ``value`` is a repr string or None."""

    status: Status
    stdout: str = ""
    value: str | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)


def encode_job(
    job_id: int, job: Job, *, timeout_s: float, memory_mb: int, max_output_bytes: int, max_procs: int
) -> bytes:
    """What a worker reads for ``job``, defaults filled in: its JSON's length in bytes, a space,
    the JSON, a newline. The length lets the worker read exactly one job from the pipe and no
    further: the jobs queued behind it stay in the kernel's pipe, out of reach of the program
    its forked child runs (a read-ahead buffer would hand them to it, copied with the memory)."""
    record = {
        "id": job_id,
        "code": job.code,
        "expr": job.expr,
        "timeout_s": job.timeout_s if job.timeout_s is not None else timeout_s,
        "memory_mb": job.memory_mb if job.memory_mb is not None else memory_mb,
        "max_output_bytes": job.max_output_bytes if job.max_output_bytes is not None else max_output_bytes,
        "max_procs": max_procs,
        "salt": job.salt,
    }
    body = json.dumps(record).encode()
    return b"%d " % len(body) + body + b"\n"


def decode_result(line: bytes) -> tuple[int | None, Result]:
    """Parses one worker output line; anything malformed becomes a sandbox failure."""
    try:
        record = json.loads(line)
        status = record["status"]
        if status not in STATUSES:
            raise ValueError(status)
        result = Result(
            status=status,
            stdout=str(record.get("stdout") or ""),
            value=record.get("value"),
            error=record.get("error"),
            seconds=float(record.get("seconds") or 0.0),
        )
        job_id = record.get("id")
        return (job_id if isinstance(job_id, int) else None), result
    except (ValueError, KeyError, TypeError):
        return None, Result(status="sandbox_failure", error="malformed worker output")
