"""Model references: embedded (from the cache), local directories, clear errors."""

from __future__ import annotations

import json
import re

import pytest

from populora_core.models import EMBEDDED, ModelUnavailable, load_model, resolve_model


def test_embedded_model_resolves_from_the_cache():
    # the first use fetches it (CI: once, then ~/.cache/populora); later uses only read the cache
    path = resolve_model("embedded:smollm2-135m-instruct")
    again = resolve_model("embedded:smollm2-135m-instruct", allow_download=False)
    assert path == again
    marker = json.loads((path / "populora-model.json").read_text())
    assert marker["gguf_sha256"] == EMBEDDED["smollm2-135m-instruct"].sha256
    model, tokenizer = load_model(path, dtype="float32")
    assert model.config.model_type == "llama" and tokenizer.eos_token == "<|im_end|>"
    assert "quantization_config" not in json.loads((path / "config.json").read_text())  # trainable


def test_missing_embedded_model_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_CACHE", str(tmp_path))
    with pytest.raises(ModelUnavailable, match=re.escape("populora models fetch embedded:qwen2.5-coder-0.5b-instruct")):
        resolve_model("embedded:qwen2.5-coder-0.5b-instruct", allow_download=False)


def test_incomplete_cache_entry_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_CACHE", str(tmp_path))
    broken = tmp_path / "models" / "smollm2-135m-instruct"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")  # no marker: an interrupted fetch
    with pytest.raises(ModelUnavailable, match="not in the cache"):
        resolve_model("embedded:smollm2-135m-instruct", allow_download=False)


def test_local_directories_and_bad_references(tmp_path, monkeypatch):
    local = tmp_path / "my-model"
    local.mkdir()
    with pytest.raises(ModelUnavailable, match=r"no config\.json"):
        resolve_model(str(local))
    (local / "config.json").write_text("{}")
    assert resolve_model(str(local)) == local
    with pytest.raises(ModelUnavailable, match="unknown embedded model"):
        resolve_model("embedded:gpt-17")
    with pytest.raises(ModelUnavailable, match="unknown model reference"):
        resolve_model("qwen")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="HF_HUB_OFFLINE"):
        resolve_model("someorg/not-downloaded-model")


def test_auto_dtype_is_bfloat16_only_where_the_hardware_computes_in_it(monkeypatch):
    """bf16 on a GPU of compute capability 8.0 or newer, and on a CPU with native bf16 where it
    measured faster than float32 (``cpu_speed``); float32 elsewhere."""
    import torch

    from populora_core import cpu_speed
    from populora_core.models import AUTO_CPU_DTYPE, resolve_dtype

    monkeypatch.delenv(AUTO_CPU_DTYPE, raising=False)  # the suite may run with it forced
    assert resolve_dtype("float16") == "float16" and resolve_dtype("bfloat16", "cpu") == "bfloat16"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    for native, faster, expected in ((True, True, "bfloat16"), (True, False, "float32"), (False, True, "float32")):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda native=native: native)
        monkeypatch.setattr(cpu_speed, "bf16_is_faster", lambda cache, faster=faster: faster)
        assert resolve_dtype("auto", "cpu") == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for capability, expected in (((8, 0), "bfloat16"), ((7, 5), "float32")):  # A100 / T4 (emulated bf16)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, c=capability: c)
        assert resolve_dtype("auto", "cuda:1") == expected


def test_the_cpu_dtype_is_measured_once_per_cpu_and_kept(monkeypatch, tmp_path):
    """The bf16/float32 timing runs once for a CPU; later processes read the answer from the cache
    (a resume resolves ``auto`` as its run began); another CPU, or an unreadable cache, measures again;
    bf16 must be clearly faster (``MARGIN``) to be chosen."""
    from populora_core import cpu_speed

    timings = iter(
        [{"float32": 1.0, "bfloat16": 0.5}, {"float32": 1.0, "bfloat16": 0.9}, {"float32": 1, "bfloat16": 2}]
    )
    calls = []
    monkeypatch.setattr(cpu_speed, "measure", lambda: calls.append(1) or next(timings))
    cache = tmp_path / "cpu-dtype.json"
    assert cpu_speed.bf16_is_faster(cache) and cpu_speed.bf16_is_faster(cache) and len(calls) == 1
    assert json.loads(cache.read_text())[cpu_speed.cpu_key()] == {"float32": 1.0, "bfloat16": 0.5}
    monkeypatch.setattr(cpu_speed, "cpu_key", lambda: "another CPU")
    assert not cpu_speed.bf16_is_faster(cache) and len(calls) == 2  # 0.9 of float32's time: not enough
    cache.write_text("{not json")
    assert not cpu_speed.bf16_is_faster(cache) and len(calls) == 3


def test_auto_cpu_dtype_can_be_forced_either_way_on_any_cpu(monkeypatch):
    import torch

    from populora_core.models import AUTO_CPU_DTYPE, resolve_dtype

    for native in (True, False):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda native=native: native)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda native=native: native)
        for forced in ("bfloat16", "float32"):
            monkeypatch.setenv(AUTO_CPU_DTYPE, forced)
            assert resolve_dtype("auto", "cpu") == forced
            assert resolve_dtype("float16", "cpu") == "float16"  # only `auto` is forced
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (8, 0))
    assert resolve_dtype("auto", "cuda:0") == "bfloat16"  # GPUs are not affected (float32 forced above)
    monkeypatch.setenv(AUTO_CPU_DTYPE, "fp16")
    with pytest.raises(ValueError, match="bfloat16 or float32"):
        resolve_dtype("auto", "cpu")


def test_adapters_name_their_base_portably(tmp_path, monkeypatch):
    from huggingface_hub.constants import HF_HUB_CACHE

    from populora_core.models import models_dir, portable_base_model

    monkeypatch.setenv("POPULORA_CACHE", str(tmp_path))
    # an embedded model, by name or by its cache directory: the hub model it was made from
    assert portable_base_model("embedded:smollm2-135m-instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert portable_base_model(str(models_dir() / "qwen2.5-coder-0.5b-instruct")) == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert all(spec.hub_id for spec in EMBEDDED.values())
    # a snapshot of the Hugging Face cache: its hub id; a hub id or a local path: as given
    snapshot = f"{HF_HUB_CACHE}/models--Qwen--Qwen2.5-Coder-7B-Instruct/snapshots/0123abcd"
    assert portable_base_model(snapshot) == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert portable_base_model("Qwen/Qwen2.5-Coder-7B-Instruct") == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert portable_base_model("./models/mine") == "./models/mine"
    assert portable_base_model("/data/models/mine") == "/data/models/mine"
    assert portable_base_model(str(models_dir() / "not-embedded")) == str(models_dir() / "not-embedded")
