"""Answers to a fixed list of problems: ``samples`` completions each with the generation
flow's student prompt and prefill, judged in the sandbox; greedy pass@1. The probe stage
and the learning check (``training.fixed_pool``) use it."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from populora_core.config import ProblemsConfig, RewardConfig
from populora_core.inference.base import Completion, GenerationRequest, SamplingParams
from populora_core.problems.checking import check_answers
from populora_core.problems.prompts import ASSISTANT_PREFILL, STOP_STRINGS, student_prompt
from populora_core.problems.types import Problem
from populora_core.rewards import student_reward
from populora_core.sandbox import SandboxPool


def sample(
    backend,
    adapter: str | Sequence[str],
    problems: Sequence[Problem],
    params: SamplingParams,
    *,
    samples: int,
    seed: int,
    progress: str | None = None,
) -> list[list[Completion]]:
    """``samples`` completions per problem, with the flow's student prompt and prefill, of
    ``adapter`` (one for all, or one per problem); sample i of problem k is drawn from
    (seed, k, i) whatever its batch."""
    adapters = [adapter] * len(problems) if isinstance(adapter, str) else list(adapter)
    requests = [
        GenerationRequest(
            prompt=student_prompt(p), adapter=a, n=samples, seed=seed * 100_003 + k, prefill=ASSISTANT_PREFILL
        )
        for k, (p, a) in enumerate(zip(problems, adapters, strict=True))
    ]
    return backend.generate(requests, params, progress=progress)


def judge(
    problems: Sequence[Problem],
    completions: Sequence[Sequence[Completion]],
    pool: SandboxPool,
    problems_config: ProblemsConfig,
    rewards_config: RewardConfig,
) -> pd.DataFrame:
    """One row per completion: problem index, sample index, status, reward, tokens."""
    items = [(p, c.text) for p, cs in zip(problems, completions, strict=True) for c in cs]
    results = check_answers(items, pool, problems_config)
    rows = []
    flat = [(k, i, c) for k, cs in enumerate(completions) for i, c in enumerate(cs)]
    for (k, i, c), result in zip(flat, results, strict=True):
        rows.append(
            {
                "problem": k,
                "problem_id": problems[k].problem_id,
                "task_type": problems[k].task_type,
                "sample": i,
                "status": result.verdict,
                "detail": result.detail,
                "reward": student_reward(result.verdict, rewards_config),
                "tokens": len(c.token_ids),
                "finish_reason": c.finish_reason,
                "text": c.text,
            }
        )
    return pd.DataFrame(rows)


def greedy_verdicts(
    backend,
    adapter: str | Sequence[str],
    problems: Sequence[Problem],
    pool: SandboxPool,
    problems_config: ProblemsConfig,
    rewards_config: RewardConfig,
    *,
    max_new_tokens: int,
    progress: str | None = None,
) -> pd.DataFrame:
    """Greedy pass@1 of ``adapter`` (or ``inference.BASE``; or one adapter per problem): one
    judged completion per problem."""
    params = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=STOP_STRINGS)
    completions = sample(backend, adapter, problems, params, samples=1, seed=0, progress=progress)
    return judge(problems, completions, pool, problems_config, rewards_config)
