"""Invariants of every evolution operator on small random adapters."""

from __future__ import annotations

import pytest
import torch

from populora_core.population.evolution import CROSSOVERS, MUTATIONS, OPERATORS, apply_operator, get_operator
from populora_core.population.evolution.checks import (
    component_gradient_norms,
    dead_components,
    learning_speed,
    mean_effective_rank,
    rebalanced,
)
from populora_core.population.evolution.operators import component_mask, dare, subspace_mix, task_arithmetic
from tests.core.population.conftest import random_adapter, young_adapter


def run(name, parents, seed):
    ps = list(parents[:1]) if name in MUTATIONS else list(parents)
    return apply_operator(name, ps, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_children_keep_rank_and_modules(name, parents):
    child, params = run(name, parents, 0)
    a = parents[0]
    assert child.rank == a.rank and child.alpha == a.alpha
    assert list(child.modules) == list(a.modules)
    for module, f in child:
        assert f.A.shape == a.modules[module].A.shape and f.B.shape == a.modules[module].B.shape
        assert torch.isfinite(f.A).all() and torch.isfinite(f.B).all()
        # every component stays trainable: A has full row rank, so every B column gets a gradient
        assert torch.linalg.matrix_rank(f.A) == a.rank
        expected = a.rank - len(params.get("masked", ()))
        assert torch.linalg.matrix_rank(f.B @ f.A, rtol=1e-4) == expected, (name, module)
    assert dead_components(child) == 0
    assert isinstance(params, dict)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_children_keep_the_effective_rank(name, parents):
    """Full-rank parents (effective rank ~3 of 4) give children of about the same
    effective rank; M3 masks one of four components."""
    child, params = run(name, parents, 0)
    parent = mean_effective_rank(parents[0])
    floor = 0.6 if params.get("masked") else 0.8
    assert floor * parent <= mean_effective_rank(child) <= 1.25 * parent, (parent, mean_effective_rank(child))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_same_seed_same_child_other_seed_other_child(name, parents):
    first, _ = run(name, parents, 7)
    again, _ = run(name, parents, 7)
    names = list(first.modules)
    assert all(torch.equal(first.modules[n].A, again.modules[n].A) for n in names)
    assert all(torch.equal(first.modules[n].B, again.modules[n].B) for n in names)

    def differs(other):
        return any(
            not torch.equal(first.modules[n].A, other.modules[n].A)
            or not torch.equal(first.modules[n].B, other.modules[n].B)
            for n in names
        )

    # small discrete choices (which of r = 4 components, which k) can repeat for one other seed
    assert any(differs(run(name, parents, seed)[0]) for seed in range(8, 14))


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operators_leave_the_global_rng_alone(name, parents):
    state = torch.random.get_rng_state()
    run(name, parents, 3)
    assert torch.equal(state, torch.random.get_rng_state())


def test_mutations_stay_near_their_parent(parents):
    a = parents[0]
    for name in ("M1", "M4"):
        child, _ = run(name, parents, 0)
        for module in a.modules:
            before, after = a.delta(module), child.delta(module)
            rel = (after - before).norm() / before.norm()
            assert 0 < rel < 0.6, (name, module, rel)


def test_m2_touches_only_the_chosen_layers(parents):
    a = parents[0]
    child, params = run("M2", parents, 0)
    for module, f in child:
        changed = not torch.equal(f.A, a.modules[module].A)
        assert changed == (int(module.split(".")[2]) in params["layers"])
    assert len(params["layers"]) == 2  # a quarter of 8 layers


def test_m3_removes_exactly_the_masked_components(parents):
    a = parents[0]
    child, params = component_mask(a, torch.Generator().manual_seed(0), fraction=0.5)
    masked = params["masked"]
    assert len(masked) == 2
    for module in a.modules:
        U, S, Vh = torch.linalg.svd(a.delta(module) / a.scaling)
        keep = torch.ones_like(S)
        keep[masked] = 0
        expected = U[:, :4] @ torch.diag((S * keep)[:4]) @ Vh[:4]
        torch.testing.assert_close(child.delta(module) / a.scaling, expected, rtol=1e-3, atol=1e-4)


def test_m3_leaves_every_component_a_gradient(parents):
    """A masked component's B column is zero, its A row is re-initialised: ∂L/∂B_i = G A_iᵀ ≠ 0."""
    a = parents[0]
    child, params = component_mask(a, torch.Generator().manual_seed(0), fraction=0.5)
    gen = torch.Generator().manual_seed(5)
    for _, f in child:
        assert torch.count_nonzero(f.B[:, params["masked"]]) == 0
        G = torch.randn((f.B.shape[0], f.A.shape[1]), generator=gen)
        assert (component_gradient_norms(f, G) > 1e-4).all()


def test_x3_splices_components_1_to_k_of_a_and_the_rest_of_b(parents):
    a, b = parents
    child, params = subspace_mix(a, b, torch.Generator().manual_seed(0), k=3)
    assert params["k"] == 3
    for module in a.modules:
        Ua, Sa, Vha = torch.linalg.svd(a.delta(module))
        Ub, Sb, Vhb = torch.linalg.svd(b.delta(module))
        expected = Ua[:, :3] @ torch.diag(Sa[:3]) @ Vha[:3] + Ub[:, 3:4] @ torch.diag(Sb[3:4]) @ Vhb[3:4]
        torch.testing.assert_close(child.delta(module), expected, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_x3_of_a_parent_with_itself_is_the_parent(parents, k):
    a = parents[0]
    child, _ = subspace_mix(a, a, torch.Generator().manual_seed(0), k=k)
    for module in a.modules:
        torch.testing.assert_close(child.delta(module), a.delta(module), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("eta", [1.0, 1.25, 1.5])
def test_x4_is_task_arithmetic_in_delta_w_space(parents, eta):
    better, worse = parents
    child, params = task_arithmetic(better, worse, torch.Generator().manual_seed(0), eta=eta)
    assert params["eta"] == eta
    for module in better.modules:
        target = worse.delta(module) + eta * (better.delta(module) - worse.delta(module))
        U, S, Vh = torch.linalg.svd(target)
        expected = U[:, :4] @ torch.diag(S[:4]) @ Vh[:4]  # truncated back to rank r
        torch.testing.assert_close(child.delta(module), expected, rtol=1e-3, atol=1e-4)


def test_x4_draws_eta_above_one(parents):
    _, params = task_arithmetic(*parents, torch.Generator().manual_seed(0))
    assert 1.0 <= params["eta"] <= 1.5


IDENTITY_CHILDREN = {
    "M1": ([0], {"sigma": 0.0, "step": 0.0}),
    "X1": ([0, 0], {"p": 0.0}),
    "X3": ([0, 0], {"k": 2}),
    "X4": ([0, 0], {"eta": 1.25}),
}
"""Settings under which an SVD-based operator returns its parent's ΔW."""


@pytest.mark.parametrize("name", sorted(IDENTITY_CHILDREN))
def test_a_child_learns_as_fast_as_its_parent(name):
    """A young adapter (A at init scale, B small) and its SVD-rebuilt copy (same ΔW) move
    as far towards a target in a few Adam steps at a realistic learning rate. The copy
    rebuilt with balanced factors (√S each, the former write-back) is ~2× slower."""
    parent = young_adapter(3)
    which, params = IDENTITY_CHILDREN[name]
    child, _ = apply_operator(name, [parent for _ in which], torch.Generator().manual_seed(0), params)
    for module in parent.modules:
        torch.testing.assert_close(child.delta(module), parent.delta(module), rtol=1e-3, atol=1e-6)
    gen = torch.Generator().manual_seed(9)
    targets = {n: 0.01 * torch.randn(parent.delta(n).shape, generator=gen) for n in parent.modules}
    speed = learning_speed(parent, targets, steps=10, lr=1e-5)
    assert learning_speed(child, targets, steps=10, lr=1e-5) >= 0.9 * speed
    assert learning_speed(rebalanced(child), targets, steps=10, lr=1e-5) < 0.6 * speed


def test_dare_preserves_the_expected_value():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    draws = torch.stack([dare(x, 0.5, gen) for _ in range(2000)])
    dropped = (draws == 0).float().mean()
    assert abs(dropped - 0.5) < 0.01
    # the mean of 2000 draws is within a few standard errors of x everywhere
    stderr = x.abs() / 2000**0.5
    assert ((draws.mean(0) - x).abs() <= 5 * stderr + 1e-6).all()


def test_x1_without_drops_is_the_truncated_average(parents):
    a, b = parents
    child, _ = apply_operator("X1", [a, b], torch.Generator().manual_seed(0), {"p": 0.0})
    for module in a.modules:
        U, S, Vh = torch.linalg.svd(0.5 * a.delta(module) + 0.5 * b.delta(module))
        torch.testing.assert_close(child.delta(module), U[:, :4] @ torch.diag(S[:4]) @ Vh[:4], rtol=1e-3, atol=1e-4)


def test_registry_and_arity():
    assert set(MUTATIONS) == {"M1", "M2", "M3", "M4"} and set(CROSSOVERS) == {"X1", "X2", "X3", "X4"}
    with pytest.raises(KeyError, match="valid"):
        get_operator("M9")
    with pytest.raises(ValueError, match="2 parent"):
        apply_operator("X1", [random_adapter(0)], torch.Generator())
