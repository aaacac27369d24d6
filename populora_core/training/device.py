"""The update on its device: the precision it computes in (``autocast_for``: bf16/fp16 autocast
without PEFT's float32 copies of the LoRA inputs), activation checkpointing on and off, and
the memory it hands back when it is done (``return_freed_memory``)."""

from __future__ import annotations

from contextlib import ExitStack, nullcontext

import torch


def enable_checkpointing(model, wanted: bool) -> bool:
    """Turns activation checkpointing on when ``wanted`` and the model supports it."""
    if not (wanted and hasattr(model, "activation_checkpointing_enable")):
        return False
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return True


def autocast_for(model):
    """A bf16/fp16 base: LoRA master weights stay fp32 (for AdamW), matmuls run in the low
    precision (``LowPrecision``); a float32 base: nothing."""
    low = next(model.parameters()).dtype
    device = next(model.parameters()).device.type
    return LowPrecision(model, low, device) if low in (torch.bfloat16, torch.float16) else nullcontext()


class LowPrecision:
    """Autocast to the base's dtype for the trainer's passes, with PEFT's cast of each LoRA
    input to float32 (its weights' dtype) turned off: autocast casts that copy straight back, so
    the numbers are the same (tests/core/training/test_trainer.py checks an update bit for bit),
    but each target module kept a float32 and a low-precision copy of its input for the backward
    (under bf16 on Qwen2 shapes, benchmarks/activation_bytes.py: 10–17% of the saved activations
    without checkpointing). Reusable, as ``torch.autocast`` is; not re-entrant."""

    def __init__(self, model, dtype: torch.dtype, device: str) -> None:
        self.model, self.dtype, self.device = model, dtype, device
        self._open: list[ExitStack] = []

    def __enter__(self) -> None:
        from peft.helpers import disable_input_dtype_casting

        stack = ExitStack()
        stack.enter_context(torch.autocast(device_type=self.device, dtype=self.dtype))
        stack.enter_context(disable_input_dtype_casting(self.model))
        self._open.append(stack)

    def __exit__(self, *exc) -> bool | None:
        return self._open.pop().__exit__(*exc)


def back_to_eval(model, params, checkpointing: bool) -> None:
    """The model as generation and the next update expect it: eval mode, nothing trainable."""
    if checkpointing:
        model.activation_checkpointing_disable()
    model.eval()
    for p in params:
        p.requires_grad_(False)


def return_freed_memory() -> None:
    """Hands the update's freed activations back: on a GPU, torch's cached blocks to the driver
    (a vLLM server sharing the GPU, or one started after a resume, finds them free); on the
    CPU, glibc's free lists to the OS. glibc keeps them otherwise: seen here, a cpu-arms-race
    process (two model copies) still held 8.7 GB while it generated after its update, with
    two such runs side by side on 24 GB. A no-op where glibc is absent."""
    import ctypes
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
