"""The adapter store: PEFT format, population snapshots, optimizer state."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.population.adapters import (
    POPULATION_TABLE,
    create_population,
    load_adapter,
    load_optimizer_state,
    lora_shapes,
    lora_shapes_from_model,
    members_from_frame,
    save_adapter,
    save_optimizer_state,
    save_population,
)
from populora_core.population.evolution import apply_operator
from tests.helpers import TINY_QWEN2

TINY = TINY_QWEN2


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(**TINY)).eval()


def test_shapes_from_config_match_the_model(tiny_model):
    targets = PopulationConfig().target_modules
    assert lora_shapes(TINY, targets) == lora_shapes_from_model(tiny_model, targets)


@pytest.mark.parametrize(("teachers", "students"), [(1, 1), (4, 4), (8, 8)])
def test_population_sizes_and_members_differ(tiny_model, teachers, students):
    config = PopulationConfig(teachers=teachers, students=students, rank=4, alpha=8)
    members, adapters = create_population(
        config, RatingConfig(), lora_shapes_from_model(tiny_model, config.target_modules), seed=0
    )
    assert [m.role for m in members].count("teacher") == teachers and len(members) == teachers + students
    name = next(iter(adapters[members[0].adapter_id].modules))
    deltas = [adapters[m.adapter_id].delta(name) for m in members]
    assert all(not torch.equal(deltas[0], d) for d in deltas[1:])
    assert all(d.abs().max() > 0 for d in deltas)


def test_peft_init_makes_identical_members(tiny_model):
    config = PopulationConfig(teachers=2, students=2, rank=4, init="peft")
    _, adapters = create_population(
        config, RatingConfig(), lora_shapes_from_model(tiny_model, config.target_modules), seed=0
    )
    assert all(f.B.abs().max() == 0 for a in adapters.values() for _, f in a)


def test_single_agent_population():
    config = PopulationConfig(teachers=1, students=1, single_agent=True, rank=4)
    members, _ = create_population(config, RatingConfig(), lora_shapes(TINY, config.target_modules), seed=0)
    assert len(members) == 1 and members[0].plays("teacher") and members[0].plays("student")


def test_a_saved_child_loads_in_peft_and_changes_the_output(tiny_model, tmp_path):
    from peft import PeftModel

    config = PopulationConfig(teachers=1, students=1, rank=4, alpha=8, init_b_std=0.2)
    members, adapters = create_population(
        config, RatingConfig(), lora_shapes_from_model(tiny_model, config.target_modules), seed=0
    )
    parent = adapters[members[0].adapter_id]
    child, _ = apply_operator("M4", [parent], torch.Generator().manual_seed(0), {"sigma": 0.5})
    save_adapter(parent, tmp_path / "parent", base_model="tiny")
    save_adapter(child, tmp_path / "child", base_model="tiny")
    cfg = json.loads((tmp_path / "child" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["peft_type"] == "LORA"

    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        base_logits = tiny_model(ids).logits
        model = PeftModel.from_pretrained(tiny_model, str(tmp_path / "parent"), adapter_name="parent")
        model.load_adapter(str(tmp_path / "child"), adapter_name="child")
        model.eval()
        model.set_adapter("parent")
        parent_logits = model(ids).logits
        model.set_adapter("child")
        child_logits = model(ids).logits
        # the loaded weights are exactly ours
        lora = model.base_model.model.model.layers[0].self_attn.q_proj
        torch.testing.assert_close(lora.lora_B["child"].weight, child.modules["model.layers.0.self_attn.q_proj"].B)
        model.unload()
    assert not torch.allclose(base_logits, parent_logits)
    assert not torch.allclose(parent_logits, child_logits)


def test_adapter_round_trip_is_exact(tmp_path):
    config = PopulationConfig(rank=4)
    _, adapters = create_population(config, RatingConfig(), lora_shapes(TINY, config.target_modules), seed=3)
    adapter = next(iter(adapters.values()))
    save_adapter(adapter, tmp_path / "a")
    loaded = load_adapter(tmp_path / "a")
    assert loaded.rank == 4 and loaded.alpha == adapter.alpha
    assert all(torch.equal(loaded.modules[n].A, f.A) and torch.equal(loaded.modules[n].B, f.B) for n, f in adapter)


def test_population_snapshot_is_atomic_and_complete(tmp_path):
    config = PopulationConfig(teachers=2, students=2, rank=4)
    members, adapters = create_population(config, RatingConfig(), lora_shapes(TINY, config.target_modules), seed=0)
    root = tmp_path / "population"
    path = save_population(root / "gen_0000", 0, members, adapters)
    assert path == root / "gen_0000" and sorted(p.name for p in root.iterdir()) == ["gen_0000"]
    loaded_members = members_from_frame(pd.read_parquet(path / POPULATION_TABLE))
    assert loaded_members == members
    for m in members:
        loaded = load_adapter(path / m.adapter_id)
        saved = adapters[m.adapter_id]
        assert all(torch.equal(loaded.modules[n].A, f.A) and torch.equal(loaded.modules[n].B, f.B) for n, f in saved)

    # optimizer state lives beside the adapter; the next snapshot links a member found in
    # `link_from` (same inodes: nothing copied) with its optimizer state, and writes the others
    sid = members[0].adapter_id
    state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 4)}},
        "param_groups": [{"lr": 1e-4, "params": [0]}],
    }
    save_optimizer_state(path / sid, state)
    child = replace(members[-1], adapter_id="child-g0001-0")
    adapters["child-g0001-0"] = adapters[members[-1].adapter_id]
    save_population(root / "gen_0001", 1, [*members[:-1], child], adapters, link_from=path)
    carried = load_optimizer_state(root / "gen_0001" / sid)
    assert torch.equal(carried["state"][0]["exp_avg"], state["state"][0]["exp_avg"])
    for name in ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt"):
        assert (root / "gen_0001" / sid / name).samefile(path / sid / name)
    assert (root / "gen_0001" / "child-g0001-0" / "adapter_model.safetensors").stat().st_nlink == 1

    # a failure while writing leaves no partial generation behind
    broken = dict(adapters)
    broken.pop(members[-1].adapter_id)
    with pytest.raises(KeyError):
        save_population(root / "gen_0002", 2, members, broken)
    assert sorted(p.name for p in root.iterdir()) == ["gen_0000", "gen_0001"]
