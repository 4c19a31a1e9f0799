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
    """Raise unless ``x.ndim`` is ``rank`` (or one of ``rank``).

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.
        rank: the rank, or a sequence of allowed ranks.

    Raises:
        ValueError: ``x`` has another rank.
    Example:
        >>> import numpy as np
        >>> from geojax import _checks
        >>> _checks.check_rank(np.zeros(3), "x", 2)
        Traceback (most recent call last):
        ...
        ValueError: x must have rank 2, got shape (3,)
    """
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    if jnp.ndim(x) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{name} must have rank {want}, got shape {tuple(jnp.shape(x))}")


def check_min_rank(x, name: str, rank: int) -> None:
    """Raise unless ``x.ndim ≥ rank``.

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.
        rank: the smallest rank allowed.

    Raises:
        ValueError: ``x`` has a lower rank.
    """
    if jnp.ndim(x) < rank:
        raise ValueError(f"{name} must have rank ≥ {rank}, got shape {tuple(jnp.shape(x))}")


def check_matrix(x, name: str) -> None:
    """Raise unless ``x`` is a 2-D array ``[N, D]`` with N ≥ 1 and D ≥ 1.

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.

    Raises:
        ValueError: ``x`` is not rank 2, or is empty.
    """
    check_rank(x, name, 2)
    if 0 in jnp.shape(x):
        raise ValueError(f"{name} must be a non-empty [N, D] matrix, got shape {tuple(jnp.shape(x))}")


def check_floating(x, name: str) -> None:
    """Raise unless ``x`` has a floating dtype.

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.

    Raises:
        ValueError: ``x``'s dtype is not floating.
    Example:
        >>> import numpy as np
        >>> from geojax import _checks
        >>> _checks.check_floating(np.zeros(2, np.int32), "x")
        Traceback (most recent call last):
        ...
        ValueError: x must have a floating dtype, got int32
    """
    if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
        raise ValueError(f"{name} must have a floating dtype, got {jnp.result_type(x)}")


def check_dtype(x, name: str, dtype) -> None:
    """Raise unless ``x`` has exactly ``dtype``.

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.
        dtype: the dtype required.

    Raises:
        ValueError: ``x`` has another dtype.
    """
    if jnp.result_type(x) != jnp.dtype(dtype):
        raise ValueError(f"{name} must have dtype {jnp.dtype(dtype).name}, got {jnp.result_type(x)}")


def check_integer(x, name: str) -> None:
    """Raise unless ``x`` has an integer (or bool) dtype.

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.

    Raises:
        ValueError: ``x``'s dtype is neither integer nor bool.
    """
    dt = jnp.result_type(x)
    if not (jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_):
        raise ValueError(f"{name} must have an integer dtype, got {dt}")


def check_same_width(a, b, name_a: str, name_b: str) -> None:
    """Raise unless the last axes of ``a`` and ``b`` agree.

    Args:
        a: the first array.
        b: the second array.
        name_a: ``a``'s name in the message.
        name_b: ``b``'s name in the message.

    Raises:
        ValueError: the last dimensions differ.
    """
    if jnp.shape(a)[-1] != jnp.shape(b)[-1]:
        raise ValueError(
            f"{name_a} and {name_b} must have the same last dimension, got "
            f"{tuple(jnp.shape(a))} and {tuple(jnp.shape(b))}"
        )


def check_length(x, name: str, n: int, what: str) -> None:
    """Raise unless ``x`` has leading dimension ``n``.

    Args:
        x: the array (or array-like) to check.
        name: the argument named in the message.
        n: the length required.
        what: where ``n`` comes from (in the message).

    Raises:
        ValueError: ``x`` has rank 0 or another leading dimension.
    """
    if jnp.ndim(x) < 1 or jnp.shape(x)[0] != n:
        raise ValueError(f"{name} must have length {n} ({what}), got shape {tuple(jnp.shape(x))}")


def check_even(n: int, name: str) -> None:
    """Raise unless ``n`` is even (pairs of coordinates are needed).

    Args:
        n: the number to check.
        name: its name in the message.

    Raises:
        ValueError: ``n`` is odd.
    """
    if n % 2:
        raise ValueError(f"{name} must be even (adjacent coordinate pairs), got {n}")


def check_positive_int(v, name: str) -> None:
    """Raise unless ``v`` is a Python/NumPy integer ≥ 1.

    Args:
        v: the value to check (a bool is not an integer here).
        name: its name in the message.

    Raises:
        ValueError: ``v`` is not an integer ≥ 1.
    Example:
        >>> import numpy as np
        >>> from geojax import _checks
        >>> _checks.check_positive_int(0, "k")
        Traceback (most recent call last):
        ...
        ValueError: k must be a positive integer, got 0
    """
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def check_k(k, name: str, n: int, what: str) -> None:
    """Raise unless ``1 ≤ k ≤ n``.

    Args:
        k: the value to check.
        name: its name in the message.
        n: the largest value allowed.
        what: where ``n`` comes from (in the message).

    Raises:
        ValueError: ``k`` is not a positive integer or exceeds ``n``.
    """
    check_positive_int(k, name)
    if k > n:
        raise ValueError(f"{name} must be at most {n} ({what}), got {k}")


def check_choice(v, name: str, choices: Sequence[object]) -> None:
    """Raise unless ``v`` is one of ``choices``.

    Args:
        v: the value to check.
        name: its name in the message.
        choices: the allowed values.

    Raises:
        ValueError: ``v`` is not one of ``choices``.
    Example:
        >>> import numpy as np
        >>> from geojax import _checks
        >>> _checks.check_choice("hard", "mining", ("all", "hard"))
    """
    if v not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {v!r}")


def check_multiple_of(n: int, name: str, m: int) -> None:
    """Raise unless ``n`` is a positive multiple of ``m``.

    Args:
        n: the number to check.
        name: its name in the message.
        m: the divisor.

    Raises:
        ValueError: ``n`` < 1 or ``n`` is not divisible by ``m``.
    """
    if n < 1 or n % m:
        raise ValueError(f"{name} must be a positive multiple of {m}, got {n}")


def is_traced(x) -> bool:
    """True when ``x`` is a tracer (inside ``jit``, ``vmap``, ``grad``…), whose values cannot be read.

    Args:
        x: any value.

    Returns:
        Whether ``x`` is a ``jax.core.Tracer``.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import _checks
        >>> _checks.is_traced(jnp.zeros(2)), bool(jax.jit(_checks.is_traced)(jnp.zeros(2)))
        (False, True)
    """
    return isinstance(x, jax.core.Tracer)


def _values(x):
    """(array module, array): jax.Arrays are reduced on their device, anything else with NumPy."""
    return (jnp, x) if isinstance(x, jax.Array) else (np, np.asarray(x))


def check_finite(x, name: str) -> None:
    """Raise unless every entry of ``x`` is finite.

    The message counts the rows (axis 0) holding a NaN or ±inf (entries for a vector). Integer and bool arrays
    always pass; tracers are skipped (their values cannot be read).

    Args:
        x: the array to check.
        name: the argument named in the message.

    Raises:
        ValueError: ``x`` holds a NaN or ±inf.

    Example:
        >>> import numpy as np
        >>> from geojax import _checks
        >>> _checks.check_finite(np.array([[1.0, np.nan], [0.0, 1.0]]), "x")
        Traceback (most recent call last):
        ...
        ValueError: x must be finite: 1 of 2 rows hold NaN or ±inf
    """
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
    """Raise unless every entry of the integer array ``x`` lies in [0, n).

    Tracers and empty arrays are skipped.

    Args:
        x: the integer array to check.
        name: the argument named in the message.
        n: the exclusive upper bound.
        what: what the indices count (in the message).

    Raises:
        ValueError: an entry lies outside [0, n); the message counts them and gives the smallest and
            largest.
    """
    if is_traced(x) or jnp.size(x) == 0:
        return
    xp, v = _values(x)
    with jax.ensure_compile_time_eval():  # a concrete array closed over by a traced function is read too
        lo, hi = int(xp.min(v)), int(xp.max(v))
        wide = v.astype(xp.int64) if xp is np else v.astype(jnp.int32)
        bad = int(xp.sum((wide < 0) | (wide >= n)))
    if lo < 0 or hi >= n:
        raise ValueError(
            f"{name} must lie in [0, {n - 1}] ({what}): {bad} entries outside, smallest {lo}, largest {hi}"
        )
