"""Student-only GRPO on a fixed pool of problems: the learning check's pieces.

A self-play run can only out-evolve a single agent once each member demonstrably
learns. The learning check (``benchmarks/learning_check.py``) trains one student
adapter on fixed, verifiable problems (CRUXEval's output and input prediction, as
the project's own ``code_o`` / ``code_i`` task types) and measures it on a held-out
split it never trains on, against the untrained adapter. Every piece is the
generation flow's own: the prompt, the backend's sampling and the sandbox judge
(``problems.answering``),
the reward (``rewards.student_reward``), the baseline groups and estimator
(``training.grpo.advantage_groups`` / ``compute_advantages``) and the update
(``training.trainer.Trainer.update``). Only the source of problems differs: a fixed pool
instead of teachers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from populora_core.config import GRPOConfig
from populora_core.inference.base import Completion
from populora_core.problems import Problem, problem_id
from populora_core.problems.types import TaskType
from populora_core.training.grpo import advantage_groups, compute_advantages
from populora_core.training.rollouts import Rollout


def cruxeval_problems(path: Path, task_types: Sequence[TaskType] = ("code_o", "code_i")) -> list[Problem]:
    """CRUXEval (``cruxeval.jsonl``: id, code, input, output) as problems of each task type:
    ``code_o`` predicts ``f(input)``, ``code_i`` finds an input giving ``output``. The
    gold output is CRUXEval's (a Python literal, compared by value)."""
    problems = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        for task in task_types:
            inputs, outputs = (r["input"],), (r["output"],)
            problems.append(Problem(task, r["code"], inputs, outputs, "", problem_id(task, r["code"], inputs)))
    return problems


def split_pool(
    problems: Sequence[Problem], heldout: int, rng: np.random.Generator
) -> tuple[list[Problem], list[Problem]]:
    """(train, held-out): ``heldout`` programs drawn at random, with every task type of a
    held-out program held out too, so no program seen in training is ever evaluated."""
    programs = sorted({p.program for p in problems})
    per_program = len(problems) / max(1, len(programs))
    chosen = set(rng.choice(len(programs), size=min(len(programs), round(heldout / per_program)), replace=False))
    held = {programs[i] for i in chosen}
    return [p for p in problems if p.program not in held], [p for p in problems if p.program in held]


def untrained_problems(
    train: Sequence[Problem], trained: Sequence[Problem], count: int, rng: np.random.Generator
) -> list[Problem]:
    """About ``count`` problems (every task type of ``count / types`` programs) from the
    training side of a split whose programs no ``trained`` problem uses: more held-out
    items for a run that trained on only part of its training pool."""
    seen = {p.program for p in trained}
    return split_pool([p for p in train if p.program not in seen], count, rng)[1]


def student_rollouts(
    verdicts: pd.DataFrame, completions: Sequence[Sequence[Completion]], grpo: GRPOConfig
) -> list[Rollout]:
    """The judged samples as training rollouts, with advantages from the flow's estimator
    (``grpo.advantage``): a problem's G samples are its group; a flat group falls back to
    its task type's, then to the whole batch (``advantage_groups``)."""
    n = len(verdicts)
    rewards = verdicts["reward"].tolist()
    groups, members = advantage_groups(
        rewards,
        ["student"] * n,
        verdicts["task_type"].tolist(),
        verdicts["problem"].tolist(),
        grpo.advantage,
        fallback=grpo.fallback == "wider",
    )
    adv = compute_advantages(torch.tensor(rewards, dtype=torch.float64), groups, grpo.advantage, members)
    batch = []
    for row, a in zip(verdicts.itertuples(index=False), adv.tolist(), strict=True):
        c = completions[row.problem][row.sample]
        if c.token_ids:
            batch.append(Rollout(list(c.prompt_token_ids), list(c.token_ids), list(c.logprobs), float(a)))
    return batch


def step_summary(verdicts: pd.DataFrame) -> dict[str, float]:
    """Mean reward, format-error rate and pass rate of one batch, with their counts."""
    status = verdicts["status"]
    return {
        "reward": float(verdicts["reward"].mean()),
        "format_error": float((status == "format_error").mean()),
        "pass_rate": float((status == "correct").mean()),
        "samples": len(verdicts),
        "problems": int(verdicts["problem"].nunique()),
        "tokens_mean": float(verdicts["tokens"].mean()),
        "truncated": float((verdicts["finish_reason"] == "length").mean()),
    }
