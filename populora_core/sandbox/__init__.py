"""Sandboxed execution of untrusted programs: one worker protocol, several isolations."""

from __future__ import annotations

from populora_core.sandbox.backends import BACKENDS, SandboxUnavailable, get_backend
from populora_core.sandbox.pool import PoolStats, SandboxPool
from populora_core.sandbox.protocol import STATUSES, Job, Result, Status

__all__ = [
    "BACKENDS",
    "STATUSES",
    "Job",
    "PoolStats",
    "Result",
    "SandboxPool",
    "SandboxUnavailable",
    "Status",
    "get_backend",
]
