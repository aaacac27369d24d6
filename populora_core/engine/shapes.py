"""Model shapes and token lengths: what the memory plan and vLLM's ``--max-model-len`` are
computed from, without loading a model."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # ModelShape needs neither: benchmarks/gpu_check.py runs where pydantic is absent
    from populora_core.config import RunConfig

KNOWN_SHAPES: dict[str, dict] = {
    # config.json of models a planning machine may not hold (the architecture's fields)
    "Qwen/Qwen2.5-Coder-7B": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
    },
    "Qwen/Qwen2.5-Coder-1.5B": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
}
KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B-Instruct"] = KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"]
KNOWN_SHAPES["Qwen/Qwen2.5-Coder-1.5B-Instruct"] = KNOWN_SHAPES["Qwen/Qwen2.5-Coder-1.5B"]


@dataclass(frozen=True)
class ModelShape:
    """The fields of a decoder-only transformer's config that memory depends on."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    context: int
    tied: bool

    @classmethod
    def from_config(cls, cfg: dict) -> ModelShape:
        return cls(
            hidden=cfg["hidden_size"],
            intermediate=cfg["intermediate_size"],
            layers=cfg["num_hidden_layers"],
            heads=cfg["num_attention_heads"],
            kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            vocab=cfg["vocab_size"],
            context=cfg.get("max_position_embeddings", 32768),
            tied=bool(cfg.get("tie_word_embeddings", False)),
        )

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    def module_dims(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear module of one layer, by name."""
        h, kv, i = self.hidden, self.kv_dim, self.intermediate
        return {
            "q_proj": (h, h),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (h, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def parameters(self) -> int:
        layer = sum(a * b for a, b in self.module_dims().values()) + self.hidden + 2 * self.kv_dim  # qkv biases
        layer += 2 * self.hidden  # the two norms
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * layer + embeddings + self.hidden

    def lora_parameters(self, rank: int, targets) -> int:
        dims = self.module_dims()
        return self.layers * sum(rank * (dims[t][0] + dims[t][1]) for t in targets if t in dims)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def saved_bytes_per_token(self, dtype_bytes: int, rank: int, targets, checkpointing: bool) -> float:
        """Bytes autograd keeps per sequence position for the backward (no logits, no LoRA weight
        copies: ``lora_copy_bytes``), on the trainer's path with weights of ``dtype_bytes`` (and
        autocast to them below float32). Checkpointing keeps each layer's input and the final
        norm's (which RMSNorm saves in float32). Fitted by ``benchmarks/activation_bytes.py``."""
        norm = (4 - dtype_bytes) * self.hidden  # RMSNorm saves its input in float32: the input itself in fp32
        if checkpointing:
            return (self.layers + 1) * self.hidden * dtype_bytes + norm
        return self.layers * self.layer_bytes_per_token(dtype_bytes, rank, targets) + norm

    def lora_copy_bytes(self, dtype_bytes: int, rank: int, targets) -> int:
        """Bytes a layer keeps of its float32 LoRA factors cast to the autocast dtype (none in float32)."""
        dims = self.module_dims()
        return 0 if dtype_bytes >= 4 else rank * dtype_bytes * sum(sum(dims[t]) for t in targets if t in dims)

    def update_bytes(
        self,
        dtype_bytes: int,
        rank: int,
        targets,
        micro_batch: int,
        length: int,
        completion: int,
        checkpointing: bool,
        chunk: int = 64,
    ) -> dict[str, float]:
        """Bytes by piece of one update's peak at ``micro_batch`` sequences of ``length`` tokens
        (``completion`` of them completions), weights in ``dtype_bytes``: the trainer's path."""
        tokens = micro_batch * length
        copies = self.lora_copy_bytes(dtype_bytes, rank, targets)
        saved = tokens * self.saved_bytes_per_token(dtype_bytes, rank, targets, checkpointing)
        saved += 0 if checkpointing else self.layers * copies
        recompute = tokens * self.layer_bytes_per_token(dtype_bytes, rank, targets) + copies if checkpointing else 0.0
        return {
            "base weights": self.parameters() * dtype_bytes,
            "LoRA slot, gradients, AdamW": self.lora_parameters(rank, targets) * 16,  # float32: 4 + 4 + 8
            "saved activations": saved,
            "recomputed layer": recompute,
            # reasoned, not measured: a layer's backward holds the gradient of down_proj's input while
            # it makes those of the gate's and the up projection's outputs (three intermediate-wide)
            "backward temporaries": 3 * tokens * self.intermediate * dtype_bytes,
            # the model-dtype logits (kept for the backward) and their gradient, and one chunk of
            # positions in float32 twice over (training.rollouts.target_logprobs)
            "logits": micro_batch * self.vocab * (2 * dtype_bytes * completion + 2 * 4 * min(chunk, completion)),
        }

    def layer_bytes_per_token(self, dtype_bytes: int, rank: int, targets) -> float:
        """What one layer's backward needs kept a token: 6·h + 2·kv + 4·intermediate + r per LoRA
        target elements in the weights' dtype, both RMSNorms' float32 inputs, attention's float32
        log-sum-exp per head and the norms' float32 reciprocal RMS (fitted in float32 and bf16 on the
        trainer's path to 0.3% at 6 shapes; ``tests/core/engine/test_memory.py`` checks two others)."""
        n_targets = sum(1 for t in targets if t in self.module_dims())
        elements = 6 * self.hidden + 2 * self.kv_dim + 4 * self.intermediate + n_targets * rank
        return elements * dtype_bytes + 2 * (4 - dtype_bytes) * self.hidden + 4 * self.heads + 8


def model_shape(name: str) -> ModelShape:
    """The shape of ``model.name``: its ``config.json`` where this machine has it (a local
    directory, an embedded model already fetched, the Hugging Face cache), else
    ``KNOWN_SHAPES``; never downloads."""
    cfg = _local_config(name)
    if cfg is None:
        cfg = KNOWN_SHAPES.get(name)
    if cfg is None:
        from populora_core.config import ConfigError

        raise ConfigError(
            f"no config.json for model {name!r} on this machine and no built-in shape for it: put the model in "
            f"the Hugging Face cache (hf download {name} config.json) to plan its memory"
        )
    return ModelShape.from_config(cfg)


def _local_config(name: str) -> dict | None:
    candidates: list[Path] = []
    if name.startswith("embedded:"):
        from populora_core.models import models_dir

        candidates.append(models_dir() / name.removeprefix("embedded:") / "config.json")
    elif Path(name).is_dir():
        candidates.append(Path(name) / "config.json")
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(name, "config.json")
            if isinstance(hit, str):
                candidates.append(Path(hit))
        except Exception:  # noqa: BLE001 - a malformed id simply has no cached config
            pass
    for path in candidates:
        if path.is_file():
            return json.loads(path.read_text())
    return None


# lengths --------------------------------------------------------------------------
CHAT_TEMPLATE_TOKENS = 64
"""Tokens a chat template adds around the system and user messages (Qwen2.5: about 20)."""
EVALUATION_REQUEST_TOKENS = 3072
"""The longest request of ``populora evaluate`` at its default caps (2048 new tokens for AIME,
AMC and OlympiadBench, after a problem of up to ~1,000 tokens): the servers hold it too."""
REFERENCE_FORMAT_TOKENS = 48
"""Tokens a reference's rendering adds to the proposal text it came from (fences, tags, title)."""


def _template_chars(config: RunConfig) -> tuple[int, int]:
    """Characters of the longest teacher and student prompts with empty references and problem:
    a token covers at least one character of ASCII text, so they bound the template's tokens."""
    from populora_core.problems.prompts import student_prompt, teacher_prompt
    from populora_core.problems.types import Problem

    def chars(messages) -> int:
        return sum(len(m["content"]) for m in messages) + CHAT_TEMPLATE_TOKENS

    teacher = max(chars(teacher_prompt(t, [])) for t in config.problems.task_types)
    student = max(chars(student_prompt(Problem(t, "", ("",), ("",)))) for t in config.problems.task_types)
    return teacher, student


@dataclass(frozen=True)
class Lengths:
    """Longest prompt and completion, in tokens, of each role; what vLLM must accept."""

    teacher_prompt: int
    teacher_completion: int
    student_prompt: int
    student_completion: int
    context: int
    max_model_len: int

    @property
    def longest_update_sequence(self) -> int:
        return max(self.teacher_prompt + self.teacher_completion, self.student_prompt + self.student_completion)


def lengths(config: RunConfig, shape: ModelShape) -> Lengths:
    """Token bounds of the prompts the config can build. A teacher prompt holds K references,
    each a proposal of at most ``teacher_max_new_tokens`` re-rendered; a student prompt one
    proposal and the outputs it shows (``max_output_chars`` each, one for abduction, the shown
    half for induction, counted as one: more is clipped at request time, see ``VLLMBackend``),
    and at least an evaluation's request (``EVALUATION_REQUEST_TOKENS``). Raises ConfigError
    when the longest exceeds the model's context."""
    inf = config.inference
    teacher_t, student_t = _template_chars(config)
    reference = inf.teacher_max_new_tokens + REFERENCE_FORMAT_TOKENS
    teacher_prompt = teacher_t + config.budget.references * reference
    student_prompt = student_t + reference + config.problems.max_output_chars
    need = max(teacher_prompt + inf.teacher_max_new_tokens, student_prompt + inf.student_max_new_tokens)
    if need <= shape.context:  # rounded up, to the context at most; evaluation's requests fit too
        need = min(max(256 * math.ceil(need / 256), EVALUATION_REQUEST_TOKENS), shape.context)
    if inf.max_model_len is not None:
        need = inf.max_model_len
    if need > shape.context:
        from populora_core.config import ConfigError

        raise ConfigError(
            f"the longest request this config can build needs {need} tokens (teacher prompt ≤ {teacher_prompt} "
            f"+ {inf.teacher_max_new_tokens} new, student prompt ≤ {student_prompt} + {inf.student_max_new_tokens} "
            f"new) but {config.model.name} holds {shape.context}: lower budget.references, "
            "inference.teacher_max_new_tokens or problems.max_output_chars"
        )
    return Lengths(
        teacher_prompt, inf.teacher_max_new_tokens, student_prompt, inf.student_max_new_tokens, shape.context, need
    )
