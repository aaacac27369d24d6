"""A trainer process per device (populora_core/engine/trainers.py), with CPU worker processes
standing in for GPUs: the adapters' updates run at once, one per worker, and write bit for bit
what one trainer writes one after another."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.config import load_config
from populora_core.engine import trainers
from populora_core.engine.trainers import DeviceTrainers, trainer_devices
from populora_core.models import load_model
from populora_core.population.adapters import create_population, load_adapter, lora_shapes, save_adapter
from populora_core.stages import learn
from populora_core.training.trainer import Trainer
from tests.core.test_learning_signal import _with_old_logprobs, play
from tests.helpers import TINY_QWEN2

STAND_INS = ["cluster.trainers=2", "model.threads=1", "model.dtype=float32"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tiny Qwen2 saved with a word-level tokenizer whose padding id is 0 (what load_model reads)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny-model")
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2)).save_pretrained(path)
    words = Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1}, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", unk_token="<unk>").save_pretrained(path)
    return path


def _spans(trainer, job: float) -> tuple[str, int, float, float]:
    """A job that holds its worker ``job`` seconds: (slot, pid, start, end)."""
    start = time.monotonic()
    time.sleep(job)
    return os.environ[trainers.SLOT_ENV], os.getpid(), start, time.monotonic()


def test_a_job_goes_to_the_next_free_worker_and_the_workers_run_at_once(model_dir):
    config = load_config(preset="cpu-tiny", overrides=STAND_INS)
    devices = trainer_devices(config, [])
    assert devices == ["cpu0", "cpu1"]
    pool = DeviceTrainers(config, model_dir, devices)
    try:
        pool.map(_spans, [0.0, 0.0])  # both workers started and their trainers built
        spans = pool.map(_spans, [1.5, 0.2, 0.2, 0.2])
    finally:
        pool.close()
    assert {s[0] for s in spans} == {"cpu0", "cpu1"} and len({s[1] for s in spans}) == 2
    long, *short = spans
    assert all(s[0] != long[0] for s in short)  # the three short jobs went to the free worker
    assert all(s[2] < long[3] for s in short)  # and ran while the long one did
    assert long[3] - long[2] >= 1.5


def test_updates_on_stand_in_devices_write_what_one_trainer_writes(model_dir, tmp_path):
    config = load_config(preset="cpu-tiny", overrides=STAND_INS)
    torch.set_num_threads(1)
    shapes = lora_shapes(TINY_QWEN2, config.population.target_modules)
    members, adapters = create_population(config.population, config.rating, shapes, config.seed)
    for adapter_id, adapter in adapters.items():
        save_adapter(adapter, tmp_path / "population" / adapter_id)
    model, tokenizer = load_model(model_dir, dtype="float32")
    one = Trainer(model, tokenizer, config.population)
    proposals, problems, rollouts, verdicts = play(config, members, np.random.default_rng(1))
    proposals, rollouts = _with_old_logprobs(proposals, one.model), _with_old_logprobs(rollouts, one.model)
    rewards = learn.reward(
        proposals=proposals, problems=problems, rollouts=rollouts, verdicts=verdicts, config=config, generation=0
    )

    def update(trainer, out: str):
        return learn.update(
            members=members, members_dir=tmp_path / "population", rewards=rewards, proposals=proposals,
            rollouts=rollouts, updated_dir=tmp_path / out, trainer=trainer, config=config, generation=0,
        )  # fmt: skip

    alone = update(one, "one")
    pool = DeviceTrainers(config, model_dir, trainer_devices(config, []))
    try:
        parallel = update(pool, "pool")
    finally:
        pool.close()
    assert alone["updated"].all() and len(alone) == len(members) == 4
    host = socket.gethostname()
    assert set(parallel["node"]) == {f"{host}/cpu0", f"{host}/cpu1"} and set(alone["node"]) == {host}
    for m in members:
        a, b = load_adapter(tmp_path / "one" / m.adapter_id), load_adapter(tmp_path / "pool" / m.adapter_id)
        for (name, fa), (_, fb) in zip(a, b, strict=True):
            assert torch.equal(fa.A, fb.A) and torch.equal(fa.B, fb.B), (m.adapter_id, name)
    assert list(parallel["loss"]) == list(alone["loss"])


def test_a_gpu_worker_sees_only_its_gpu(monkeypatch):
    """On a GPU node each trainer process is given one GPU before CUDA starts, and trains on it
    as cuda:0 (the trainer cannot follow another device)."""
    config = load_config(preset="paper-7b")
    assert trainer_devices(config, ["0"]) == []  # one GPU: this process trains
    assert trainer_devices(config, ["2", "5"]) == ["gpu2", "gpu5"]
    monkeypatch.setattr(trainers, "_WORKER", {})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")  # restored after the test
    monkeypatch.setenv(trainers.SLOT_ENV, "")
    trainers._start(config.model_dump_json(), "/nowhere", "gpu5")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5" and os.environ[trainers.SLOT_ENV] == "gpu5"
    assert trainers._WORKER["config"].model.device == "cuda:0" and trainers._WORKER["trainer"] is None
