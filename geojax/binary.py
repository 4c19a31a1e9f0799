"""Binary embedding (Hong, Meng & Yuan 2018): ITQ and Tensorized Projection, fit and encode to packed
sign bits. The "eq." and "§" numbers below are those of Hong, Meng & Yuan 2018.

Data are rows x [N, d]; the paper writes samples as columns (X [d, n]), so its R X is ``x @ R.T`` here.
Codes: sign(0) = +1, bit k of a vector is bit (k mod 8) of byte k // 8 (little-endian, as
``numpy.packbits(..., bitorder='little')``; docs/conventions.md).

Non-finite input: ``itq_fit``, ``tp_fit`` and ``encode`` reject a concrete ``x`` holding NaN or ±inf
(``ValueError`` naming it and counting its bad rows). Under ``jit`` the check cannot run: ``encode`` then
has no NaN bit to give and a NaN coordinate gets an unspecified bit. ``sign`` and ``procrustes`` are
kernels and propagate NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from geojax import _checks, tt
from geojax.quantize import pack_bits

_HIGHEST = jax.lax.Precision.HIGHEST


class ITQ(NamedTuple):
    """Fitted ITQ (Gong & Lazebnik 2011; Hong, Meng & Yuan 2018, eq. 5): codes sign((x − mean) Rᵀ).

    Made by :func:`itq_fit`; a NamedTuple of arrays (a JAX pytree).

    Attributes:
        mean: [d] the training mean.
        projection: R [b, d].
        objective: [iters] ‖B − V Q‖²_F after each iteration (eq. 5 when b ≥ d).

    References:
        Gong & Lazebnik 2011, "Iterative Quantization: A Procrustean Approach to Learning Binary Codes" (CVPR
        2011); Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI
        2018), eq. 5.
    """

    mean: jax.Array  # [d]
    projection: jax.Array  # R [b, d]
    objective: jax.Array  # [iters] ‖B − V Q‖²_F after each iteration (eq. 5 when b ≥ d)


class TP(NamedTuple):
    """Fitted Tensorized Projection (Hong, Meng & Yuan 2018, eq. 9): codes sign(R (x − mean)), R in TT format.

    Made by :func:`tp_fit`; a NamedTuple (a JAX pytree).

    Attributes:
        mean: [d] the training mean.
        projection: R [b, d] as a :class:`geojax.tt.TTMatrix`.
        objective: [iters] eq. 9 after each iteration.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        9.
    """

    mean: jax.Array  # [d]
    projection: tt.TTMatrix  # R [b, d]
    objective: jax.Array  # [iters] eq. 9 after each iteration


def sign(v: ArrayLike) -> jax.Array:
    """Sign with sgn(0) = +1 (Hong, Meng & Yuan 2018, eq. 6), in v's dtype; NaN stays NaN.

    Args:
        v: [...] array.

    Returns:
        [...] ±1 in ``v``'s dtype (NaN where ``v`` is NaN).

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018), eq.
        6.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import binary
        >>> print(binary.sign(jnp.array([-2.0, 0.0, 3.0])))
        [-1.  1.  1.]
    """
    v = jnp.asarray(v)
    return jnp.where(v >= 0, 1, jnp.where(v < 0, -1, v)).astype(v.dtype)


def procrustes(v: ArrayLike, y: ArrayLike) -> jax.Array:
    """Orthogonal Procrustes (Hong, Meng & Yuan 2018, eqs. 11–12): Q = argmin ‖V Q − Y‖_F.

    Q [p, b] has orthonormal rows (p ≤ b) or columns. With Vᵀ Y = U Σ Wᵀ (thin SVD), Q = U Wᵀ. A kernel: NaN
    propagates.

    Args:
        v: [n, p] floating.
        y: [n, b] floating.

    Returns:
        Q [p, b].

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018),
        eqs. 11–12.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import binary
        >>> v = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
        >>> y = jnp.array([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]])
        >>> print(np.asarray(binary.procrustes(v, y), np.float64).round(4) + 0.0)
        [[0. 1.]
         [1. 0.]]
    """
    u, _, wt = jnp.linalg.svd(jnp.matmul(jnp.transpose(v), y, precision=_HIGHEST), full_matrices=False)
    return jnp.matmul(u, wt, precision=_HIGHEST)


def _principal_basis(x: jax.Array, dims: int) -> jax.Array:
    """Top-``dims`` principal directions W [d, dims] of centred x [n, d] (eigenvalues descending).

    Each direction's sign is fixed so that its largest-magnitude entry is positive (deterministic).
    """
    _, vecs = jnp.linalg.eigh(jnp.matmul(x.T, x, precision=_HIGHEST))
    w = vecs[:, ::-1][:, :dims]
    return w * jnp.sign(w[jnp.argmax(jnp.abs(w), axis=0), jnp.arange(dims)])


def _subspace(x: jax.Array, bits: int) -> jax.Array:
    """Basis W [d, p] of the space the rotation acts on: PCA to b dims if b < d (§5.2), else I_d."""
    d = x.shape[1]
    return _principal_basis(x, bits) if bits < d else jnp.eye(d, dtype=x.dtype)


def _check_fit_args(x, bits, iters) -> None:
    """Validation shared by ``itq_fit`` and ``tp_fit``."""
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    _checks.check_positive_int(bits, "bits")
    _checks.check_multiple_of(int(bits), "bits", 8)
    _checks.check_positive_int(iters, "iters")
    _checks.check_finite(x, "x")


@partial(jax.jit, static_argnames=("bits", "iters"))
def _itq(x: jax.Array, key: jax.Array, bits: int, iters: int) -> ITQ:
    mean = jnp.mean(x, axis=0)
    w = _subspace(x - mean, bits)
    v = jnp.matmul(x - mean, w, precision=_HIGHEST)
    q0 = jax.random.orthogonal(key, w.shape[1], dtype=x.dtype, m=bits)

    def step(q, _):
        b = sign(jnp.matmul(v, q, precision=_HIGHEST))
        q = procrustes(v, b)
        return q, jnp.sum(jnp.square(b - jnp.matmul(v, q, precision=_HIGHEST)))

    q, objective = jax.lax.scan(step, q0, None, length=iters)
    return ITQ(mean, jnp.matmul(w, q, precision=_HIGHEST).T, objective)


def itq_fit(x: ArrayLike, bits: int, *, key: jax.Array, iters: int = 50) -> ITQ:
    """Iterative quantisation (Gong & Lazebnik 2011; Hong, Meng & Yuan 2018, eq. 5) to ``bits`` sign bits.

    Centre x; if b < d project to the top-b principal directions V = X W [N, b] and learn a rotation Q [b, b];
    if b ≥ d use eq. 5 directly (V = X, Q [d, b] with orthonormal rows, i.e. the dense R = Qᵀ with orthonormal
    columns, the paper's "ITQ (dense matrix)"). From a random orthogonal Q alternate B = sign(V Q) and the
    Procrustes update of Q; ``objective`` [iters] is ‖B − V Q‖²_F after each iteration (non-increasing). The
    projection is R = (W Q)ᵀ [b, d].

    Args:
        x: [N, d] finite floating training rows.
        bits: b, a positive multiple of 8.
        key: a JAX PRNG key for the initial rotation.
        iters: the number of iterations (a positive int).

    Returns:
        ITQ(mean [d], projection [b, d], objective [iters]).

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix or holds NaN or ±inf; ``bits`` is not a positive
            multiple of 8; ``iters`` is not a positive int.

    References:
        Gong & Lazebnik 2011, "Iterative Quantization: A Procrustean Approach to Learning Binary Codes" (CVPR
        2011); Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI
        2018), eq. 5.

    Example:
        >>> import jax
        >>> from geojax import binary
        >>> x = jax.random.normal(jax.random.key(0), (64, 16))
        >>> model = binary.itq_fit(x, 8, key=jax.random.key(1), iters=10)
        >>> model.projection.shape, model.objective.shape
        ((8, 16), (10,))
    """
    _check_fit_args(x, bits, iters)
    with jax.default_matmul_precision("highest"):
        return _itq(x, key, int(bits), int(iters))


@partial(jax.jit, static_argnames=("bits", "in_modes", "out_modes", "ranks", "iters"))
def _tp(x, key, beta, bits, in_modes, out_modes, ranks, iters) -> TP:
    mean = jnp.mean(x, axis=0)
    xc = x - mean
    w = _subspace(xc, bits)
    v = jnp.matmul(xc, w, precision=_HIGHEST)  # data in the space R̄ rotates, [N, p]
    gram = jnp.matmul(xc.T, xc, precision=_HIGHEST)  # X Xᵀ of eq. 17
    wgram = jnp.matmul(w.T, gram, precision=_HIGHEST)
    q = jax.random.orthogonal(key, w.shape[1], dtype=x.dtype, m=bits)  # R̄ = (W Q)ᵀ, random orthogonal
    r = tt.tt_svd(jnp.matmul(w, q, precision=_HIGHEST).T, out_modes, in_modes, ranks)
    rx = tt.matvec(r, xc)

    def step(carry, _):
        q, r, rx = carry
        c = sign(jnp.matmul(v, q, precision=_HIGHEST))  # eq. 10
        q = procrustes(v, (c + beta * rx) / (1.0 + beta))  # eqs. 11–12
        z = jnp.matmul(v, q, precision=_HIGHEST)  # R̄ X
        r = tt.als_sweep(r, gram, jnp.matmul(q.T, wgram, precision=_HIGHEST))  # eqs. 17–22, T = Z Xᵀ
        rx = tt.matvec(r, xc)
        objective = jnp.sum(jnp.square(z - c)) + beta * jnp.sum(jnp.square(z - rx))  # eq. 9
        return (q, r, rx), objective

    (_, r, _), objective = jax.lax.scan(step, (q, r, rx), None, length=iters)
    return TP(mean, r, objective)


def tp_fit(
    x: ArrayLike,
    bits: int,
    *,
    in_modes: Sequence[int],
    out_modes: Sequence[int],
    rank: int | Sequence[int],
    key: jax.Array,
    beta: float = 1.0,
    iters: int = 10,
) -> TP:
    """Tensorized Projection (Hong, Meng & Yuan 2018, eq. 9) to ``bits`` sign bits with a TT projection.

    min ‖R̄X − C‖² + β‖R̄X − RX‖² s.t. R̄ᵀR̄ = I and R a TT matrix with row modes ``out_modes`` (∏ = bits),
    column modes ``in_modes`` (∏ = d) and TT-rank ``rank``. Data are centred; R̄ starts random orthogonal and
    R at its TT-SVD rounding (§5.4). Each iteration sets C = sign(R̄X) (eq. 10), R̄ by Procrustes on
    Y = (C + βRX)/(1 + β) (eqs. 11–12; for b < d within the top-b principal subspace, R̄ = R̄'P of §5.2), then
    one ALS sweep over the cores (eqs. 17–22). ``objective`` [iters] is eq. 9 after each iteration
    (non-increasing). Ranks larger than an unfolding of R are capped there (see ``tt.tt_svd``).

    Args:
        x: [N, d] finite floating training rows.
        bits: b, a positive multiple of 8.
        in_modes: the TT column modes, ∏ = d.
        out_modes: the TT row modes, ∏ = bits.
        rank: the TT-rank, an int or the full list r_0 … r_t.
        key: a JAX PRNG key for the initial rotation.
        beta: β, a finite number ≥ 0.
        iters: the number of iterations (a positive int).

    Returns:
        TP(mean [d], projection TTMatrix [b, d], objective [iters]).

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix or holds NaN or ±inf; ``bits`` is not a positive
            multiple of 8; ``iters`` is not a positive int; the modes do not multiply to d and bits or are
            malformed; ``rank`` is malformed; ``beta`` is not a finite number ≥ 0.

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018),
        eqs. 9–22, §5.2, §5.4.

    Example:
        >>> import jax
        >>> from geojax import binary
        >>> x = jax.random.normal(jax.random.key(0), (64, 16))
        >>> model = binary.tp_fit(x, 16, in_modes=(4, 4), out_modes=(4, 4), rank=2,
        ...                       key=jax.random.key(1), iters=2)
        >>> model.projection.shape, model.objective.shape
        ((16, 16), (2,))
    """
    _check_fit_args(x, bits, iters)
    out_modes, in_modes = tt._check_modes(out_modes, in_modes)
    if math.prod(in_modes) != jnp.shape(x)[1]:
        raise ValueError(f"in_modes must multiply to d = {jnp.shape(x)[1]} (x's width), got {in_modes}")
    if math.prod(out_modes) != bits:
        raise ValueError(f"out_modes must multiply to bits = {bits}, got {out_modes}")
    ranks = tt._full_ranks(rank, len(in_modes), name="rank")
    if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 <= beta < math.inf:
        raise ValueError(f"beta must be a finite number ≥ 0, got {beta!r}")
    with jax.default_matmul_precision("highest"):
        return _tp(x, key, float(beta), int(bits), in_modes, out_modes, ranks, int(iters))


def encode(model: ITQ | TP, x: ArrayLike) -> jax.Array:
    """Packed sign bits (Hong, Meng & Yuan 2018, eq. 6) of x under a fitted ITQ or TP model.

    TP projects with the TT matrix-by-vector product (eq. 4): its cores merged as ``tt.plan`` chooses (an
    exact regrouping; only for a small matrix may that be all cores, the dense matrix) and the batch run in
    slabs of rows, each slab centred, projected, signed and packed before the next (``tt.map_rows``). Bit k of
    a vector is bit (k mod 8) of byte k // 8; sign(0) = +1.

    Args:
        model: a fitted :class:`ITQ` or :class:`TP`.
        x: [..., d] floating vectors of the fitted width.

    Returns:
        [..., b/8] uint8 packed codes.

    Raises:
        ValueError: ``model`` is not an ITQ or TP; ``x`` is not floating with last dimension d; a concrete
            ``x`` holds NaN or ±inf (a traced one is not checked: module docstring).

    References:
        Hong, Meng & Yuan 2018, "Tensorized Projection for High-Dimensional Binary Embedding" (AAAI 2018),
        eqs. 4 and 6.

    Example:
        >>> import jax
        >>> from geojax import binary
        >>> x = jax.random.normal(jax.random.key(0), (64, 16))
        >>> codes = binary.encode(binary.itq_fit(x, 8, key=jax.random.key(1), iters=10), x)
        >>> codes.shape, codes.dtype
        ((64, 1), dtype('uint8'))
    """
    if not isinstance(model, ITQ | TP):
        raise ValueError(f"model must be a fitted ITQ or TP, got {type(model).__name__}")
    _checks.check_floating(x, "x")
    d = model.mean.shape[0]
    if jnp.ndim(x) < 1 or jnp.shape(x)[-1] != d:
        raise ValueError(f"x must have last dimension {d} (the fitted width), got {tuple(jnp.shape(x))}")
    _checks.check_finite(x, "x")
    if isinstance(model, ITQ):
        return pack_bits(jnp.matmul(x - model.mean, model.projection.T) >= 0)
    plan = tt.plan(model.projection)
    merged = tt.merge_cores(model.projection, plan.groups)
    rows = jnp.asarray(x).reshape(-1, d)
    codes = tt.map_rows(lambda r: pack_bits(tt.matvec(merged, r - model.mean) >= 0), rows, plan.block)
    return codes.reshape(*jnp.shape(x)[:-1], codes.shape[-1])
