"""Guarded square roots, norms, normalisations and divisions shared by every geojax module.

Each guard keeps the value *and* the gradient finite at its edge (a zero vector, a zero squared distance, a
zero denominator) with the double-``where`` pattern: the unsafe operation only ever sees a safe stand-in,
and the result at the edge is chosen by a second ``where``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

# Squared-norm floor of safe_normalize: keeps x / ‖x‖ and its gradient finite at x = 0.
NORM_FLOOR = 1e-24


def safe_sqrt(x: ArrayLike, floor: float = 0.0) -> jax.Array:
    """√x, with value 0 and gradient 0 where x ≤ ``floor``.

    x: any shape (a squared distance or norm, ≥ 0 up to rounding) → same shape.
    """
    x = jnp.asarray(x)
    ok = x > floor
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, x, 1.0)), 0.0)


def safe_norm(x: ArrayLike, axis: int = -1, *, floor: float = 0.0, keepdims: bool = False) -> jax.Array:
    """Euclidean norm along ``axis``, 0 with gradient 0 where it is ≤ ``floor``.

    x: [..., D] → [...] (or [..., 1] with ``keepdims``).
    """
    x = jnp.asarray(x)
    return safe_sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims), floor * floor)


def safe_normalize(x: ArrayLike, axis: int = -1) -> jax.Array:
    """x / ‖x‖ along ``axis``, the norm taken in fp32; zero vectors map to zero with a finite gradient.

    x: any shape → same shape and dtype.
    """
    x = jnp.asarray(x)
    sq = jnp.sum(jnp.square(x.astype(jnp.float32)), axis=axis, keepdims=True)
    return (x * lax.rsqrt(jnp.maximum(sq, NORM_FLOOR))).astype(x.dtype)


def pairwise_sq_diff(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Σ_d (a_id − b_jd)² summed from the coordinate differences (no Gram-expansion cancellation: identical
    rows give exactly 0). a: [..., N, D], b: [..., M, D] → [..., N, M]; memory O(N·M·D) unless fused."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    return jnp.sum(jnp.square(a[..., :, None, :] - b[..., None, :, :]), axis=-1)


def safe_div(num: ArrayLike, den: ArrayLike) -> jax.Array:
    """num / den elementwise, and 0 with zero gradient where den == 0."""
    num, den = jnp.asarray(num), jnp.asarray(den)
    empty = den == 0
    return jnp.where(empty, 0.0, num / jnp.where(empty, 1.0, den))
