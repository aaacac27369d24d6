"""Invariants of every evolution operator on small random adapters."""

from __future__ import annotations

import pytest
import torch

from populora_core.population.evolution import CROSSOVERS, MUTATIONS, OPERATORS, apply_operator, get_operator
from populora_core.population.evolution.operators import component_mask, dare, subspace_mix, task_arithmetic
from tests.core.population.conftest import random_adapter


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
        assert torch.linalg.matrix_rank(f.B @ f.A) <= a.rank
    assert isinstance(params, dict)


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


def test_x3_child_spans_the_chosen_subspaces(parents):
    a, b = parents
    child, params = subspace_mix(a, b, torch.Generator().manual_seed(0), k=3)
    assert params["k"] == 3
    for module in a.modules:
        Ua, Sa, Vha = torch.linalg.svd(a.delta(module))
        Ub, Sb, Vhb = torch.linalg.svd(b.delta(module))
        expected = Ua[:, :3] @ torch.diag(Sa[:3]) @ Vha[:3] + Ub[:, :1] @ torch.diag(Sb[:1]) @ Vhb[:1]
        torch.testing.assert_close(child.delta(module), expected, rtol=1e-3, atol=1e-4)
        span = torch.cat([Ua[:, :3], Ub[:, :1]], dim=1)
        projected = span @ torch.linalg.pinv(span) @ child.delta(module)
        torch.testing.assert_close(projected, child.delta(module), rtol=1e-3, atol=1e-4)


def test_x4_matches_its_formula_exactly(parents):
    better, worse = parents
    child, params = task_arithmetic(better, worse, torch.Generator().manual_seed(0))
    eta = params["eta"]
    assert 1.0 <= eta <= 1.5
    for module, f in child:
        w, b = worse.modules[module], better.modules[module]
        assert torch.equal(f.A, w.A + eta * (b.A - w.A))
        assert torch.equal(f.B, w.B + eta * (b.B - w.B))


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
