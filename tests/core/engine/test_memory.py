"""The memory plan (populora_core/engine/memory.py): its activation figures against what autograd
really keeps on the trainer's path, its length bounds against the real tokenizer, and its
placement and refusals for paper-7b on one GPU and on eight."""

from __future__ import annotations

import json
import random
import string
from contextlib import nullcontext

import pytest
import torch

from populora_core.config import ConfigError, load_config
from populora_core.engine import memory, placement
from populora_core.engine.memory import ModelShape, PlanError, lengths, make_plan
from populora_core.training.device import LowPrecision, enable_checkpointing
from populora_core.training.rollouts import Rollout, whole_sequence_logprobs

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
UNSEEN = {
    "hidden_size": 384,
    "intermediate_size": 1000,
    "num_hidden_layers": 3,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "vocab_size": 3000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
# two shapes the per-layer figures were not fitted on (benchmarks/activation_bytes.py's SHAPES)
UNSEEN_2 = UNSEEN | {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3}
UNSEEN_3 = UNSEEN | {"hidden_size": 640, "intermediate_size": 1728, "num_attention_heads": 10, "num_key_value_heads": 5}


def _peft_model(cfg: dict, rank: int, dtype: torch.dtype, targets=TARGETS):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(**cfg)).to(dtype)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=16, target_modules=list(targets), lora_dropout=0.0))
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def _saved_bytes(model, rollouts, checkpointing: bool, dtype: torch.dtype = torch.float32) -> tuple[int, int]:
    """(bytes of the distinct storages autograd keeps for the backward of the trainer's log-prob
    pass, parameters left out; the part of them that is vocabulary-wide), under the trainer's
    autocast below float32."""
    model.train()
    enable_checkpointing(model, checkpointing)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    vocab = model.config.vocab_size
    seen: dict[int, int] = {}
    wide: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
            if t.dim() >= 2 and t.shape[-1] == vocab:
                wide[s.data_ptr()] = s.nbytes()
        return t

    precision = LowPrecision(model, dtype, "cpu") if dtype != torch.float32 else nullcontext()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), precision:
            whole_sequence_logprobs(model, rollouts, 0, 16)
    finally:
        if checkpointing:
            model.activation_checkpointing_disable()
        model.eval()
    return sum(seen.values()), sum(wide.values())


@pytest.mark.parametrize("cfg", [UNSEEN_2, UNSEEN_3], ids=["h576", "h640"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["whole", "checkpointed"])
def test_saved_activations_match_autograd_on_unseen_shapes(cfg, dtype, checkpointing):
    """The plan's figure for what autograd keeps, against autograd's saved tensors on the trainer's
    path (bf16: weights in bf16, float32 LoRA, the trainer's autocast), at shapes it was not fitted on."""
    rank, d = 8, torch.finfo(dtype).bits // 8
    model = _peft_model(cfg, rank, dtype)
    shape = ModelShape.from_config(cfg)
    b, prompt, completion = 2, 80, 40
    rollouts = [Rollout(list(range(2, 2 + prompt)), list(range(7, 7 + completion)), [-1.0] * completion, 1.0)] * b
    measured, wide = _saved_bytes(model, rollouts, checkpointing, dtype)
    tokens = b * (prompt + completion)
    predicted = tokens * shape.saved_bytes_per_token(d, rank, TARGETS, checkpointing)
    predicted += 0 if checkpointing else shape.layers * shape.lora_copy_bytes(d, rank, TARGETS)
    assert wide == b * (completion + 1) * shape.vocab * d  # the logits in their own dtype, nothing wider
    assert measured - wide == pytest.approx(predicted, rel=0.02), (measured - wide, predicted)
    if checkpointing:  # and the figure is the one that shrinks: off, it is several times larger
        assert shape.saved_bytes_per_token(d, rank, TARGETS, False) > 3 * shape.saved_bytes_per_token(
            d, rank, TARGETS, True
        )


def test_prompt_bounds_hold_for_the_longest_prompts_the_real_tokenizer_builds():
    """References of as many tokens as a teacher may write, a student problem with the longest
    output shown: the real (Qwen2.5) tokenizer's counts stay under the plan's bounds."""
    from transformers import AutoTokenizer

    from populora_core.inference.base import GenerationRequest, encode_prompt
    from populora_core.models import resolve_model
    from populora_core.problems.prompts import student_prompt, teacher_prompt
    from populora_core.problems.types import Problem

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("embedded:qwen2.5-coder-0.5b-instruct"))
    config = load_config(preset="paper-7b")
    shape = memory.KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"]
    bound = lengths(config, ModelShape.from_config(shape))
    rng = random.Random(0)
    cap = config.inference.teacher_max_new_tokens

    def word() -> str:
        return "".join(rng.choice(string.ascii_letters + "()[]=+:,.") for _ in range(rng.randint(1, 9)))

    def text_of(tokens: int) -> str:  # ASCII code-like text: the fewest random words that make ``tokens`` tokens
        words = [word()]
        while len(tokenizer(" ".join(words))["input_ids"]) < tokens:  # doubling, then bisection: a few dozen calls
            words += [word() for _ in words]
        low, high = 1, len(words)
        while low < high:
            mid = (low + high) // 2
            low, high = (mid + 1, high) if len(tokenizer(" ".join(words[:mid]))["input_ids"]) < tokens else (low, mid)
        return " ".join(words[:low])

    program = text_of(cap - 40)
    refs = [Problem("code_f", program, ("1", "2", "3", "4"), ("1", "2", "3", "4"), message="m")] * 3
    teacher = encode_prompt(tokenizer, GenerationRequest(teacher_prompt("code_f", refs)))
    assert len(teacher) <= bound.teacher_prompt
    output = repr("x" * (config.problems.max_output_chars - 2))
    student = encode_prompt(tokenizer, GenerationRequest(student_prompt(Problem("code_i", program, ("1",), (output,)))))
    assert len(student) <= bound.student_prompt
    assert bound.max_model_len >= max(len(teacher) + cap, len(student) + config.inference.student_max_new_tokens)


def test_a_config_longer_than_the_model_context_is_refused_at_config_time():
    config = load_config(preset="paper-7b", overrides=["budget.references=40"])
    with pytest.raises(ConfigError, match=r"needs .* tokens .* holds 32768"):
        lengths(config, memory.model_shape("Qwen/Qwen2.5-Coder-7B"))


@pytest.fixture(scope="module")
def paper():
    return load_config(preset="paper-7b")


def test_paper_7b_on_one_gpu_shares_it_by_the_trainers_peak(paper):
    for gib in (79.2, 139.8):
        plan = make_plan(paper, 1, gib)
        assert plan.vllm_gpus == [0] and plan.trainer_gpu == 0
        used = plan.trainer.total + plan.vllm_utilization * gib + memory.SHARED_MARGIN_GIB
        assert 0.99 * gib - 1e-6 <= used <= gib  # peak, share (in hundredths) and margin fill the GPU, never more
        assert plan.kv_cache_gib >= plan.kv_min_gib
    assert make_plan(paper, 1, 139.8).concurrent_sequences > make_plan(paper, 1, 79.2).concurrent_sequences


def _placed(config, placement: str):
    return config.model_copy(update={"cluster": config.cluster.model_copy(update={"placement": placement})})


def test_paper_7b_dedicated_on_eight_gpus_puts_vllm_on_the_other_seven(paper):
    dedicated = _placed(paper, "dedicated")
    plan = make_plan(dedicated, 8, 79.2)
    assert plan.trainer_gpu == 0 and plan.trainer_gpus == [0] and plan.vllm_gpus == [1, 2, 3, 4, 5, 6, 7]
    assert plan.vllm_utilization == memory.DEDICATED_UTILIZATION
    moved = dedicated.model_copy(update={"model": paper.model.model_copy(update={"device": "cuda:3"})})
    assert make_plan(moved, 8, 79.2).vllm_gpus == [0, 1, 2, 4, 5, 6, 7]


def test_paper_7b_on_eight_gpus_puts_a_server_and_a_trainer_on_every_gpu(paper):
    """``auto`` colocates where each server keeps room for a longest request beside a trainer (80 GB),
    and falls back to one trainer and seven whole servers where it would not (48 GB)."""
    plan = make_plan(paper, 8, 79.2)
    assert plan.trainer_gpus == plan.vllm_gpus == list(range(8))
    assert plan.vllm_utilization == make_plan(paper, 1, 79.2).vllm_utilization < memory.DEDICATED_UTILIZATION
    assert plan.kv_cache_gib >= plan.kv_min_gib
    small = make_plan(paper, 8, 48.0)
    assert small.trainer_gpus == [0] and small.vllm_gpus == list(range(1, 8))
    with pytest.raises(PlanError, match="KV cache"):  # asked for, it is refused with the numbers
        make_plan(_placed(paper, "colocated"), 8, 48.0)


def test_the_timeline_keeps_every_gpu_of_a_colocated_node_at_work(paper):
    """`populora plan`'s timeline: colocated on 8 GPUs every GPU generates and the updates run 8 at
    once; dedicated, the update phase holds one GPU while seven wait, several times as long."""
    from populora_core.engine.timeline import format_timeline, timeline

    shape = memory.model_shape("Qwen/Qwen2.5-Coder-7B")
    together = {p.name: p for p in timeline(paper, make_plan(paper, 8, 79.2), shape)}
    apart = {p.name: p for p in timeline(paper, make_plan(_placed(paper, "dedicated"), 8, 79.2), shape)}
    alone = {p.name: p for p in timeline(paper, make_plan(paper, 1, 79.2), shape)}
    assert together["solve"].busy_gpus == 8 and apart["solve"].busy_gpus <= 7
    assert apart["update"].busy_gpus == 1 and together["update"].busy_gpus > 4
    assert together["update"].seconds * 4 < apart["update"].seconds == pytest.approx(alone["update"].seconds)
    assert alone["solve"].seconds > 5 * together["solve"].seconds  # 8 servers against one share of one GPU
    text = format_timeline(paper, make_plan(paper, 8, 79.2), shape)
    assert "update" in text and "GPU-busy share" in text


def test_paper_7b_weights_are_its_parameter_count(paper):
    shape = memory.model_shape("Qwen/Qwen2.5-Coder-7B")
    assert shape.parameters() == pytest.approx(7.62e9, rel=0.01)  # the model card's 7.61B
    assert shape.kv_bytes_per_token(2) == 2 * 28 * 4 * 128 * 2


@pytest.mark.parametrize(
    ("gpus", "gib", "overrides", "says"),
    [
        (1, 40.0, [], "the trainer alone needs 4\\d\\.\\d GiB on a 40.0 GiB GPU"),
        (1, 50.0, [], "KV cache; one request of max_model_len"),
        (1, 79.2, ["grpo.gradient_checkpointing=false"], "needs 2\\d\\d\\.\\d GiB .*gradient_checkpointing"),
        (1, 79.2, ["inference.gpu_memory_utilization=0.9"], "leaves 7.9 GiB of the GPU they share"),
        (8, 24.0, [], "the trainer needs"),
    ],
)
def test_configs_that_cannot_fit_are_refused_with_their_numbers(gpus, gib, overrides, says):
    config = load_config(preset="paper-7b", overrides=overrides)
    with pytest.raises(PlanError, match=f"(?s){says}"):
        make_plan(config, gpus, gib)


def test_vllm_settings_map_the_plan_onto_the_gpus_this_process_sees(paper, monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(memory.KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"]))
    monkeypatch.setattr(placement, "machine_gpus", lambda: (4, 79.2))
    monkeypatch.setattr(placement, "machine_dtype", lambda config: "bfloat16")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # e.g. Ray gave this process four GPUs
    settings = placement.vllm_settings(_placed(paper, "dedicated"), tmp_path)
    assert settings["gpus"] == ["5", "6", "7"] and settings["gpu_memory_utilization"] == 0.9
    colocated = placement.vllm_settings(paper, tmp_path)
    assert colocated["gpus"] == ["4", "5", "6", "7"] and colocated["gpu_memory_utilization"] < 0.5
    assert settings["max_model_len"] == make_plan(paper, 4, 79.2).max_model_len
    cpu = load_config(preset="cpu-small", overrides=["inference.backend=vllm"])
    assert "gpus" not in placement.vllm_settings(cpu, tmp_path)  # no plan on the CPU


def test_no_gpu_with_a_cuda_device_is_refused(paper, monkeypatch):
    monkeypatch.setattr(placement, "machine_gpus", lambda: (0, 0.0))
    with pytest.raises(PlanError, match="torch sees no GPU"):
        placement.machine_plan(paper)


def test_a_ray_run_is_planned_by_its_actors_not_by_a_driver_without_gpus(paper, monkeypatch):
    monkeypatch.setattr(placement, "machine_gpus", lambda: (0, 0.0))
    ray = load_config(
        preset="paper-7b",
        overrides=["cluster.engine=ray", "model.threads=4"]
        + [f"cluster.{k}.num_gpus=0.5" for k in ("generation", "update")],
    )
    assert placement.machine_plan(ray) is None
    with pytest.raises(PlanError, match="torch sees no GPU"):
        placement.machine_plan(ray, here=True)


def test_an_update_hands_cached_gpu_memory_back(monkeypatch):
    """After an update the trainer empties torch's CUDA cache, so vLLM on the same GPU (or one
    started after a resume) finds the memory free. No GPU here: torch.cuda is told one exists
    and the call is recorded."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from gpu_check import TINY, StandInTokenizer, build_model, random_adapter

    from populora_core.config import GRPOConfig
    from populora_core.training.trainer import Trainer

    model = build_model(TINY, "cpu", torch.float32)
    adapter = random_adapter(model, 4, 8.0, torch.Generator().manual_seed(0))
    trainer = Trainer(
        model, StandInTokenizer(TINY["vocab_size"]), SimpleNamespace(rank=4, alpha=8.0, target_modules=TARGETS)
    )
    rollouts = [Rollout([3, 4, 5], [6, 7], [-6.0, -6.0], a) for a in (1.0, -1.0)]
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    trainer.update(adapter, rollouts, GRPOConfig(gradient_checkpointing=False), None, seed=0)
    assert calls == ["empty_cache"]


def test_weights_in_float32_double_what_the_plan_holds_for_them(paper):
    """``model.dtype: auto`` is float32 on a GPU older than compute capability 8.0: the plan
    counts the trainer's and vLLM's weights and vLLM's KV cache in it."""
    bf16, fp32 = make_plan(paper, 8, 139.8), make_plan(paper, 8, 139.8, dtype="float32")
    assert fp32.vllm.pieces["base weights"] == pytest.approx(2 * bf16.vllm.pieces["base weights"])
    assert fp32.trainer.pieces["base weights"] == pytest.approx(2 * bf16.trainer.pieces["base weights"])
    assert fp32.kv_min_gib == pytest.approx(2 * bf16.kv_min_gib)
    assert fp32.kv_cache_gib < bf16.kv_cache_gib


def test_the_plan_counts_the_lora_slots_the_server_is_started_with(paper, tmp_path):
    from populora_core.inference.vllm import server_argv, vllm_rank

    members = paper.population.teachers + paper.population.students
    argv = server_argv(
        tmp_path / "python", tmp_path, max_loras=members, max_lora_rank=paper.population.rank,
        dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=None, enforce_eager=False,
    )  # fmt: skip
    slots = int(argv[argv.index("--max-loras") + 1])
    shape = memory.model_shape(paper.model.name)
    per_slot = shape.lora_parameters(vllm_rank(paper.population.rank), paper.population.target_modules) * 2
    assert make_plan(paper, 8, 79.2).vllm.pieces["LoRA slots"] == pytest.approx(slots * per_slot / memory.GIB)


def _ray(generation: float, update: float):
    return load_config(
        preset="paper-7b",
        overrides=[
            "cluster.engine=ray",
            "model.threads=4",
            f"cluster.generation.num_gpus={generation}",
            f"cluster.update.num_gpus={update}",
        ],
    )


def test_a_ray_inference_actor_plans_the_trainers_ray_may_place_beside_it(monkeypatch, tmp_path):
    """An actor holding whole GPUs has them to itself; one holding half a GPU shares it with as many
    update tasks as Ray's fractions let land there, and leaves each its peak."""
    monkeypatch.setattr(placement, "machine_gpus", lambda: (1, 139.8))
    monkeypatch.setattr(placement, "machine_dtype", lambda config: "bfloat16")
    (tmp_path / "config.json").write_text(json.dumps(memory.KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"]))
    assert memory.trainers_beside_actor(_ray(1, 1)) == 0
    assert memory.trainers_beside_actor(_ray(0.5, 0.5)) == 1
    assert memory.trainers_beside_actor(_ray(0.5, 0.25)) == 2
    whole = placement.vllm_settings(_ray(1, 1), tmp_path, ray_actor=True)
    assert whole["gpus"] == ["0"] and whole["gpu_memory_utilization"] == memory.DEDICATED_UTILIZATION
    half = placement.vllm_settings(_ray(0.5, 0.5), tmp_path, ray_actor=True)
    local_one_gpu = make_plan(_ray(0.5, 0.5), 1, 139.8)
    assert half["gpu_memory_utilization"] == local_one_gpu.vllm_utilization < memory.DEDICATED_UTILIZATION
    assert memory.trainers_beside_actor(_ray(0.2, 0.2)) == 4
    with pytest.raises(PlanError, match=r"4 trainers alone need 1[67]\d\.\d GiB"):
        placement.vllm_settings(_ray(0.2, 0.2), tmp_path, ray_actor=True)  # 4 × 41 GiB beside vLLM: no


def test_a_ray_update_task_refuses_fractions_that_stack_trainers_beyond_its_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(placement, "machine_dtype", lambda config: "bfloat16")
    (tmp_path / "config.json").write_text(json.dumps(memory.KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"]))
    monkeypatch.setattr(placement, "machine_gpus", lambda: (1, 139.8))
    placement.check_ray_update(_ray(1, 1), tmp_path)  # one trainer per GPU: fits
    placement.check_ray_update(_ray(0.5, 0.5), tmp_path)  # a trainer beside vLLM's planned share: fits
    with pytest.raises(PlanError, match=r"4 update tasks on one GPU need 1[67]\d\.\d GiB"):
        placement.check_ray_update(_ray(1, 0.25), tmp_path)  # four 41 GiB trainers on 140 GiB
    monkeypatch.setattr(placement, "machine_gpus", lambda: (1, 79.2))
    with pytest.raises(PlanError, match="2 update tasks on one GPU need 8"):
        placement.check_ray_update(_ray(0.5, 0.5), tmp_path)  # on a GPU without the actor, two halves fit


def test_server_flags_the_project_sets_are_refused_in_vllm_args():
    for flag in ("--gpu-memory-utilization=0.5", "--max-model-len", "--enforce-eager", "--max-loras"):
        with pytest.raises(ConfigError, match=flag.split("=")[0]):
            load_config(preset="cpu-tiny", overrides=[f'inference.vllm_args=["{flag}", "1"]'])
    load_config(preset="cpu-tiny", overrides=['inference.vllm_args=["--max-num-seqs", "128"]'])


def test_max_model_len_is_rounded_up_to_the_context_at_most_and_holds_an_evaluation():
    from populora_core.engine.shapes import EVALUATION_REQUEST_TOKENS

    shape = ModelShape.from_config({**UNSEEN, "max_position_embeddings": 32768})
    tiny = load_config(preset="cpu-tiny")
    assert lengths(tiny, shape).max_model_len == EVALUATION_REQUEST_TOKENS  # its own requests are shorter
    paper = load_config(preset="paper-7b")
    n = lengths(paper, shape)
    raw = max(n.teacher_prompt + n.teacher_completion, n.student_prompt + n.student_completion)
    assert raw < n.max_model_len and n.max_model_len % 256 == 0
    snug = ModelShape.from_config({**UNSEEN, "max_position_embeddings": raw + 1})
    assert lengths(paper, snug).max_model_len == raw + 1  # rounded up to the context, not past it


# the CPU: a warning before a run whose update could outgrow the machine ---------------------
def test_a_cpu_update_that_would_outgrow_the_memory_is_warned_with_a_micro_batch_that_fits():
    config = load_config(None, preset="cpu-tiny", overrides=["grpo.gradient_checkpointing=false"])
    shape = ModelShape.from_config(memory.KNOWN_SHAPES["Qwen/Qwen2.5-Coder-7B"])
    need = memory.cpu_phase(config, shape, dtype="bfloat16").total
    assert memory.cpu_memory_warning(config, shape, dtype="bfloat16", memory_gib=need + 0.1) is None
    line = memory.cpu_memory_warning(config, shape, dtype="bfloat16", memory_gib=need * 0.6)
    assert line and f"needs up to {need:.1f} GiB" in line, line
    fits = int(line.rsplit("grpo.micro_batch_size=", 1)[1].split()[0])
    assert 1 <= fits < config.grpo.micro_batch_size
    assert memory.cpu_phase(config, shape, dtype="bfloat16", micro_batch=fits).total <= need * 0.6
    assert memory.cpu_phase(config, shape, dtype="bfloat16", micro_batch=fits + 1).total > need * 0.6
    # the hf backend keeps its own copy of the weights beside the trainer's
    pieces = memory.cpu_phase(config, shape, dtype="bfloat16").pieces
    assert pieces["generation model (hf backend)"] == pytest.approx(pieces["base weights"])
    tiny = memory.cpu_memory_warning(config, shape, dtype="bfloat16", memory_gib=pieces["base weights"])
    assert "no micro-batch fits without grpo.gradient_checkpointing" in tiny


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_logits_are_kept_for_completion_positions_only_whatever_the_prompt_lengths(dtype):
    """A micro-batch mixing a long and a short prompt: autograd keeps one vocabulary-wide tensor,
    the completion positions' logits in the model's dtype (micro-batch × longest completion ×
    vocab), not from the shortest prompt's end to the longest row's end (~3× as many), and no
    float32 copy of them (under bf16 ``logsumexp`` of a ``.float()`` chunk kept one per chunk)."""
    model = _peft_model(UNSEEN, 4, dtype, targets=("q_proj", "v_proj"))
    vocab, completion, d = UNSEEN["vocab_size"], 48, torch.finfo(dtype).bits // 8
    rollouts = [
        Rollout(list(range(2, 2 + prompt)), list(range(7, 7 + completion)), [-1.0] * completion, 1.0)
        for prompt in (96, 8)
    ]
    _, kept = _saved_bytes(model, rollouts, False, dtype)
    assert kept == len(rollouts) * (completion + 1) * vocab * d, kept
    shape = ModelShape.from_config(UNSEEN)
    figure = shape.update_bytes(d, 4, ("q_proj", "v_proj"), len(rollouts), 96 + completion, completion, False, 16)
    assert kept <= figure["logits"]
    logp, comp, _ = whole_sequence_logprobs(model, rollouts, 0, 16)
    assert logp.shape == comp.shape == (2, completion) and comp.sum() == 2 * completion
