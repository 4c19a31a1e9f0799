"""Guarded square roots, norms, normalisations and divisions shared by every geojax module.

Each guard keeps the value *and* the gradient finite at its edge (a zero vector, a zero squared distance, a
zero denominator) with the double-``where`` pattern: the unsafe operation only ever sees a safe stand-in,
and the result at the edge is chosen by a second ``where``. None of them maps a NaN or ±Inf input to a
finite number: the edge tests are written so that a NaN never satisfies them (``x ≤ floor`` and ``den == 0``
are False for NaN), and :func:`nan_where_nonfinite` turns non-finite input that a mask or a selection would
otherwise drop into a NaN that can be added to the result (see docs/conventions.md, "Non-finite input").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

# Squared-norm floor of safe_normalize: keeps x / ‖x‖ and its gradient finite at x = 0.
NORM_FLOOR = 1e-24


def safe_sqrt(x: ArrayLike, floor: float = 0.0) -> jax.Array:
    """√x, with value 0 and gradient 0 where x ≤ ``floor``; NaN stays NaN, +Inf stays +Inf.

    x: any shape (a squared distance or norm, ≥ 0 up to rounding) → same shape.
    """
    x = jnp.asarray(x)
    edge = x <= floor
    return jnp.where(edge, 0.0, jnp.sqrt(jnp.where(edge, 1.0, x)))


def safe_norm(x: ArrayLike, axis: int = -1, *, floor: float = 0.0, keepdims: bool = False) -> jax.Array:
    """Euclidean norm along ``axis``, 0 with gradient 0 where it is ≤ ``floor``; NaN in gives NaN out.

    x: [..., D] → [...] (or [..., 1] with ``keepdims``).
    """
    x = jnp.asarray(x)
    return safe_sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims), floor * floor)


def safe_normalize(x: ArrayLike, axis: int = -1) -> jax.Array:
    """x / ‖x‖ along ``axis``, the norm taken in fp32; zero vectors map to zero with a finite gradient.

    x: any shape → same shape and dtype. A vector holding NaN or ±Inf comes out all NaN (every entry is
    divided by its non-finite norm).
    """
    x = jnp.asarray(x)
    sq = jnp.sum(jnp.square(x.astype(jnp.float32)), axis=axis, keepdims=True)
    return (x * lax.rsqrt(jnp.maximum(sq, NORM_FLOOR)) + nan_where_nonfinite(sq, axis=())).astype(x.dtype)


def pairwise_sq_diff(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Σ_d (a_id − b_jd)² summed from the coordinate differences (no Gram-expansion cancellation: identical
    rows give exactly 0). a: [..., N, D], b: [..., M, D] → [..., N, M]; memory O(N·M·D) unless fused."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    return jnp.sum(jnp.square(a[..., :, None, :] - b[..., None, :, :]), axis=-1)


def safe_div(num: ArrayLike, den: ArrayLike) -> jax.Array:
    """num / den elementwise, and 0 with zero gradient where den == 0 — unless num is NaN or ±Inf there,
    which gives NaN (an empty mean of a non-finite sum is not 0)."""
    num, den = jnp.asarray(num), jnp.asarray(den)
    empty = den == 0
    quotient = num / jnp.where(empty, 1.0, den)
    return jnp.where(empty, nan_where_nonfinite(num, axis=(), dtype=quotient.dtype), quotient)


def nan_where_nonfinite(
    x: ArrayLike, axis: int | tuple[int, ...] | None = None, dtype: jax.typing.DTypeLike = jnp.float32
) -> jax.Array:
    """0 where every entry of ``x`` reduced over ``axis`` is finite, NaN where one is NaN or ±Inf.

    ``axis=None`` reduces over everything (a scalar), ``axis=()`` over nothing (elementwise). The result
    carries no gradient (it is built from comparisons), so adding it to a value changes neither the value
    (for finite input) nor its derivative. x: any shape → ``dtype`` array of the reduced shape.
    """
    finite = jnp.all(jnp.isfinite(jnp.asarray(x)), axis=axis)
    return jnp.where(finite, jnp.zeros((), dtype), jnp.full((), jnp.nan, dtype))
