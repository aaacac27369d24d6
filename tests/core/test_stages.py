"""Stage functions that need no model: sample budgets, repeats and duplicates."""

from __future__ import annotations


def test_a_match_with_few_problems_gets_the_full_sample_budget():
    from populora_core.problems import SEED_PROBLEM
    from populora_core.stages.play import samples_per_problem

    work = [("t", "s", SEED_PROBLEM)] * 2 + [("t2", "s", SEED_PROBLEM)] * 4
    assert samples_per_problem(work, per_match=3, g=4) == [6, 6, 4, 4, 4, 4]
    work = [("t", "s", SEED_PROBLEM)] * 5
    assert sum(samples_per_problem(work, per_match=12, g=4)) == 48


def test_seed_ids_are_content_hashes():
    from populora_core.problems import SEED_PROBLEMS, problem_id

    for p in SEED_PROBLEMS:
        assert p.problem_id == problem_id(p.task_type, p.program, p.inputs)


def test_a_copy_of_a_seed_or_of_a_buffer_problem_is_a_repeat_not_a_fresh_problem(local_pool):
    """A verbatim copy of the reference earns no fresh-problem reward: it is invalid ("repeat")."""
    import numpy as np
    import pandas as pd

    from populora_core.config import load_config
    from populora_core.metrics.coverage import REFERENCE_CALIBRATION
    from populora_core.problems import seed_buffers
    from populora_core.stages.learn import reward
    from populora_core.stages.play import validate

    config = load_config(preset="cpu-tiny")
    copy = '<answer>\n```python\ndef f(a):\n    return a\n```\n```input\n"Hello world"\n```\n</answer>'
    new = "<answer>\n```python\ndef f(a):\n    return a * 2\n```\n```input\n3\n```\n</answer>"
    proposals = pd.DataFrame(
        {
            "proposal_id": ["t/p0", "t/p1", "t/p2"],
            "teacher_id": ["t"] * 3,
            "task_type": ["code_o"] * 3,
            "completion": [copy, new, new],
        }
    )

    def validated(frame: pd.DataFrame, cfg) -> pd.DataFrame:
        return validate(
            proposals=frame,
            start_buffers=seed_buffers(["t"]),
            pool=local_pool,
            config=cfg,
            generation=0,
            centroids=np.random.rand(4, 8),
            calibration=REFERENCE_CALIBRATION,
        )

    problems = validated(proposals, config)
    fresh = problems[problems["source"] == "fresh"]
    assert fresh["reason"].tolist() == ["repeat", "ok", "duplicate"]
    assert fresh["valid"].tolist() == [False, True, False]
    # the repeat earns the invalid-proposal penalty, not 1 − ρ
    rollouts = pd.DataFrame(columns=["rollout_id", "task_type"])
    verdicts = pd.DataFrame(columns=["rollout_id", "problem_id", "teacher_id", "student_id", "status"])
    rewards = reward(
        proposals=proposals, problems=problems, rollouts=rollouts, verdicts=verdicts, config=config, generation=0
    )
    assert rewards.set_index("item_id").loc["t/p0", "reward"] == config.rewards.invalid_proposal
    # Absolute Zero's penalties: a repeat is well formatted (−0.5), a bad format −1
    azr = load_config(preset="cpu-tiny-baseline")
    bad = proposals.assign(completion=[copy, "no answer here", new])
    problems = validated(bad, azr)
    rewards = reward(proposals=bad, problems=problems, rollouts=rollouts, verdicts=verdicts, config=azr, generation=0)
    rewards = rewards.set_index("item_id")["reward"]
    assert (rewards["t/p0"], rewards["t/p1"]) == (-0.5, -1.0)
