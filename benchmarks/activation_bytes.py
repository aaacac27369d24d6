"""Bytes autograd keeps for the trainer's log-prob pass under bf16, against the memory plan's
per-token figure (``engine.shapes.ModelShape.saved_bytes_per_token``, with the LoRA factors'
bf16 copies, ``lora_copy_bytes``, spread over the tokens).

    python benchmarks/activation_bytes.py [--quick]

A bf16 Qwen2 of random weights with float32 LoRA on every target module, under the trainer's
autocast (``training.device``), the trainer's whole-sequence path, 2 sequences of 64 prompt and
32 completion tokens; every distinct storage autograd saves is counted (parameters and the
vocabulary-wide logits left out: the plan counts those apart). For each of four shapes, ranks 8
and 16, with and without activation checkpointing, with PEFT's cast of each LoRA input to
float32 (PEFT's default) and without it (what the trainer does): the ratio measured / planned.
The last line is the figures as JSON (min and max ratio per setting).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SHAPES = [  # the shapes the plan's per-layer figures were fitted on (tests/core/engine/test_memory.py checks others)
    {"hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 2, "num_attention_heads": 4},
    {"hidden_size": 384, "intermediate_size": 1000, "num_hidden_layers": 2, "num_attention_heads": 6},
    {"hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 2, "num_attention_heads": 8},
    {"hidden_size": 320, "intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 5},
    {"hidden_size": 256, "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 4},
    {"hidden_size": 448, "intermediate_size": 896, "num_hidden_layers": 2, "num_attention_heads": 7},
]
KV_HEADS = (2, 2, 4, 1, 4, 1)
TOKENS = 2 * (64 + 32)  # saved_bytes_per_token's sequences


def saved_bytes_per_token(cfg: dict, rank: int, checkpointing: bool, peft_cast: bool, prompt=64, completion=32):
    """(bytes saved per token without the logits, vocabulary-wide bytes) for one setting."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from populora_core.training.device import LowPrecision, enable_checkpointing
    from populora_core.training.rollouts import Rollout, whole_sequence_logprobs

    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(**cfg)).to(torch.bfloat16)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=16, target_modules=list(TARGETS), lora_dropout=0.0))
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    rows = [Rollout(list(range(2, 2 + prompt)), list(range(7, 7 + completion)), [-1.0] * completion, 1.0)] * 2
    model.train()
    enable_checkpointing(model, checkpointing)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen, vocab = {}, {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
            if t.dim() >= 2 and t.shape[-1] == cfg["vocab_size"]:
                vocab[s.data_ptr()] = s.nbytes()
        return t

    precision = torch.autocast("cpu", dtype=torch.bfloat16) if peft_cast else LowPrecision(model, torch.bfloat16, "cpu")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), precision:
        whole_sequence_logprobs(model, rows, 0, 16)
    tokens = len(rows) * (prompt + completion)
    return (sum(seen.values()) - sum(vocab.values())) / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one shape, rank 8")
    args = parser.parse_args()
    import torch

    from populora_core.engine.memory import ModelShape

    torch.set_num_threads(2)
    shapes = SHAPES[:1] if args.quick else SHAPES
    ratios: dict[str, list[float]] = {}
    for shape, kv in zip(shapes, KV_HEADS, strict=False):
        cfg = shape | {"num_key_value_heads": kv, "vocab_size": 3001, "max_position_embeddings": 4096}
        cfg["tie_word_embeddings"] = False
        planned = ModelShape.from_config(cfg)
        for rank in (8,) if args.quick else (8, 16):
            for checkpointing in (False, True):
                for peft_cast in (True, False):
                    measured = saved_bytes_per_token(cfg, rank, checkpointing, peft_cast)
                    copies = 0 if checkpointing else planned.layers * planned.lora_copy_bytes(2, rank, TARGETS)
                    per_token = planned.saved_bytes_per_token(2, rank, TARGETS, checkpointing) + copies / TOKENS
                    ratio = measured / per_token
                    key = ("checkpointing" if checkpointing else "no_checkpointing") + (
                        "_peft_cast" if peft_cast else "_no_cast"
                    )
                    ratios.setdefault(key, []).append(ratio)
                    print(
                        f"h={cfg['hidden_size']} r={rank} {key}: {measured:.0f} B/token, ×{ratio:.3f} the plan's",
                        file=sys.stderr,
                    )
    figures = {f"{k}_ratio_min": round(min(v), 3) for k, v in ratios.items()}
    figures |= {f"{k}_ratio_max": round(max(v), 3) for k, v in ratios.items()}
    print(json.dumps({"settings_per_mode": len(next(iter(ratios.values()))), **dict(sorted(figures.items()))}))


if __name__ == "__main__":
    main()
