"""The learning check's pieces: CRUXEval as the project's task types, a held-out split that
shares no program with training, the flow's judge and rewards, and the flow's advantages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from populora_core.config import GRPOConfig, ProblemsConfig, RewardConfig
from populora_core.inference.base import Completion
from populora_core.problems.answering import judge
from populora_core.training.fixed_pool import (
    cruxeval_problems,
    split_pool,
    step_summary,
    student_rollouts,
    untrained_problems,
)

CRUXEVAL = Path(__file__).resolve().parents[4] / "shared" / "data" / "cruxeval" / "cruxeval.jsonl"
pytestmark = pytest.mark.skipif(not CRUXEVAL.is_file(), reason="needs ../shared/data/cruxeval")


def test_cruxeval_items_become_deduction_and_abduction_problems():
    problems = cruxeval_problems(CRUXEVAL)
    assert len(problems) == 1600 and {p.task_type for p in problems} == {"code_o", "code_i"}
    first = problems[0]
    assert first.program.startswith("def f(nums):") and first.inputs == ("[1, 1, 3, 1, 3, 1]",)
    assert len({p.problem_id for p in problems}) == 1600


def test_the_held_out_split_shares_no_program_with_training():
    problems = cruxeval_problems(CRUXEVAL)
    train, held = split_pool(problems, 100, np.random.default_rng(0))
    assert len(held) == 100 and len(train) == 1500
    assert not {p.program for p in train} & {p.program for p in held}
    again, _ = split_pool(problems, 100, np.random.default_rng(0))
    assert [p.problem_id for p in again] == [p.problem_id for p in train]  # seeded


def test_extra_held_out_problems_share_no_program_with_training_or_the_split():
    train, held = split_pool(cruxeval_problems(CRUXEVAL), 100, np.random.default_rng(0))
    trained = train[:600:2]  # 300 programs of the training pool, each as one task type only
    extra = untrained_problems(train, trained, 150, np.random.default_rng(1))
    assert len(extra) == 150 and {p.task_type for p in extra} == {"code_o", "code_i"}
    programs = {p.program for p in extra}
    assert not programs & {p.program for p in trained} and not programs & {p.program for p in held}


def _completion(text: str, n_tokens: int = 3) -> Completion:
    return Completion(text, list(range(1, n_tokens + 1)), [-0.5] * n_tokens, [7, 8], "stop")


def test_judged_answers_earn_the_flow_rewards_and_advantages_within_each_problem(local_pool):
    problems = cruxeval_problems(CRUXEVAL)[:2]  # sample_0 as code_o and as code_i
    gold_o, gold_i = problems[0].outputs[0], problems[1].inputs[0]
    completions = [
        [_completion(f"<think>x</think><answer>{gold_o}</answer>"), _completion("<think>no answer")],
        [_completion(f"<answer>\n```input\n{gold_i}\n```\n</answer>"), _completion("<answer>[0]</answer>")],
    ]
    verdicts = judge(problems, completions, local_pool, ProblemsConfig(), RewardConfig())
    assert verdicts["status"].tolist() == ["correct", "format_error", "correct", "wrong"]
    assert verdicts["reward"].tolist() == [1.0, -1.0, 1.0, -0.5]
    summary = step_summary(verdicts)
    assert (summary["format_error"], summary["pass_rate"], summary["samples"]) == (0.25, 0.5, 4)
    rollouts = student_rollouts(verdicts, completions, GRPOConfig())
    adv = [r.advantage for r in rollouts]
    assert adv[0] > 0 > adv[1] and adv[2] > 0 > adv[3]  # each problem's two samples are its group
    assert adv[0] == pytest.approx(-adv[1]) and rollouts[0].prompt_ids == [7, 8]


def test_a_flat_problem_falls_back_to_its_task_group():
    verdicts = pd.DataFrame(
        {
            "problem": [0, 0, 1, 1],
            "sample": [0, 1, 0, 1],
            "task_type": ["code_o"] * 4,
            "reward": [1.0, 1.0, -0.5, 1.0],
        }
    )
    completions = [[_completion("a"), _completion("b")], [_completion("c"), _completion("d")]]
    adv = [r.advantage for r in student_rollouts(verdicts, completions, GRPOConfig())]
    assert adv[0] == adv[1] > 0  # all-correct problem 0: compared with the task's mean, not zeroed
