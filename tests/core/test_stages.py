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


def test_an_update_that_split_its_micro_batch_says_so_and_keeps_it_beside_the_adapter(tmp_path):
    """`train_one` with a trainer that split its micro-batch twice (``oom_splits``), run as a Ray
    worker runs it (outside the stage's attempts record): the adapter's metrics.json keeps the
    micro-batch it ended with; the stage's own process (`update`) then writes the attempts line
    naming the adapter and the sizes, and logs the setting to start there."""
    import json

    from populora_core.config import GRPOConfig
    from populora_core.population.adapters import save_adapter
    from populora_core.rundir import attempts
    from populora_core.stages.learn import UpdateJob, _say_splits, train_one
    from populora_core.training.rollouts import Rollout
    from tests.core.population.conftest import random_adapter

    adapter = random_adapter(0)
    save_adapter(adapter, tmp_path / "before")
    metrics = {"steps": 1.0, "loss": 0.1, "clip_frac": 0.0, "kl": 0.0}
    metrics |= {"grad_norm": 1.0, "tokens": 4.0, "seconds": 0.1}
    metrics |= {"micro_batch": 2.0, "oom_splits": 2.0}

    class SplitTwice:  # what `Trainer.update` returns after halving 8 → 4 → 2
        def update(self, before, batch, grpo, state, *, seed):
            return before, metrics, None

    row = {"adapter_id": "student-g0000-0", "samples": 1, "skip_reason": ""}
    job = UpdateJob(
        tmp_path / "before",
        tmp_path / "after",
        (Rollout([1], [2], [-1.0], 1.0),),
        GRPOConfig(micro_batch_size=8),
        0,
        row,
        "",
    )
    log = tmp_path / "_attempts.jsonl"
    out = train_one(SplitTwice(), job)  # in a worker: no attempts record there
    assert not log.exists()
    with attempts.stage(log, "a1", "update"):
        _say_splits(out, job.grpo.micro_batch_size)
    assert (out["micro_batch"], out["oom_splits"]) == (2, 2)
    assert json.loads((tmp_path / "after" / "metrics.json").read_text())["micro_batch"] == 2
    [split] = [x for x in attempts.read_lines(log) if x.get("event") == "split"]
    assert split["detail"] == "student-g0000-0: micro-batch 8 → 2 (out of memory 2×)"
