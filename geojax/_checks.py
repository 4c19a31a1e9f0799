"""Argument validation shared by every geojax module.

Every check raises a ``ValueError`` that names the argument and states what was expected. Shape and dtype
checks run on static information at the Python level, before tracing. The value checks
(:func:`check_finite`, :func:`check_index_range`) read the data, so they run only on concrete arrays and are
skipped for tracers: host-side entry points reject bad values before any work, while under ``jit``,
``vmap`` or ``grad`` the kernels propagate NaN instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def check_rank(x, name: str, rank: int | Sequence[int]) -> None:
    """Raise unless ``x.ndim`` is ``rank`` (or one of ``rank``)."""
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    if jnp.ndim(x) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{name} must have rank {want}, got shape {tuple(jnp.shape(x))}")


def check_min_rank(x, name: str, rank: int) -> None:
    """Raise unless ``x.ndim ≥ rank``."""
    if jnp.ndim(x) < rank:
        raise ValueError(f"{name} must have rank ≥ {rank}, got shape {tuple(jnp.shape(x))}")


def check_matrix(x, name: str) -> None:
    """Raise unless ``x`` is a 2-D array ``[N, D]`` with N ≥ 1 and D ≥ 1."""
    check_rank(x, name, 2)
    if 0 in jnp.shape(x):
        raise ValueError(f"{name} must be a non-empty [N, D] matrix, got shape {tuple(jnp.shape(x))}")


def check_floating(x, name: str) -> None:
    """Raise unless ``x`` has a floating dtype."""
    if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
        raise ValueError(f"{name} must have a floating dtype, got {jnp.result_type(x)}")


def check_dtype(x, name: str, dtype) -> None:
    """Raise unless ``x`` has exactly ``dtype``."""
    if jnp.result_type(x) != jnp.dtype(dtype):
        raise ValueError(f"{name} must have dtype {jnp.dtype(dtype).name}, got {jnp.result_type(x)}")


def check_integer(x, name: str) -> None:
    """Raise unless ``x`` has an integer (or bool) dtype."""
    dt = jnp.result_type(x)
    if not (jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_):
        raise ValueError(f"{name} must have an integer dtype, got {dt}")


def check_same_width(a, b, name_a: str, name_b: str) -> None:
    """Raise unless the last axes of ``a`` and ``b`` agree."""
    if jnp.shape(a)[-1] != jnp.shape(b)[-1]:
        raise ValueError(
            f"{name_a} and {name_b} must have the same last dimension, got "
            f"{tuple(jnp.shape(a))} and {tuple(jnp.shape(b))}"
        )


def check_length(x, name: str, n: int, what: str) -> None:
    """Raise unless ``x`` has leading dimension ``n`` (``what`` says where ``n`` comes from)."""
    if jnp.ndim(x) < 1 or jnp.shape(x)[0] != n:
        raise ValueError(f"{name} must have length {n} ({what}), got shape {tuple(jnp.shape(x))}")


def check_even(n: int, name: str) -> None:
    """Raise unless ``n`` is even (pairs of coordinates are needed)."""
    if n % 2:
        raise ValueError(f"{name} must be even (adjacent coordinate pairs), got {n}")


def check_positive_int(v, name: str) -> None:
    """Raise unless ``v`` is a Python/NumPy integer ≥ 1."""
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def check_k(k, name: str, n: int, what: str) -> None:
    """Raise unless ``1 ≤ k ≤ n``."""
    check_positive_int(k, name)
    if k > n:
        raise ValueError(f"{name} must be at most {n} ({what}), got {k}")


def check_choice(v, name: str, choices: Sequence[str]) -> None:
    """Raise unless ``v`` is one of ``choices``."""
    if v not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {v!r}")


def check_multiple_of(n: int, name: str, m: int) -> None:
    """Raise unless ``n`` is a positive multiple of ``m``."""
    if n < 1 or n % m:
        raise ValueError(f"{name} must be a positive multiple of {m}, got {n}")


def is_traced(x) -> bool:
    """True when ``x`` is a tracer (inside ``jit``, ``vmap``, ``grad``…), whose values cannot be read."""
    return isinstance(x, jax.core.Tracer)


def _values(x):
    """(array module, array): jax.Arrays are reduced on their device, anything else with NumPy."""
    return (jnp, x) if isinstance(x, jax.Array) else (np, np.asarray(x))


def check_finite(x, name: str) -> None:
    """Raise unless every entry of ``x`` is finite; the message counts the rows (axis 0) holding a NaN or
    ±inf (entries for a vector). Integer and bool arrays always pass; tracers are skipped."""
    if is_traced(x) or not jnp.issubdtype(jnp.result_type(x), jnp.inexact):
        return
    xp, v = _values(x)
    finite = xp.isfinite(v)
    if v.ndim == 0:
        if not bool(finite):
            raise ValueError(f"{name} must be finite, got {v!r}")
        return
    good_rows = xp.all(finite, axis=tuple(range(1, v.ndim)))
    bad = int(v.shape[0] - xp.sum(good_rows))
    if bad:
        unit = "rows" if v.ndim > 1 else "entries"
        raise ValueError(f"{name} must be finite: {bad} of {v.shape[0]} {unit} hold NaN or ±inf")


def check_index_range(x, name: str, n: int, what: str) -> None:
    """Raise unless every entry of the integer array ``x`` lies in [0, n). Tracers are skipped."""
    if is_traced(x) or jnp.size(x) == 0:
        return
    xp, v = _values(x)
    lo, hi = int(xp.min(v)), int(xp.max(v))
    if lo < 0 or hi >= n:
        wide = v.astype(xp.int64) if xp is np else v.astype(jnp.int32)
        bad = int(xp.sum((wide < 0) | (wide >= n)))
        raise ValueError(
            f"{name} must lie in [0, {n - 1}] ({what}): {bad} entries outside, smallest {lo}, largest {hi}"
        )
