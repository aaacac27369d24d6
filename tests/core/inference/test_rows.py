"""The decode layout (inference.rows): the same numbers as F.linear, taken only where it is meant to be."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.inference.rows import MAX_ROWS, RowsLinear, rows_layout
from tests.helpers import TINY_QWEN2


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (8, 1), (2, 8), (MAX_ROWS, 1)])
def test_few_rows_give_f_linear_within_rounding(shape, bias):
    torch.manual_seed(0)
    layer = nn.Linear(48, 96, bias=bias)
    reference = F.linear(torch.zeros(1, 48), layer.weight, layer.bias)  # before the switch
    rows_layout(layer)
    assert type(layer) is RowsLinear and isinstance(layer, nn.Linear)
    x = torch.randn(*shape, 48)
    with torch.no_grad():
        got = layer(x)
        want = F.linear(x, layer.weight, layer.bias)
    assert got.shape == want.shape == (*shape, 96)
    assert got.is_contiguous()  # a transposed view slowed every operation after it (measured)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer(torch.zeros(1, 48)), reference)


def test_prefill_rows_and_training_take_f_linear_exactly():
    torch.manual_seed(0)
    layer = nn.Linear(32, 64)
    rows_layout(layer)
    many = torch.randn(MAX_ROWS + 1, 32)
    with torch.no_grad():
        assert torch.equal(layer(many), F.linear(many, layer.weight, layer.bias))
    few = torch.randn(4, 32)
    assert torch.equal(layer(few), F.linear(few, layer.weight, layer.bias))  # gradients on: training


def test_a_model_keeps_its_parameters_and_peft_still_wraps_its_layers():
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2))
    names = list(model.state_dict())
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    assert rows_layout(model) == linears
    assert list(model.state_dict()) == names
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, before, rtol=1e-5, atol=1e-5)
    peft = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    assert any("q_proj.lora_A" in n for n, _ in peft.named_parameters())
