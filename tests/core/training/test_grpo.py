"""Advantages and the clipped loss."""

from __future__ import annotations

import torch

from populora_core.training.grpo import (
    advantage_groups,
    compute_advantages,
    normalised_advantages,
    policy_loss,
)


def test_grpo_normalises_within_groups():
    rewards = torch.tensor([1.0, -1.0, 0.5, 0.5, 10.0, 0.0])
    groups = [
        "student/code_o",
        "student/code_o",
        "teacher/code_i",
        "teacher/code_i",
        "teacher/code_f",
        "teacher/code_f",
    ]
    adv = normalised_advantages(rewards, groups, scale="group")
    torch.testing.assert_close(adv[:2], torch.tensor([1.0, -1.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(adv[2:4], torch.zeros(2))  # no spread: no signal
    torch.testing.assert_close(adv[4:], torch.tensor([1.0, -1.0]), atol=1e-4, rtol=0)  # scale-free per group


def test_reinforce_pp_uses_one_batch_scale():
    rewards = torch.tensor([1.0, -1.0, 10.0, 0.0])
    adv = normalised_advantages(rewards, ["a", "a", "b", "b"], scale="batch")
    centred = torch.tensor([1.0, -1.0, 5.0, -5.0])
    torch.testing.assert_close(adv, centred / centred.std(unbiased=False), atol=1e-5, rtol=0)


def test_loss_gradient_pushes_towards_positive_advantage():
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, metrics = policy_loss(logp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    loss.backward()
    assert (logp.grad[0] < 0).all() and (logp.grad[1] > 0).all()  # descent raises row 0, lowers row 1
    assert metrics["clip_frac"] == 0.0


def test_clipping_and_mask():
    logp = torch.full((1, 2), 1.0, requires_grad=True)  # ratio e ≈ 2.7 > 1 + ε
    loss, metrics = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]))
    loss.backward()
    assert metrics["clip_frac"] == 1.0
    assert torch.equal(logp.grad, torch.zeros(1, 2))  # clipped: no gradient; masked position: none either


def test_kl_term_is_zero_at_the_reference():
    logp = torch.randn(2, 4)
    _, metrics = policy_loss(logp, logp, torch.ones(2), torch.ones(2, 4), logp_ref=logp, kl_coef=0.1)
    assert abs(metrics["kl"]) < 1e-7
    _, metrics = policy_loss(logp, logp, torch.ones(2), torch.ones(2, 4), logp_ref=logp - 0.5, kl_coef=0.1)
    assert metrics["kl"] > 0


def test_the_config_switch_picks_the_estimator():
    import pytest

    from populora_core.config import GRPOConfig

    rewards, groups = torch.tensor([1.0, -1.0, 10.0, 0.0]), ["a", "a", "b", "b"]
    grpo = compute_advantages(rewards, groups, GRPOConfig().advantage)
    torch.testing.assert_close(grpo, normalised_advantages(rewards, groups, scale="group"))
    rpp = compute_advantages(rewards, groups, GRPOConfig(advantage="task_reinforce_pp").advantage)
    torch.testing.assert_close(rpp, normalised_advantages(rewards, groups, scale="batch"))
    with pytest.raises(KeyError, match="valid"):
        compute_advantages(rewards, groups, "ppo")


def test_groups_are_pooled_per_task_and_role_and_fall_back_when_flat_or_single():

    # teachers t1, t2 with one proposal per task type: each task group pools both teachers
    roles = ["teacher"] * 6
    tasks = ["code_o", "code_i", "code_f"] * 2
    prompts = [f"t{i // 3}/p{i % 3}" for i in range(6)]
    rewards = [1.0, 0.5, -1.0, 0.0, 0.5, -1.0]
    groups, members = advantage_groups(rewards, roles, tasks, prompts, "task_grpo")
    assert groups[0] == ("task", "teacher", "code_o") and members[groups[0]] == [0, 3]
    # code_i and code_f are flat across teachers: they fall back to the whole role
    assert groups[1] == groups[2] == ("role", "teacher") and members[("role", "teacher")] == list(range(6))
    adv = compute_advantages(torch.tensor(rewards), groups, "task_grpo", members)
    assert (adv.abs() > 1e-3).all()


def test_prompt_grpo_groups_a_students_samples_of_one_problem():

    roles = ["student"] * 6 + ["teacher"] * 2
    tasks = ["code_o"] * 8
    prompts = [("s", "t", "p1")] * 3 + [("s", "t", "p2")] * 3 + ["t/p0", "t/p1"]
    rewards = [1.0, -0.5, -0.5, 1.0, 1.0, 1.0, 0.5, 0.0]
    groups, members = advantage_groups(rewards, roles, tasks, prompts, "prompt_grpo")
    assert groups[:3] == [("prompt", "student", ("s", "t", "p1"))] * 3
    assert groups[3:6] == [("task", "student", "code_o")] * 3  # all solved: compared with the task group
    assert groups[6:] == [("task", "teacher", "code_o")] * 2
    adv = compute_advantages(torch.tensor(rewards), groups, "prompt_grpo", members)
    torch.testing.assert_close(adv[:3], normalised_advantages(torch.tensor(rewards[:3]), [0] * 3))
    assert (adv[3:6] > 0).all()  # above the student's task mean


def test_plain_grpo_keeps_a_flat_prompt_group_and_gives_it_no_signal():
    """grpo.fallback: none is textbook GRPO: an all-solved problem's samples keep their own
    group and get advantage 0, where the default falls back to the task group."""
    roles, tasks = ["student"] * 6, ["code_o"] * 6
    prompts = [("s", "t", "p1")] * 3 + [("s", "t", "p2")] * 3
    rewards = [1.0, -0.5, -0.5, 1.0, 1.0, 1.0]
    groups, members = advantage_groups(rewards, roles, tasks, prompts, "prompt_grpo", fallback=False)
    assert groups[3:] == [("prompt", "student", ("s", "t", "p2"))] * 3
    adv = compute_advantages(torch.tensor(rewards), groups, "prompt_grpo", members)
    assert torch.equal(adv[3:], torch.zeros(3))
    torch.testing.assert_close(adv[:3], normalised_advantages(torch.tensor(rewards[:3]), [0] * 3))
    wider = compute_advantages(torch.tensor(rewards), *_groups_and_kind(rewards, roles, tasks, prompts))
    assert (wider[3:] > 0).all()


def _groups_and_kind(rewards, roles, tasks, prompts):
    groups, members = advantage_groups(rewards, roles, tasks, prompts, "prompt_grpo")
    return groups, "prompt_grpo", members


def test_only_a_flat_role_gives_zero_advantages():

    rewards = [-1.0] * 4
    groups, members = advantage_groups(rewards, ["teacher"] * 4, ["code_o", "code_i"] * 2, range(4), "task_grpo")
    assert set(groups) == {("role", "teacher")}
    assert torch.equal(compute_advantages(torch.tensor(rewards), groups, "task_grpo", members), torch.zeros(4))


def test_a_teacher_with_equal_rewards_still_learns_from_its_role_mates():
    """Pooled baselines: t1's proposals all failed (−1) while t2's did better, so t1 is
    pushed away from what it proposed, though its own rewards are all equal."""
    rewards = [-1.0, -1.0, 0.5, -1.0]
    roles, tasks = ["teacher"] * 4, ["code_o", "code_i"] * 2
    groups, members = advantage_groups(rewards, roles, tasks, ["t1/0", "t1/1", "t2/0", "t2/1"], "prompt_grpo")
    adv = compute_advantages(torch.tensor(rewards), groups, "prompt_grpo", members)
    assert adv[0] < 0 and adv[2] > 0
