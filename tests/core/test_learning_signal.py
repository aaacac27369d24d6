"""Every adapter learns under every preset: the reward and update stages, fed a
generation whose rewards vary, give every teacher and every student a non-zero
advantage and an update that moves its weights (a real trainer on a tiny random
model with the preset's rank, modules and GRPO settings). An adapter is skipped
only when rewards are all equal, and train_metrics says why."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from populora_core.config import PRESETS, load_config
from populora_core.population.adapters import create_population, load_adapter, lora_shapes, save_adapter
from populora_core.problems import problem_id
from populora_core.stages import learn
from populora_core.stages import play as play_stages
from populora_core.training.rollouts import token_logprobs
from populora_core.training.trainer import Trainer
from tests.helpers import TINY_QWEN2

STATUSES = ("correct", "wrong", "format_error")


class _Tokenizer:
    pad_token_id = 0


def _tokens(rng: np.random.Generator, lo: int, hi: int) -> list[int]:
    return rng.integers(1, TINY_QWEN2["vocab_size"], size=int(rng.integers(lo, hi))).tolist()


def play(config, members, rng: np.random.Generator, statuses=STATUSES, any_valid: bool = True):
    """A generation's proposals, problems, rollouts and verdicts shaped as the stages make
    them for ``config``: the preset's proposal counts, task types, pairing, top-ups and
    sample counts; completions drawn from ``rng``. Rewards vary within every adapter:
    every other proposal is valid (when ``any_valid``), verdicts cycle through ``statuses``."""
    budget, types = config.budget, config.problems.task_types
    pairings = play_stages.pair(members=members, config=config, generation=0)
    proposals, problems = [], []
    for t in (m for m in members if m.plays("teacher")):
        for i in range(budget.proposals_per_teacher):
            task_type = types[i % len(types)]
            pid = f"{t.adapter_id}/p{i}"
            proposals.append(
                dict(
                    proposal_id=pid,
                    teacher_id=t.adapter_id,
                    proposal_idx=i,
                    task_type=task_type,
                    prompt_tokens=_tokens(rng, 3, 6),
                    tokens=_tokens(rng, 2, 6),
                )
            )
            valid = any_valid and i % 2 == 0
            program = f"def f(a):\n    return a + {i}"
            problems.append(
                dict(
                    teacher_id=t.adapter_id,
                    proposal_id=pid,
                    source="fresh",
                    problem_id=problem_id(task_type, program, ("1",)) if valid else f"invalid:{pid}",
                    task_type=task_type,
                    valid=valid,
                    reason="ok" if valid else ("format: no_answer", "crash")[i // 2 % 2],
                )
            )
        have = sum(p["valid"] for p in problems if p["teacher_id"] == t.adapter_id)
        for j in range(max(0, budget.problems_per_match - have)):  # buffer top-up
            problems.append(
                dict(
                    teacher_id=t.adapter_id,
                    proposal_id=None,
                    source="buffer",
                    problem_id=problem_id("code_o", f"def f(a):\n    return a * {j}", ("2",)),
                    task_type="code_o",
                    valid=True,
                    reason="ok",
                )
            )
    problems = pd.DataFrame(problems).assign(program="def f(a):\n    return a", inputs=[["1"]] * len(problems))
    problems = problems.assign(outputs=[["1"]] * len(problems), message="")
    work = play_stages.assignments(problems, pairings)
    counts = play_stages.samples_per_problem(work, budget.problems_per_match, budget.samples_per_problem)
    rollouts, verdicts = [], []
    for (teacher, student, problem), n in zip(work, counts, strict=True):
        for j in range(n):
            rid = f"{student}|{teacher}|{problem.problem_id}|{j}"
            rollouts.append(
                dict(
                    rollout_id=rid,
                    problem_id=problem.problem_id,
                    teacher_id=teacher,
                    student_id=student,
                    task_type=problem.task_type,
                    prompt_tokens=_tokens(rng, 3, 6),
                    tokens=_tokens(rng, 2, 6),
                )
            )
            verdicts.append(
                dict(
                    rollout_id=rid,
                    problem_id=problem.problem_id,
                    teacher_id=teacher,
                    student_id=student,
                    status=statuses[(j + len(verdicts)) % len(statuses)],
                )
            )
    return pd.DataFrame(proposals), problems, pd.DataFrame(rollouts), pd.DataFrame(verdicts)


def _with_old_logprobs(frame: pd.DataFrame, model) -> pd.DataFrame:
    """Generation-time log-probs of each completion (the base model's: members start near it)."""
    logprobs = []
    with torch.no_grad(), model.disable_adapter():
        for r in frame.itertuples(index=False):
            ids = torch.tensor([[*r.prompt_tokens, *r.tokens]])
            lp = token_logprobs(model, ids, torch.ones_like(ids), chunk=8, start=len(r.prompt_tokens) - 1)
            logprobs.append(lp[0].tolist())
    return frame.assign(logprobs=logprobs)


def generation(preset: str, tmp_path, statuses=STATUSES, any_valid: bool = True, overrides=()):
    """(members, rewards, train_metrics, population dir, updated dir) of one generation."""
    config = load_config(preset=preset, overrides=overrides)
    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2)).eval()
    shapes = lora_shapes(TINY_QWEN2, config.population.target_modules)
    members, adapters = create_population(config.population, config.rating, shapes, config.seed)
    population_dir, updated_dir = tmp_path / "population", tmp_path / "updated"
    for adapter_id, adapter in adapters.items():
        save_adapter(adapter, population_dir / adapter_id)
    trainer = Trainer(base, _Tokenizer(), config.population)
    proposals, problems, rollouts, verdicts = play(config, members, np.random.default_rng(1), statuses, any_valid)
    proposals, rollouts = _with_old_logprobs(proposals, trainer.model), _with_old_logprobs(rollouts, trainer.model)
    rewards = learn.reward(
        proposals=proposals, problems=problems, rollouts=rollouts, verdicts=verdicts, config=config, generation=0
    )
    metrics = learn.update(
        members=members,
        members_dir=population_dir,
        rewards=rewards,
        proposals=proposals,
        rollouts=rollouts,
        updated_dir=updated_dir,
        trainer=trainer,
        config=config,
        generation=0,
    )
    return members, rewards, metrics, population_dir, updated_dir


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_adapter_gets_an_advantage_and_an_update(preset, tmp_path):
    members, rewards, metrics, before_dir, after_dir = generation(preset, tmp_path)
    for m in members:
        mine = rewards[rewards["adapter_id"] == m.adapter_id]
        for role in m.roles:
            part = mine[mine["role"] == role]
            assert len(part) and part["reward"].nunique() > 1, (m.adapter_id, role)  # rewards vary ...
            assert (part["advantage"].abs() > 1e-6).any(), (m.adapter_id, role)  # ... so must advantages
    assert metrics["updated"].all(), metrics[["adapter_id", "skip_reason"]]
    assert (metrics["skip_reason"] == "").all()
    assert (metrics["delta_change"] > 0).all() and (metrics["steps"] >= 1).all()
    for m in members:  # the weights on disk moved
        old, new = load_adapter(before_dir / m.adapter_id), load_adapter(after_dir / m.adapter_id)
        assert any(not torch.equal(f.B, new.modules[n].B) for n, f in old), m.adapter_id


def test_the_baseline_takes_one_members_update_per_generation_and_total_matching_scales_it():
    per_adapter = load_config(preset="cpu-small-baseline")
    population = load_config(preset="cpu-small")
    steps = population.grpo.minibatches  # one member's optimizer steps a generation
    assert per_adapter.budget == population.budget and per_adapter.grpo.minibatches == steps
    assert per_adapter.rewards.teacher_rule == "learnability"
    total = load_config(preset="cpu-small-baseline", overrides=["baseline.matching=total"])
    assert total.budget.proposals_per_teacher == 4 * population.budget.proposals_per_teacher
    assert total.budget.problems_per_match == 4 * population.budget.problems_per_match
    assert total.grpo.minibatches == 8 * steps


def test_an_adapter_is_skipped_only_when_its_rewards_are_all_equal(tmp_path):
    """Every proposal invalid, every answer wrong: nothing to learn, and train_metrics says so."""
    _, rewards, metrics, _, _ = generation("cpu-tiny", tmp_path, statuses=("wrong",), any_valid=False)
    assert (rewards["advantage"] == 0).all()
    assert not metrics["updated"].any() and (metrics["steps"] == 0).all()
    assert metrics["skip_reason"].str.startswith("every reward equal").all(), metrics["skip_reason"].tolist()


def test_disabled_updates_leave_every_adapter_as_it_was(tmp_path):
    """grpo.enabled: false (a control run): rewards vary, yet nothing is trained, and says why."""
    members, rewards, metrics, before_dir, after_dir = generation(
        "cpu-tiny", tmp_path, overrides=["grpo.enabled=false"]
    )
    assert (rewards["advantage"].abs() > 0).any()
    assert not metrics["updated"].any() and (metrics["delta_change"] == 0).all()
    assert (metrics["skip_reason"] == "updates disabled (grpo.enabled: false)").all()
    for m in members:
        old, new = load_adapter(before_dir / m.adapter_id), load_adapter(after_dir / m.adapter_id)
        assert all(torch.equal(f.B, new.modules[n].B) and torch.equal(f.A, new.modules[n].A) for n, f in old)
