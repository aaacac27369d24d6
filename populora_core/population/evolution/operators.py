"""Mutation (M1–M4) and crossover (X1–X4) of LoRA adapters (PopuLoRA paper, 2026).

Every operator is a pure function of its parents, its settings and an explicit
``torch.Generator``; children keep rank r, α and the module set. Each docstring
says whether the operator acts on ΔW (via the factored SVD of lora.py, never
forming the d_out × d_in matrix) or on the factors A, B directly. All ΔW
formulas below are up to the common scale α / r.

Operators on ΔW write the child U' S' V'ᵀ back as A' = a·V'ᵀ, B' = U'·S'/a with
a = ``factor_scale`` of the (first or better) parent, module by module: the
parent's A scale, so a child learns as fast as its parent (see ``lora.factor_scale``).
Every child keeps r trainable components: A has full row rank r, and no
component has both its A row and its B column at zero (a point where both
gradients vanish forever).

Operators are registered in ``OPERATORS`` (an explicit dict); ``get_operator``
names the valid keys on a miss. Each returns the child and the parameters it
drew, which go into lineage.parquet.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from populora_core.population.lora import (
    LoraAdapter,
    LoraFactors,
    combine,
    factor_scale,
    factored_svd,
    layer_index,
    reproject,
    split,
    svd_core,
    svd_factors,
)


def _randn_like(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(x.shape, generator=gen, dtype=x.dtype, device=gen.device).to(x.device)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean().sqrt().clamp_min(1e-12)


ROTATION_DIRECTIONS = 4


def _rotation(
    Y: torch.Tensor, T: torch.Tensor, scale: torch.Tensor, step: float, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A small rotation U' of the orthonormal basis U = Yᵀ T (Y: k × d), returned
    as (M, H⊥, N) with U' diag(scale) = Yᵀ M + H⊥ᵀ N, so callers write either
    layout (B' = B M + H⊥ᵀ N, or A' = Mᵀ A + Nᵀ H⊥) without a transposed copy.

    U' = orth(U·exp(step·K) + step·(I − UUᵀ)·G·W/√d): K = (M₀ − M₀ᵀ)/2 skew-symmetric
    (M₀ ~ N(0, 1/k)) turns the basis within span(U); G = Hᵀ (d × m) and
    W (m × k) ~ N(0, 1/m) tilt it out along m = 4 random directions. The two terms
    are orthogonal, so their Gram matrix is I + c²·Wᵀ(H⊥H⊥ᵀ)W (c = step/√d) and
    orth() is one Cholesky of a k × k matrix. Cost O(d k²); no d × d matrix."""
    k, d = Y.shape
    m = min(k, ROTATION_DIRECTIONS)
    draw = {"generator": gen, "dtype": Y.dtype, "device": gen.device}  # drawn where the generator is
    M0 = torch.randn((k, k), **draw).to(Y.device) / k**0.5
    E = torch.linalg.matrix_exp(step * (M0 - M0.T) / 2)  # (k, k) rotation
    H = torch.randn((m, d), **draw).to(Y.device)
    W = torch.randn((m, k), **draw).to(Y.device) / m**0.5
    H_perp = H - ((H @ Y.T) @ T @ T.T) @ Y  # (m, d): rows orthogonal to span(U)
    c = step / d**0.5
    gram = torch.eye(k, dtype=torch.float64, device=Y.device) + c**2 * (W.T @ (H_perp @ H_perp.T) @ W).to(torch.float64)
    L_inv_t = torch.linalg.inv(torch.linalg.cholesky(gram)).T.to(Y.dtype)  # (k, k)
    return (T @ E @ L_inv_t) * scale[None, :], H_perp, (c * W @ L_inv_t) * scale[None, :]


def svd_perturbation(parent: LoraAdapter, gen: torch.Generator, *, sigma: float = 0.1, step: float = 0.05):
    """M1, on ΔW. With ΔW = U S Vᵀ (factored SVD):
    S' = S ⊙ exp(σ·ε), ε ~ N(0, I)  (multiplicative singular-value noise),
    U' = rotate(U, step), V' = rotate(V, step)  (see ``_rotation``);  ΔW' = U' S' V'ᵀ,
    written back as B' = U'·S'/a, A' = a·V'ᵀ (module docstring)."""
    modules = {}
    for name, f in parent:
        a = factor_scale(f)
        core = svd_core(f.B, f.A)
        if core is None:  # rank-deficient factors: explicit orthonormal bases
            U, S, V = factored_svd(f.B, f.A)
            B, A = U, V.T.contiguous()
            T_u = T_v = torch.eye(S.shape[0], dtype=S.dtype, device=S.device)
        else:
            (T_u, S, T_v), B, A = core, f.B, f.A
        s_a, s_b = split(S * torch.exp(sigma * _randn_like(S, gen)), a)
        M, H, N = _rotation(B.T, T_u, s_b, step, gen)
        B_new = torch.addmm(H.T @ N, B, M)
        M, H, N = _rotation(A, T_v, s_a, step, gen)
        A_new = torch.addmm(N.T @ H, M.T, A)
        modules[name] = LoraFactors(A=A_new, B=B_new)
    return parent.with_modules(modules), {"sigma": sigma, "step": step}


def layer_noise(parent: LoraAdapter, gen: torch.Generator, *, fraction: float = 0.25, sigma: float = 0.1):
    """M2, on the factors. Picks ⌈fraction·L⌉ of the L layers; in each picked
    module, X ← X + σ·rms(X)·ε for X ∈ {A, B}, ε ~ N(0, I) (noise scaled per tensor)."""
    layers = sorted({layer_index(n) for n in parent.modules})
    n_pick = max(1, round(fraction * len(layers)))
    order = torch.randperm(len(layers), generator=gen, device=gen.device)[:n_pick].tolist()
    picked = {layers[i] for i in order}
    modules = {}
    for name, f in parent:
        if layer_index(name) in picked:
            f = LoraFactors(
                A=f.A + sigma * _rms(f.A) * _randn_like(f.A, gen), B=f.B + sigma * _rms(f.B) * _randn_like(f.B, gen)
            )
        modules[name] = f
    return parent.with_modules(modules), {"fraction": fraction, "sigma": sigma, "layers": sorted(picked)}


def component_mask(parent: LoraAdapter, gen: torch.Generator, *, fraction: float = 0.25):
    """M3, on ΔW. With ΔW = U S Vᵀ, zero a random ⌈fraction·r⌉ of the r singular
    components: ΔW' = U (S ⊙ m) Vᵀ, m ∈ {0, 1}^r (the same indices in every module).
    A masked component keeps B's column at zero (so ΔW is masked) and gets a fresh
    A row: a Gaussian direction with the parent's row norm a. Its gradient
    ∂L/∂B_i = G A_iᵀ is non-zero, so it learns again."""
    r = parent.rank
    n_mask = max(1, round(fraction * r))
    masked = torch.randperm(r, generator=gen, device=gen.device)[:n_mask]
    keep = torch.ones(r, device=gen.device)
    keep[masked] = 0.0
    modules = {}
    for name, f in parent:
        a = factor_scale(f)
        core = svd_core(f.B, f.A)
        if core is None:
            U, S, V = factored_svd(f.B, f.A)
            A, B = svd_factors(U, S * keep.to(S), V, a)
        else:
            T_u, S, T_v = core
            A, B = reproject(f.A, f.B, T_u, S * keep.to(S), T_v, a)
        fresh = _randn_like(A[masked], gen)
        A[masked] = a * fresh / fresh.norm(dim=1, keepdim=True).clamp_min(1e-12)
        modules[name] = LoraFactors(A=A, B=B)
    return parent.with_modules(modules), {"fraction": fraction, "masked": sorted(masked.tolist())}


def gaussian_noise(parent: LoraAdapter, gen: torch.Generator, *, sigma: float = 0.05):
    """M4, on the factors: X ← X + σ·rms(X)·ε for every A and B, ε ~ N(0, I)."""
    modules = {
        name: LoraFactors(
            A=f.A + sigma * _rms(f.A) * _randn_like(f.A, gen), B=f.B + sigma * _rms(f.B) * _randn_like(f.B, gen)
        )
        for name, f in parent
    }
    return parent.with_modules(modules), {"sigma": sigma}


def _keep_mask(shape: torch.Size, p: float, gen: torch.Generator) -> tuple[torch.Tensor, float]:
    """A Bernoulli(1 − p̂) mask and p̂ = round(256·p)/256: eight mask bytes per
    64-bit draw, ~8× fewer generator calls than one uniform per entry."""
    n = math.prod(shape)
    drop = round(256 * p)
    raw = torch.randint(-(2**63), 2**63 - 1, ((n + 7) // 8,), dtype=torch.int64, generator=gen, device=gen.device)
    mask = raw.view(torch.uint8)[:n].reshape(shape) >= drop
    return mask, drop / 256


def dare(x: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    """Drop And REscale (Yu et al., 2024): x ⊙ m / (1 − p), m ~ Bernoulli(1 − p)
    (p rounded to a multiple of 1/256); E[dare(x)] = x."""
    keep, p_hat = _keep_mask(x.shape, p, gen)
    return torch.where(keep.to(x.device), x, 0.0).mul_(1.0 / (1.0 - p_hat))


def dare_merge(a: LoraAdapter, b: LoraAdapter, gen: torch.Generator, *, p: float = 0.5, weight: float = 0.5):
    """X1: DARE on the factors, combination on ΔW. Each parent's A gets a DARE
    mask (ΔW̃ = B·dare(A); E[ΔW̃] = ΔW since the mask is unbiased — masking B too
    would only add variance), then ΔW' = trunc_r( w·ΔW̃₁ + (1 − w)·ΔW̃₂ ) by the
    factored SVD of the stacked factors, scaled as parent a."""
    modules = {}
    for name, fa in a:
        fb = b.modules[name]
        # dare(A) = mask(A)/(1 − p̂): the rescale rides on the combination weight.
        (keep_a, p_hat), (keep_b, _) = _keep_mask(fa.A.shape, p, gen), _keep_mask(fb.A.shape, p, gen)
        scale = 1.0 / (1.0 - p_hat)
        parts = [
            (weight * scale, torch.where(keep_a, fa.A, 0.0), fa.B),
            ((1.0 - weight) * scale, torch.where(keep_b, fb.A, 0.0), fb.B),
        ]
        A, B = combine(parts, a.rank, factor_scale(fa))
        modules[name] = LoraFactors(A=A, B=B)
    return a.with_modules(modules), {"p": p, "weight": weight}


def layer_crossover(a: LoraAdapter, b: LoraAdapter, gen: torch.Generator):
    """X2, on the factors: every layer's modules are copied whole from parent a
    or parent b, each with probability 1/2 (modules outside layers come from a)."""
    layers = sorted({layer_index(n) for n in a.modules})
    from_b = {
        layer
        for layer, coin in zip(layers, torch.rand(len(layers), generator=gen, device=gen.device).tolist(), strict=True)
        if coin < 0.5
    }
    from_b.discard(-1)
    modules = {name: (b.modules[name] if layer_index(name) in from_b else f) for name, f in a}
    return a.with_modules(modules), {"layers_from_b": sorted(from_b)}


def subspace_mix(a: LoraAdapter, b: LoraAdapter, gen: torch.Generator, *, k: int | None = None):
    """X3, on ΔW: a splice of the two SVD spectra. With ΔW_a = Σᵢ s_a,i u_a,i v_a,iᵀ and
    ΔW_b likewise (singular values decreasing):
    ΔW' = Σ_{i ≤ k} s_a,i u_a,i v_a,iᵀ + Σ_{k < i ≤ r} s_b,i u_b,i v_b,iᵀ,
    components 1..k of a and k+1..r of b; k ~ U{1, …, r−1} unless given. X3(a, a) = a."""
    r = a.rank
    if k is None:
        k = int(torch.randint(1, max(2, r), (1,), generator=gen, device=gen.device).item())
    modules = {}
    for name, fa in a:
        scale = factor_scale(fa)
        A_a, B_a = _components(fa, 0, k, scale)
        A_b, B_b = _components(b.modules[name], k, r, scale)
        modules[name] = LoraFactors(A=torch.cat([A_a, A_b], dim=0), B=torch.cat([B_a, B_b], dim=1))
    return a.with_modules(modules), {"k": k}


def _components(f: LoraFactors, lo: int, hi: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, B) of SVD components lo+1..hi (1-based, decreasing singular values) of one module's ΔW."""
    core = svd_core(f.B, f.A)
    if core is None:
        U, S, V = factored_svd(f.B, f.A)
        return svd_factors(U[:, lo:hi], S[lo:hi], V[:, lo:hi], scale)
    T_u, S, T_v = core
    return reproject(f.A, f.B, T_u[:, lo:hi], S[lo:hi], T_v[:, lo:hi], scale)


def task_arithmetic(better: LoraAdapter, worse: LoraAdapter, gen: torch.Generator, *, eta: float | None = None):
    """X4, on ΔW: extrapolative task arithmetic,
    ΔW' = trunc_r( ΔW_worse + η·(ΔW_better − ΔW_worse) ) = trunc_r( (1 − η)·ΔW_worse + η·ΔW_better ),
    η ~ U[1, 1.5] unless given (η > 1 extrapolates past the better parent); the rank-2r
    sum is brought back to r by the factored SVD (``lora.combine``), scaled as the better
    parent. On the factors separately it would mix unrelated A's: B'A' would carry the
    cross terms B_w A_b and B_b A_w, and scale ΔW_better by η²."""
    if eta is None:
        eta = 1.0 + 0.5 * float(torch.rand((), generator=gen, device=gen.device).item())
    modules = {}
    for name, fw in worse:
        fb = better.modules[name]
        A, B = combine([(1.0 - eta, fw.A, fw.B), (eta, fb.A, fb.B)], better.rank, factor_scale(fb))
        modules[name] = LoraFactors(A=A, B=B)
    return better.with_modules(modules), {"eta": eta}


Mutation = Callable[..., tuple[LoraAdapter, dict]]
MUTATIONS: dict[str, Mutation] = {
    "M1": svd_perturbation,
    "M2": layer_noise,
    "M3": component_mask,
    "M4": gaussian_noise,
}
CROSSOVERS: dict[str, Mutation] = {
    "X1": dare_merge,
    "X2": layer_crossover,
    "X3": subspace_mix,
    "X4": task_arithmetic,
}
OPERATORS: dict[str, Mutation] = {**MUTATIONS, **CROSSOVERS}
OPERATOR_NAMES: dict[str, str] = {
    "M1": "SVD-structured perturbation",
    "M2": "layer-selective Gaussian noise",
    "M3": "component masking",
    "M4": "full Gaussian noise",
    "X1": "DARE merge",
    "X2": "layer-wise selection",
    "X3": "SVD subspace mixing",
    "X4": "extrapolative task arithmetic",
}


def get_operator(name: str) -> Mutation:
    """The operator registered as ``name``; a miss lists the valid names."""
    try:
        return OPERATORS[name]
    except KeyError:
        raise KeyError(f"unknown evolution operator {name!r}; valid: {sorted(OPERATORS)}") from None


def apply_operator(
    name: str, parents: list[LoraAdapter], gen: torch.Generator, params: dict | None = None
) -> tuple[LoraAdapter, dict]:
    """Runs operator ``name`` on ``parents`` (1 for M*, 2 for X*; for X4 the
    first is the better parent). Returns (child, parameters used)."""
    op = get_operator(name)
    need = 1 if name in MUTATIONS else 2
    if len(parents) != need:
        raise ValueError(f"operator {name} takes {need} parent(s), got {len(parents)}")
    return op(*parents, gen, **(params or {}))
