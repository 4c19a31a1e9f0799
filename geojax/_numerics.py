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

    Args:
        x: any shape (a squared distance or norm, ≥ 0 up to rounding).
        floor: the edge at and below which the result is 0.

    Returns:
        Same shape as ``x``.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import _numerics
        >>> print(_numerics.safe_sqrt(jnp.array([4.0, 0.0, -1e-9])))
        [2. 0. 0.]
    """
    x = jnp.asarray(x)
    edge = x <= floor
    return jnp.where(edge, 0.0, jnp.sqrt(jnp.where(edge, 1.0, x)))


def safe_norm(x: ArrayLike, axis: int = -1, *, floor: float = 0.0, keepdims: bool = False) -> jax.Array:
    """Euclidean norm along ``axis``, 0 with gradient 0 where it is ≤ ``floor``; NaN in gives NaN out.

    Args:
        x: [..., D] array.
        axis: the axis reduced.
        floor: the norm at and below which the result is 0.
        keepdims: keep the reduced axis (size 1).

    Returns:
        [...] norms (or [..., 1] with ``keepdims``).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import _numerics
        >>> print(_numerics.safe_norm(jnp.array([[3.0, 4.0], [0.0, 0.0]])))
        [5. 0.]
    """
    x = jnp.asarray(x)
    return safe_sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims), floor * floor)


def safe_normalize(x: ArrayLike, axis: int = -1) -> jax.Array:
    """x / ‖x‖ along ``axis``, the norm taken in fp32; zero vectors map to zero with a finite gradient.

    A vector holding NaN or ±Inf comes out all NaN (every entry is divided by its non-finite norm).

    Args:
        x: any shape.
        axis: the axis normalised.

    Returns:
        Same shape and dtype as ``x``.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import _numerics
        >>> print(_numerics.safe_normalize(jnp.array([[3.0, 4.0], [0.0, 0.0]])))
        [[0.6 0.8]
         [0.  0. ]]
    """
    x = jnp.asarray(x)
    sq = jnp.sum(jnp.square(x.astype(jnp.float32)), axis=axis, keepdims=True)
    return (x * lax.rsqrt(jnp.maximum(sq, NORM_FLOOR)) + nan_where_nonfinite(sq, axis=())).astype(x.dtype)


def pairwise_sq_diff(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Σ_d (a_id − b_jd)² summed from the coordinate differences.

    No Gram-expansion cancellation: identical rows give exactly 0. Memory O(N·M·D) unless fused.

    Args:
        a: [..., N, D] array.
        b: [..., M, D] array.

    Returns:
        [..., N, M] squared distances.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import _numerics
        >>> print(_numerics.pairwise_sq_diff(jnp.array([[0.0, 0.0]]), jnp.array([[3.0, 4.0], [0.0, 0.0]])))
        [[25.  0.]]
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    return jnp.sum(jnp.square(a[..., :, None, :] - b[..., None, :, :]), axis=-1)


def safe_div(num: ArrayLike, den: ArrayLike) -> jax.Array:
    """num / den elementwise, and 0 with zero gradient where den == 0.

    Unless num is NaN or ±Inf there, which gives NaN (an empty mean of a non-finite sum is not 0).

    Args:
        num: the numerator.
        den: the denominator, broadcastable with ``num``.

    Returns:
        The quotients.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import _numerics
        >>> print(_numerics.safe_div(jnp.array([1.0, 1.0, jnp.nan]), jnp.array([2.0, 0.0, 0.0])))
        [0.5 0.  nan]
    """
    num, den = jnp.asarray(num), jnp.asarray(den)
    empty = den == 0
    quotient = num / jnp.where(empty, 1.0, den)
    return jnp.where(empty, nan_where_nonfinite(num, axis=(), dtype=quotient.dtype), quotient)


def nan_where_nonfinite(
    x: ArrayLike, axis: int | tuple[int, ...] | None = None, dtype: jax.typing.DTypeLike = jnp.float32
) -> jax.Array:
    """0 where every entry of ``x`` reduced over ``axis`` is finite, NaN where one is NaN or ±Inf.

    The result carries no gradient (it is built from comparisons), so adding it to a value changes neither the
    value (for finite input) nor its derivative.

    Args:
        x: any shape.
        axis: the axes reduced: None reduces over everything (a scalar), ``()`` over nothing (elementwise).
        dtype: the result's dtype.

    Returns:
        ``dtype`` array of the reduced shape.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import _numerics
        >>> print(_numerics.nan_where_nonfinite(jnp.array([[1.0, jnp.inf], [0.0, 1.0]]), axis=1))
        [nan  0.]
    """
    finite = jnp.all(jnp.isfinite(jnp.asarray(x)), axis=axis)
    return jnp.where(finite, jnp.zeros((), dtype), jnp.full((), jnp.nan, dtype))
