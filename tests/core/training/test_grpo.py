"""Advantages and the clipped loss."""

from __future__ import annotations

import torch

from populora_core.training.grpo import grpo_advantages, policy_loss, reinforce_pp_advantages


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
    adv = grpo_advantages(rewards, groups)
    torch.testing.assert_close(adv[:2], torch.tensor([1.0, -1.0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(adv[2:4], torch.zeros(2))  # no spread: no signal
    torch.testing.assert_close(adv[4:], torch.tensor([1.0, -1.0]), atol=1e-4, rtol=0)  # scale-free per group


def test_reinforce_pp_uses_one_batch_scale():
    rewards = torch.tensor([1.0, -1.0, 10.0, 0.0])
    adv = reinforce_pp_advantages(rewards, ["a", "a", "b", "b"])
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
    from populora_core.training.grpo import compute_advantages

    rewards, groups = torch.tensor([1.0, -1.0, 10.0, 0.0]), ["a", "a", "b", "b"]
    grpo = compute_advantages(rewards, groups, GRPOConfig().advantage)
    torch.testing.assert_close(grpo, grpo_advantages(rewards, groups))
    rpp = compute_advantages(rewards, groups, GRPOConfig(advantage="reinforce_pp").advantage)
    torch.testing.assert_close(rpp, reinforce_pp_advantages(rewards, groups))
    with pytest.raises(KeyError, match="valid"):
        compute_advantages(rewards, groups, "ppo")
