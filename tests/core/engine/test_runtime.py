"""A process's runtime (populora_core/engine/runtime.py): what it sets up before the trainer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from populora_core.config import load_config
from populora_core.engine import runtime


def _unset(monkeypatch, *names: str) -> None:
    """Removes ``names`` from the environment and has them put back as they were after the test
    (``delenv`` of a name that is absent records nothing, and the runtime sets them directly)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_the_trainer_gets_expandable_segments_unless_the_user_chose_an_allocator(monkeypatch):
    """Set before the model loads (the process's first CUDA allocation on a GPU node), so the
    trainer's ever-changing activation sizes grow a segment instead of fragmenting; a user's
    own PYTORCH_CUDA_ALLOC_CONF is left as it is."""
    from populora_core import models

    class Loaded(Exception):
        pass

    seen = []

    def load_model(*_args, **_kwargs):  # what the allocator setting is when the weights load
        seen.append(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
        raise Loaded

    _unset(monkeypatch, "PYTORCH_CUDA_ALLOC_CONF", "POPULORA_TRAINER_ALLOC_CONF")
    monkeypatch.setattr(models, "load_model", load_model)
    with pytest.raises(Loaded):
        _ = runtime.Runtime(load_config(None, preset="cpu-tiny"), Path("unused")).trainer
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    with pytest.raises(Loaded):
        _ = runtime.Runtime(load_config(None, preset="cpu-tiny"), Path("unused")).trainer
    assert seen == [runtime.ALLOC_CONF, "max_split_size_mb:128"]


def test_a_vllm_server_started_after_the_trainer_does_not_inherit_its_allocator_setting(monkeypatch, tmp_path):
    """vLLM manages its own CUDA memory (its sleep mode refuses expandable segments): the
    trainer's setting stays in the trainer's process; a user's own setting is passed on."""
    import sys
    import time

    from populora_core.inference.vllm_server import _Server

    show = "import os; print(os.environ.get('PYTORCH_CUDA_ALLOC_CONF'), flush=True)"
    seen = []
    for users in (None, "max_split_size_mb:64"):
        _unset(monkeypatch, "PYTORCH_CUDA_ALLOC_CONF", "POPULORA_TRAINER_ALLOC_CONF")
        if users:
            monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", users)
        runtime.expandable_segments()
        server = _Server.spawn([sys.executable, "-c", show], {}, tmp_path / f"server-{len(seen)}.log")
        server.proc.wait(timeout=60)
        time.sleep(0.2)  # the watchdog's child flushed into the log
        seen.append(server.log_path.read_text().strip().splitlines()[-1])
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"
    assert seen == ["None", "max_split_size_mb:64"]


def test_a_gpu_update_task_gets_a_worker_of_its_own_and_a_trainer_never_follows_ray_to_another_gpu():
    """On GPUs each Ray update task runs in a fresh worker (``max_calls`` 1: a process's CUDA
    devices are fixed at its first use, and ``.options()`` drops Ray's own GPU default); on CPUs
    workers are reused warm. A worker whose trainer sits on other GPUs than its task's refuses."""
    from populora_core.engine.cluster import check_same_gpus, update_task_options

    cpu = load_config(None, preset="cpu-tiny", overrides=["cluster.engine=ray", "model.threads=1"])
    assert "max_calls" not in update_task_options(cpu) and update_task_options(cpu)["num_gpus"] == 0
    gpu = cpu.model_copy(
        update={
            "cluster": cpu.cluster.model_copy(
                update={"update": cpu.cluster.update.model_copy(update={"num_gpus": 1.0})}
            )
        }
    )
    assert update_task_options(gpu)["max_calls"] == 1 and update_task_options(gpu)["num_gpus"] == 1.0
    check_same_gpus(["3"], ["3"])
    with pytest.raises(RuntimeError, match=r"trainer is on GPU\(s\) \['3'\] but Ray gave this update GPU\(s\) \['5'\]"):
        check_same_gpus(["3"], ["5"])
