"""Drift seen through the probe stage, with the real SmolLM2-135M and the real sandbox:
adapters that were never updated answer the probe exactly as the base does (drift 0),
and one update that pushes an adapter away from its greedy answers shows up as drift."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from populora_core.config import GRPOConfig, load_config
from populora_core.inference.base import BASE, GenerationRequest, SamplingParams
from populora_core.inference.hf import HFBackend
from populora_core.models import load_model, resolve_model
from populora_core.population.adapters import create_population, lora_shapes_from_model, save_adapter
from populora_core.problems import ASSISTANT_PREFILL, student_prompt
from populora_core.problems.probes import probe_problems
from populora_core.stages.probe import probe
from populora_core.training.rollouts import Rollout
from populora_core.training.trainer import Trainer

CONFIG = load_config(
    preset="cpu-tiny",
    overrides=["probe.items=2", "population.init=peft", "inference.student_max_new_tokens=16"],
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    torch.manual_seed(0)
    path = resolve_model(CONFIG.model.name)
    model, tokenizer = load_model(path, dtype="float32")
    backend = HFBackend(None, model=model, tokenizer=tokenizer, batch_size=16)
    members, adapters = create_population(
        CONFIG.population, CONFIG.rating, lora_shapes_from_model(model, CONFIG.population.target_modules), 0
    )
    root = tmp_path_factory.mktemp("adapters")
    for m in members:
        save_adapter(adapters[m.adapter_id], root / m.adapter_id)
        backend.load_adapter(m.adapter_id, root / m.adapter_id)
    trainer_model, _ = load_model(path, dtype="float32")
    return backend, Trainer(trainer_model, tokenizer, CONFIG.population), members, adapters, root


NONE = pd.DataFrame(columns=["adapter_id", "problem_id"])


@pytest.mark.heavy  # the real SmolLM2, generation and an update
def test_untrained_adapters_show_no_drift_and_an_update_does(setup, local_pool):
    backend, trainer, members, adapters, root = setup
    before = probe(members=members, base_probes=NONE, backend=backend, pool=local_pool, config=CONFIG, generation=0)
    assert set(before["adapter_id"]) == {BASE, *(m.adapter_id for m in members)}
    assert len(before) == 2 * (len(members) + 1)
    assert not before["changed"].any()  # B = 0: every member is the base model

    moved = members[-1].adapter_id
    greedy = SamplingParams(temperature=0.0, max_new_tokens=CONFIG.inference.student_max_new_tokens)
    requests = [GenerationRequest(student_prompt(p), moved, prefill=ASSISTANT_PREFILL) for p in probe_problems(2)]
    rollouts = [
        Rollout(c.prompt_token_ids, c.token_ids, c.logprobs, -1.0)  # away from what it answers now
        for (c,) in backend.generate(requests, greedy)
    ]
    grpo = GRPOConfig(learning_rate=1e-2, minibatches=2, micro_batch_size=2, gradient_checkpointing=False)
    updated, _, _ = trainer.update(adapters[moved], rollouts, grpo, None, seed=0)
    save_adapter(updated, root / "updated")
    backend.load_adapter(moved, root / "updated")

    asked: list[str] = []
    generate = backend.generate
    backend.generate = lambda requests, params, **kw: (
        asked.extend(r.adapter for r in requests) or generate(requests, params, **kw)
    )
    try:  # the base's answers come from the earlier generation's probes: nothing asks the base again
        after = probe(
            members=members, base_probes=before, backend=backend, pool=local_pool, config=CONFIG, generation=1
        )
    finally:
        del backend.generate
    assert BASE not in asked and len(asked) == 2 * len(members)
    assert (
        after[after["adapter_id"] == BASE]
        .reset_index(drop=True)
        .equals(before[before["adapter_id"] == BASE].reset_index(drop=True))
    )
    changed = after.groupby("adapter_id")["changed"].mean()
    assert changed[moved] > 0
    assert (changed.drop(moved) == 0).all()
    other = before.assign(problem_id="another item")  # base answers to other items are not reused
    again = probe(members=members, base_probes=other, backend=backend, pool=local_pool, config=CONFIG, generation=1)
    assert len(again) == len(before) and set(again["adapter_id"]) == set(before["adapter_id"])


def test_probing_can_be_turned_off_or_spaced(setup, local_pool):
    backend, _, members, _, _ = setup
    off = CONFIG.model_copy(update={"probe": CONFIG.probe.model_copy(update={"items": 0})})
    assert probe(members=members, backend=backend, pool=local_pool, config=off, generation=0, base_probes=NONE).empty
    spaced = CONFIG.model_copy(update={"probe": CONFIG.probe.model_copy(update={"every": 2})})
    assert probe(members=members, backend=backend, pool=local_pool, config=spaced, generation=1, base_probes=NONE).empty
