"""Factored SVD and low-rank combination against explicit dense linear algebra."""

from __future__ import annotations

import torch

from populora_core.population.lora import combine, factored_svd, layer_index, truncate


def test_factored_svd_matches_dense_svd():
    g = torch.Generator().manual_seed(0)
    B, A = torch.randn(40, 6, generator=g), torch.randn(6, 30, generator=g)
    U, S, V = factored_svd(B, A)
    dense = torch.linalg.svdvals(B @ A)[:6]
    torch.testing.assert_close(S, dense, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(U @ torch.diag(S) @ V.T, B @ A, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(U.T @ U, torch.eye(6), atol=1e-4, rtol=0)
    torch.testing.assert_close(V.T @ V, torch.eye(6), atol=1e-4, rtol=0)


def test_factored_svd_of_rank_deficient_factors_takes_the_qr_path():
    g = torch.Generator().manual_seed(1)
    B, A = torch.randn(20, 4, generator=g), torch.randn(4, 12, generator=g)
    B[:, 1] = 0.0  # one dead component: Cholesky of BᵀB fails
    U, S, V = factored_svd(B, A)
    torch.testing.assert_close(U @ torch.diag(S) @ V.T, B @ A, rtol=1e-4, atol=1e-4)
    assert S[-1].abs() < 1e-5


def test_truncate_is_the_best_rank_k_approximation():
    g = torch.Generator().manual_seed(2)
    B, A = torch.randn(30, 8, generator=g), torch.randn(8, 25, generator=g)
    A3, B3 = truncate(B, A, 3)
    U, S, Vh = torch.linalg.svd(B @ A)
    best = U[:, :3] @ torch.diag(S[:3]) @ Vh[:3]
    torch.testing.assert_close(B3 @ A3, best, rtol=1e-3, atol=1e-3)


def test_combine_truncates_the_weighted_sum():
    g = torch.Generator().manual_seed(3)
    parts = [
        (0.3, torch.randn(4, 25, generator=g), torch.randn(30, 4, generator=g)),
        (0.7, torch.randn(4, 25, generator=g), torch.randn(30, 4, generator=g)),
    ]
    A, B = combine(parts, 4)
    assert A.shape == (4, 25) and B.shape == (30, 4)
    total = sum(w * b @ a for w, a, b in parts)
    U, S, Vh = torch.linalg.svd(total)
    torch.testing.assert_close(B @ A, U[:, :4] @ torch.diag(S[:4]) @ Vh[:4], rtol=1e-3, atol=1e-3)
    # identical parents: dependent factors take the fallback and stay exact
    same = [(0.5, parts[0][1], parts[0][2]), (0.5, parts[0][1], parts[0][2])]
    A, B = combine(same, 4)
    torch.testing.assert_close(B @ A, parts[0][2] @ parts[0][1], rtol=1e-3, atol=1e-3)


def test_layer_index():
    assert layer_index("model.layers.12.mlp.up_proj") == 12
    assert layer_index("lm_head") == -1
