"""LoRA adapters as plain tensors, and their SVD without forming ΔW.

A LoRA module holds factors A (r × d_in) and B (d_out × r); its update is
ΔW = (α / r) · B · A. Every member of a population shares r, α and the target
modules, so the scale α / r is common and operators can work on B · A.

Factored SVD (never forms the d_out × d_in matrix):
    B = Q_B R_B,  Aᵀ = Q_A R_A          (thin QR, Q_B: d_out × r, Q_A: d_in × r)
    B A = Q_B (R_B R_Aᵀ) Q_Aᵀ,  R_B R_Aᵀ = U_c S V_cᵀ   (SVD of an r × r core)
    U = Q_B U_c,  V = Q_A V_c,   so   B A = U diag(S) Vᵀ.
Cost O((d_out + d_in) r²), which is what makes children take well under a
second at 7B scale.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LoraFactors:
    """One module's factors: A (r, d_in) and B (d_out, r)."""

    A: torch.Tensor  # (r, d_in)
    B: torch.Tensor  # (d_out, r)

    @property
    def rank(self) -> int:
        return self.A.shape[0]


@dataclass(frozen=True)
class LoraAdapter:
    """A whole adapter: factors per module path (e.g. ``model.layers.3.self_attn.q_proj``)."""

    modules: dict[str, LoraFactors]
    rank: int
    alpha: float

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank

    def __iter__(self) -> Iterator[tuple[str, LoraFactors]]:
        return iter(self.modules.items())

    def with_modules(self, modules: dict[str, LoraFactors]) -> LoraAdapter:
        return LoraAdapter(modules=modules, rank=self.rank, alpha=self.alpha)

    def num_parameters(self) -> int:
        return sum(f.A.numel() + f.B.numel() for f in self.modules.values())

    def delta(self, name: str) -> torch.Tensor:
        """ΔW of one module, formed explicitly: for tests and small shapes only."""
        f = self.modules[name]
        return self.scaling * (f.B @ f.A)


def layer_index(module_name: str) -> int:
    """The transformer layer a module belongs to (``...layers.<i>...``), or -1."""
    parts = module_name.split(".")
    for prev, part in itertools.pairwise(parts):
        if prev in ("layers", "h", "blocks") and part.isdigit():
            return int(part)
    return -1


def _gram_factor(X: torch.Tensor) -> torch.Tensor | None:
    """Lower-triangular L (float64) with XᵀX = L Lᵀ, or None when any X is
    (near) rank-deficient: cond(X) > 1e6 would cost Cholesky QR its accuracy."""
    L, info = torch.linalg.cholesky_ex((X.mT @ X).to(torch.float64))  # (…, k, k)
    if bool(info.any()):
        return None
    d = torch.diagonal(L, dim1=-2, dim2=-1)
    if bool((d.min(-1).values <= 1e-6 * d.max(-1).values).any()):
        return None
    return L


def _left_solve_t(L: torch.Tensor, X: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """L⁻ᵀ X for lower-triangular L, cast to ``dtype``."""
    return torch.linalg.solve_triangular(L.mT, X, upper=True).to(dtype)


def svd_core(B: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(T_u, S, T_v) with B @ A = U diag(S) Vᵀ for U = B T_u, V = Aᵀ T_v, or None
    when a factor is rank-deficient or badly conditioned.

    Cholesky QR: B = Q_B L_Bᵀ with L_B = chol(BᵀB), likewise Aᵀ = Q_A L_Aᵀ; the
    r × r core L_Bᵀ L_A = U_c S V_cᵀ is decomposed in float64, and
    T_u = L_B⁻ᵀ U_c, T_v = L_A⁻ᵀ V_c. Q_B and Q_A are never formed.
    """
    L_b, L_a = _gram_factor(B), _gram_factor(A.mT)
    if L_b is None or L_a is None:
        return None
    u_c, s, vh_c = torch.linalg.svd(L_b.mT @ L_a)  # float64 (…, k, k)
    return _left_solve_t(L_b, u_c, B.dtype), s.to(B.dtype), _left_solve_t(L_a, vh_c.mT, A.dtype)


def factored_svd(
    B: torch.Tensor, A: torch.Tensor, k: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """U (…, d_out, k), S (…, k), V (…, d_in, k): the top k (default all) singular
    triplets of B @ A, singular values decreasing. Uses ``svd_core``; factors it
    cannot take go through Householder QR (QR of B and Aᵀ, then the SVD of R_B R_Aᵀ)."""
    core = svd_core(B, A)
    if core is None:
        q_b, r_b = torch.linalg.qr(B)  # (…, d_out, r), (…, r, r)
        q_a, r_a = torch.linalg.qr(A.mT)  # (…, d_in, r), (…, r, r)
        u_c, s, vh_c = torch.linalg.svd(r_b @ r_a.mT)
        return q_b @ u_c[..., :k], s[..., :k], q_a @ vh_c.mT[..., :k]
    T_u, s, T_v = core
    return B @ T_u[..., :k], s[..., :k], A.mT @ T_v[..., :k]


def factor_scale(f: LoraFactors) -> float:
    """a = ‖A‖_F / √r, the RMS norm of A's rows; for an all-zero A, 1/√d_in (the bound of
    PEFT's Kaiming-uniform init), so a child's A rows are never zero.

    Operators write a child as A' = a·V'ᵀ, B' = U'·S'/a (``split``) instead of the
    balanced √S each: LoRA learns through the other factor (∂L/∂B = G Aᵀ), and a young
    adapter's A rows are far larger than √S, so a balanced child moved 0.46× as far as
    its parent in 10 Adam steps at lr 1e-5, the parent-scaled one 0.99×
    (benchmarks/operator_checks.py; tests/core/population/test_operators.py).
    """
    a = float(f.A.norm()) / f.A.shape[0] ** 0.5
    return a if a > 0 else 1.0 / f.A.shape[1] ** 0.5


def split(S: torch.Tensor, a: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(row scales of A, column scales of B) for singular values S: (a, S/a), or
    (√S, √S) when a is None (balanced)."""
    if a is None:
        root = S.clamp_min(0).sqrt()
        return root, root
    return torch.full_like(S, a), S.clamp_min(0) / a


def reproject(
    A: torch.Tensor,
    B: torch.Tensor,
    T_u: torch.Tensor,
    S: torch.Tensor,
    T_v: torch.Tensor,
    a: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A', B') = (diag(s_A) T_vᵀ A, B T_u diag(s_B)), (s_A, s_B) = ``split(S, a)``: the
    factors of U diag(S) Vᵀ for U = B T_u, V = Aᵀ T_v, with the scales folded into the
    small matrices: one d × r × k product per factor and no transposed copy. Pass
    column slices of T for a top-k truncation."""
    s_a, s_b = split(S, a)
    return (s_a[:, None] * T_v.mT) @ A, B @ (T_u * s_b[None, :])


def svd_factors(
    U: torch.Tensor, S: torch.Tensor, V: torch.Tensor, a: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) = (diag(s_A) Vᵀ, U diag(s_B)), (s_A, s_B) = ``split(S, a)``: B @ A = U diag(S) Vᵀ."""
    s_a, s_b = split(S, a)
    return (s_a[..., :, None] * V.mT).contiguous(), (U * s_b[..., None, :]).contiguous()


def delta_change(before: LoraAdapter, after: LoraAdapter) -> float:
    """‖ΔW_after − ΔW_before‖_F / ‖ΔW_before‖_F over all modules (α / r cancels).

    ‖B'A' − BA‖² = ⟨G_B, G_A⟩ for the 2r × 2r Grams of [B' | −B] and [A'; A] (and
    ‖BA‖² = ⟨BᵀB, AAᵀ⟩), so no d_out × d_in matrix is formed."""
    num = den = 0.0
    for name, f in before:
        g = after.modules[name]
        num += _sq_norm(torch.cat([g.B, -f.B], dim=1), torch.cat([g.A, f.A], dim=0))
        den += _sq_norm(f.B, f.A)
    num = max(num, 0.0)
    return (num / den) ** 0.5 if den > 0 else float("inf") if num > 0 else 0.0


def _sq_norm(B: torch.Tensor, A: torch.Tensor) -> float:
    """‖B·A‖_F² = ⟨BᵀB, AAᵀ⟩ (float64)."""
    B, A = B.double(), A.double()
    return float(((B.T @ B) * (A @ A.T)).sum())


def truncate(B: torch.Tensor, A: torch.Tensor, rank: int, a: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B): the best rank-``rank`` factors of B @ A (Eckart–Young), scaled by ``split``."""
    return svd_factors(*factored_svd(B, A, rank), a)


def _block_factor(blocks: list[torch.Tensor], weights: list[float]) -> torch.Tensor | None:
    """Cholesky factor L (float64) of XᵀX for X = [w₁X₁ | w₂X₂ | …], assembled
    block by block (wᵢwⱼ·XᵢᵀXⱼ) so X is never formed; None when X is rank-deficient."""
    n = len(blocks)
    rows: list[list[torch.Tensor]] = [[None] * n for _ in range(n)]  # type: ignore[list-item]
    for i in range(n):
        for j in range(i, n):
            g = (blocks[i].T @ blocks[j]).to(torch.float64) * (weights[i] * weights[j])
            rows[i][j], rows[j][i] = g, g.T
    L, info = torch.linalg.cholesky_ex(torch.cat([torch.cat(r, dim=1) for r in rows], dim=0))
    if info.item() != 0:
        return None
    d = torch.diagonal(L)
    return None if d.min() <= 1e-6 * d.max() else L


def _top_svd(C: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top ``rank`` singular triplets (U, S, V) of a small float64 matrix C.

    From the eigendecomposition of CᵀC (about twice as fast as a full SVD at
    64 × 64): V, S = √λ, U = C V / S. If a kept S is not well above zero, the
    full SVD is used instead, since U cannot be recovered that way.
    """
    evals, evecs = torch.linalg.eigh(C.T @ C)  # ascending
    lam = evals.flip(0)[:rank]
    if lam[-1] <= 1e-12 * lam[0].clamp_min(1e-300):
        u, s, vh = torch.linalg.svd(C)
        return u[:, :rank], s[:rank], vh.T[:, :rank]
    V = evecs.flip(1)[:, :rank]
    S = lam.sqrt()
    return (C @ V) / S[None, :], S, V


def combine(
    parts: list[tuple[float, torch.Tensor, torch.Tensor]], rank: int, a: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of Σ wᵢ Bᵢ Aᵢ brought back to rank ``rank``; ``parts`` are (wᵢ, Aᵢ, Bᵢ),
    weights of any sign; the factors are scaled by ``split(S, a)``.

    Σ wᵢ BᵢAᵢ = [w₁B₁ | w₂B₂ | …][A₁; A₂; …] has rank ≤ Σ rᵢ. Its truncated SVD
    follows ``svd_core`` on these stacked factors, with the Gram matrices
    assembled block by block, and the weights and the ``split`` scales folded into the small
    matrices (see ``reproject``), so no d-sized matrix is copied or rescaled.
    """
    weights = [w for w, _, _ in parts]
    L_b = _block_factor([B for _, _, B in parts], weights)
    L_a = _block_factor([A.T for _, A, _ in parts], [1.0] * len(parts))
    if L_b is None or L_a is None:  # dependent parents (e.g. a parent crossed with itself)
        B = torch.cat([w * B for w, _, B in parts], dim=1)
        return truncate(B, torch.cat([A for _, A, _ in parts], dim=0), rank, a)
    u_c, s, v_c = _top_svd(L_b.T @ L_a, rank)
    s_a, s_b = split(s, a)
    dtype = parts[0][1].dtype
    T_u = (_left_solve_t(L_b, u_c, torch.float64) * s_b[None, :]).to(dtype)  # (Σr, rank)
    T_v = (_left_solve_t(L_a, v_c, torch.float64) * s_a[None, :]).to(dtype)
    A_new = B_new = None
    o = 0
    for w, A, B in parts:
        k = B.shape[1]
        t_u, t_v = w * T_u[o : o + k], T_v[o : o + k].T
        if A_new is None:
            A_new, B_new = t_v @ A, B @ t_u
        else:
            A_new.addmm_(t_v, A)
            B_new.addmm_(B, t_u)
        o += k
    return A_new, B_new
