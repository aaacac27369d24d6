"""Run configuration: one frozen pydantic model per component.

Each component reads only its own model; ``RunConfig`` composes them. Errors
name the field and say what to change, so a broken YAML file fails before any
work starts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SandboxBackendName = Literal["local", "docker", "unsafe-subprocess"]

DEFAULT_BANNED_MODULES: tuple[str, ...] = (
    "os",
    "sys",
    "subprocess",
    "socket",
    "random",
    "time",
    "datetime",
    "threading",
    "multiprocessing",
    "asyncio",
    "shutil",
    "pathlib",
    "io",
    "tempfile",
    "glob",
    "signal",
    "ctypes",
    "importlib",
    "inspect",
    "gc",
    "resource",
    "pickle",
    "marshal",
    "builtins",
    "urllib",
    "http",
    "requests",
    "secrets",
    "uuid",
    "platform",
    "pty",
    "fcntl",
    "mmap",
    "concurrent",
    "sched",
    "select",
    "code",
    "codeop",
    "webbrowser",
    "zipimport",
)

DEFAULT_BANNED_CALLS: tuple[str, ...] = (
    "open",
    "exec",
    "eval",
    "compile",
    "__import__",
    "input",
    "breakpoint",
    "globals",
    "locals",
    "vars",
    "getattr",
    "setattr",
    "delattr",
    "exit",
    "quit",
    "help",
    "memoryview",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SandboxConfig(_Frozen):
    """Where and under which limits untrusted programs run."""

    backend: SandboxBackendName = "local"
    """Isolation: `local` (bubblewrap, the default), `docker` (a pool of hardened
    containers) or `unsafe-subprocess` (rlimits only; never chosen silently)."""
    workers: int = Field(2, ge=1, le=256)
    """Worker processes (each in its own sandbox) running programs in parallel."""
    timeout_s: float = Field(2.0, gt=0, le=600)
    """Wall-clock limit for one program; CPU time is capped one second above it."""
    memory_mb: int = Field(512, ge=64, le=65536)
    """Address-space limit for one program."""
    max_output_bytes: int = Field(65536, ge=256, le=64 * 1024 * 1024)
    """Cap on what one program prints, and on the repr of its value."""
    max_procs: int = Field(16, ge=1, le=4096)
    """Processes the sandbox uid may have at once (fork bombs stop here)."""
    python: str | None = None
    """Interpreter inside the sandbox (local backends); None picks a system
    Python 3.11 that an unprivileged uid can read (not one under /root)."""
    uid_base: int = Field(61000, ge=1000, le=2**31 - 1)
    """`local`: worker i runs as uid uid_base + i (distinct uids, so parallel
    workers cannot signal each other's programs)."""
    docker_image: str = "populora-sandbox:py3.11"
    """`docker`: the image built offline by `make sandbox-image`."""
    docker_recycle_every: int = Field(2000, ge=1)
    """`docker`: a container is replaced after this many programs."""
    docker_memory_mb: int = Field(1024, ge=128)
    """`docker`: memory limit of each container (the worker and its program)."""
    worker_grace_s: float = Field(5.0, gt=0)
    """Extra seconds beyond a job's timeout before its worker counts as hung."""

    @model_validator(mode="after")
    def _check(self) -> SandboxConfig:
        if self.docker_memory_mb < self.memory_mb:
            raise ValueError(
                f"sandbox.docker_memory_mb ({self.docker_memory_mb}) must be at least "
                f"sandbox.memory_mb ({self.memory_mb}): the container holds the program"
            )
        return self


class ProblemsConfig(_Frozen):
    """What a valid proposed problem is."""

    task_types: tuple[Literal["code_o", "code_i", "code_f"], ...] = ("code_o", "code_i", "code_f")
    """Task types in play: deduction, abduction, induction."""
    banned_modules: tuple[str, ...] = DEFAULT_BANNED_MODULES
    """Top-level modules a proposed program may not import."""
    banned_calls: tuple[str, ...] = DEFAULT_BANNED_CALLS
    """Names a proposed program may not call or reference."""
    max_program_chars: int = Field(4000, ge=50)
    """Longest accepted program source."""
    max_input_chars: int = Field(1000, ge=1)
    """Longest accepted input expression."""
    max_output_chars: int = Field(2000, ge=1)
    """Longest accepted repr of a gold output."""
    timeout_s: float = Field(2.0, gt=0)
    """Per-run time limit when validating a proposal (runs twice)."""
    code_f_min_inputs: int = Field(4, ge=2)
    """Induction proposals need at least this many distinct inputs (half are shown)."""
    answer_max_chars: int = Field(4000, ge=1)
    """Longest student answer that is checked; longer is a format error."""

    @model_validator(mode="after")
    def _check(self) -> ProblemsConfig:
        if not self.task_types:
            raise ValueError("problems.task_types must name at least one task type")
        if len(set(self.task_types)) != len(self.task_types):
            raise ValueError(f"problems.task_types has duplicates: {list(self.task_types)}")
        return self


class RunConfig(_Frozen):
    """A whole run; each field is one component's settings."""

    seed: int = 0
    sandbox: SandboxConfig = SandboxConfig()
    problems: ProblemsConfig = ProblemsConfig()
