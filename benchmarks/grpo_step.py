"""Tokens per second of one policy update: ours against TRL's GRPOTrainer.

The same model, LoRA config (r = 32, α = 64 on q, k, v, o, gate, up, down) and
batch (16 sequences of random prompt and completion tokens, fixed seed, random
advantages) go through one update in the same process:
- ours: ``training.trainer.update_adapter`` (micro-batches of 4, chunked
  log-probs, bf16 autocast over fp32 LoRA weights);
- TRL: ``GRPOTrainer.compute_loss`` on the same micro-batches (its own
  log-prob and loss code, loss_type "dapo" = token mean over the batch, as ours),
  backward, then its optimizer's step.
TRL is only a benchmark extra (``pip install trl==1.16.0``).

    python benchmarks/grpo_step.py [--quick] [--model REF]

--quick: SmolLM2-135M and shorter sequences. Prints one final JSON line with
``speed_ratio_vs_trl`` (our tokens/s over TRL's).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time

import torch

from populora_core.config import GRPOConfig
from populora_core.models import load_model, resolve_model
from populora_core.training.rollouts import Rollout
from populora_core.training.trainer import update_adapter

CHECKPOINTING = False
# Gradient checkpointing off on both sides: TRL's Trainer only switches it on inside
# train(), and when switched on by hand here its compute_loss path did not recompute
# (same speed as off), so "on" would compare our recomputation against none.
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def log(msg: str) -> None:
    print(f"[grpo_step] {msg}", file=sys.stderr, flush=True)


def make_batch(vocab: int, n: int, prompt_len: int, completion_len: int, seed: int) -> list[Rollout]:
    g = torch.Generator().manual_seed(seed)
    batch = []
    for i in range(n):
        c_len = completion_len - int(torch.randint(0, completion_len // 4, (1,), generator=g))
        batch.append(
            Rollout(
                prompt_ids=torch.randint(100, vocab, (prompt_len,), generator=g).tolist(),
                completion_ids=torch.randint(100, vocab, (c_len,), generator=g).tolist(),
                old_logprobs=(-torch.rand(c_len, generator=g) * 3).tolist(),
                advantage=float(torch.randn((), generator=g)) if i % 4 else 0.5,
            )
        )
    return batch


def ours(model, batch, micro: int, repeats: int) -> float:
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, target_modules=TARGETS), adapter_name="bench")
    config = GRPOConfig(micro_batch_size=micro, gradient_checkpointing=CHECKPOINTING, learning_rate=1e-5)
    tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
    update_adapter(peft_model, "bench", batch[:micro], config)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        update_adapter(peft_model, "bench", batch, config)
        rates.append(tokens / (time.perf_counter() - t0))
    return statistics.median(rates)


def trl(model, tokenizer, batch, micro: int, repeats: int) -> float:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    with tempfile.TemporaryDirectory() as out:
        args = TRLConfig(
            output_dir=out,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=len(batch) // micro,
            num_generations=micro,
            max_completion_length=max(len(r.completion_ids) for r in batch),
            gradient_checkpointing=True,
            learning_rate=1e-5,
            beta=0.0,
            loss_type="dapo",
            report_to=[],
            use_cpu=True,
            bf16=next(model.parameters()).dtype == torch.bfloat16,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
            args=args,
            train_dataset=Dataset.from_dict({"prompt": ["x"] * len(batch)}),
            processing_class=tokenizer,
            peft_config=LoraConfig(r=32, lora_alpha=64, target_modules=TARGETS),
        )
        trainer.create_optimizer_and_scheduler(num_training_steps=10)
        trainer.model.train()
        if CHECKPOINTING:  # what Trainer.train() would switch on; the same setting as ours
            trainer.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        log(f"TRL gradient checkpointing: {getattr(trainer.model, 'is_gradient_checkpointing', None)}")
        trainer.current_gradient_accumulation_steps = len(batch) // micro
        pad = tokenizer.pad_token_id or 0
        total_completion = torch.tensor(float(sum(len(r.completion_ids) for r in batch)))

        def inputs(chunk):
            p_len = max(len(r.prompt_ids) for r in chunk)
            c_len = max(len(r.completion_ids) for r in chunk)
            prompt_ids = torch.full((len(chunk), p_len), pad)
            prompt_mask = torch.zeros((len(chunk), p_len), dtype=torch.long)
            completion_ids = torch.full((len(chunk), c_len), pad)
            completion_mask = torch.zeros((len(chunk), c_len), dtype=torch.long)
            old = torch.zeros((len(chunk), c_len))
            for b, r in enumerate(chunk):  # TRL pads prompts on the left, completions on the right
                prompt_ids[b, p_len - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
                prompt_mask[b, p_len - len(r.prompt_ids) :] = 1
                completion_ids[b, : len(r.completion_ids)] = torch.tensor(r.completion_ids)
                completion_mask[b, : len(r.completion_ids)] = 1
                old[b, : len(r.completion_ids)] = torch.tensor(r.old_logprobs)
            return {
                "prompt_ids": prompt_ids,
                "prompt_mask": prompt_mask,
                "completion_ids": completion_ids,
                "completion_mask": completion_mask,
                "advantages": torch.tensor([r.advantage for r in chunk]),
                "old_per_token_logps": old,
                "num_items_in_batch": total_completion,
            }

        prepared = [inputs(batch[s : s + micro]) for s in range(0, len(batch), micro)]
        tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)

        def step(chunks):
            trainer.optimizer.zero_grad()
            for x in chunks:
                trainer.compute_loss(trainer.model, x).backward()
            torch.nn.utils.clip_grad_norm_([p for p in trainer.model.parameters() if p.requires_grad], 1.0)
            trainer.optimizer.step()

        step(prepared[:1])  # warm-up
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step(prepared)
            rates.append(tokens / (time.perf_counter() - t0))
        return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    ref = args.model or ("embedded:smollm2-135m-instruct" if args.quick else "embedded:qwen2.5-coder-0.5b-instruct")
    prompt_len, completion_len = (64, 96) if args.quick else (128, 192)
    repeats = args.repeats or (1 if args.quick else 2)
    model, tokenizer = load_model(resolve_model(ref), dtype=args.dtype)
    batch = make_batch(model.config.vocab_size, 16, prompt_len, completion_len, seed=0)
    tokens = sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch)
    log(f"model {ref} ({args.dtype}), batch 16 sequences, {tokens} tokens, micro-batches of 4")
    ours_rate = ours(copy.deepcopy(model), batch, 4, repeats)
    log(f"ours: {ours_rate:.1f} tokens/s")
    trl_rate = trl(copy.deepcopy(model), tokenizer, batch, 4, repeats)
    log(f"TRL GRPOTrainer: {trl_rate:.1f} tokens/s")
    print(
        json.dumps(
            {
                "quick": args.quick,
                "model": ref,
                "dtype": args.dtype,
                "batch_tokens": tokens,
                "ours_tokens_per_s": round(ours_rate, 1),
                "trl_tokens_per_s": round(trl_rate, 1),
                "speed_ratio_vs_trl": round(ours_rate / trl_rate, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
