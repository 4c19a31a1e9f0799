"""Filtered search: which ids a search may return (faiss's ``IDSelector``), as one bitset the devices read.

``allowed`` takes one of three forms, each turned into a uint8 bitset in NumPy's ``np.packbits`` order
(big-endian bits: id i is bit 7 − i mod 8 of byte i // 8), on the host before any work:

- a boolean mask [n] over ids, the same for every query: id i is allowed where i < n and ``mask[i]``;
- a per-query bitset [Q, B] uint8, already packed that way (``np.packbits(mask, axis=1)`` of a boolean
  [Q, n] mask): id i is allowed for query q where i < 8B and its bit is set;
- :class:`IdRanges`: the ids in any of the half-open ranges [start, stop), for every query.

Ids past the mask's end are not allowed; ids of rows not in the index are simply never found. On the
devices the check is a byte read and a shift per candidate row (:func:`is_allowed`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from geojax import _checks
from geojax.search.placement import NO_ID


class IdRanges(NamedTuple):
    """Allowed ids as half-open ranges [starts[r], stops[r]) (faiss's ``IDSelectorRange``, several at once).

    Attributes:
        starts: [R] integer first ids of the ranges.
        stops: [R] integer ids one past each range's last.

    Example:
        >>> import numpy as np
        >>> from geojax.search import IdRanges
        >>> IdRanges(np.array([0, 10]), np.array([3, 12])).mask(13).nonzero()[0].tolist()
        [0, 1, 2, 10, 11]
    """

    starts: ArrayLike
    stops: ArrayLike

    def check(self) -> tuple[np.ndarray, np.ndarray]:
        """The ranges as int64 arrays, checked.

        Returns:
            (starts [R], stops [R]) int64 NumPy arrays.

        Raises:
            ValueError: ``allowed.starts`` or ``allowed.stops`` is not a rank-1 integer array, their lengths
                differ, or a range is negative or has stop < start.
        """
        for x, name in ((self.starts, "allowed.starts"), (self.stops, "allowed.stops")):
            _checks.check_rank(x, name, 1)
            _checks.check_integer(x, name)
        starts, stops = np.asarray(self.starts, np.int64), np.asarray(self.stops, np.int64)
        if starts.shape != stops.shape:
            raise ValueError(
                f"allowed.starts and allowed.stops must have one length, got {starts.shape} and {stops.shape}"
            )
        if len(starts) and (starts.min() < 0 or np.any(stops < starts)):
            raise ValueError("allowed ranges must satisfy 0 ≤ start ≤ stop")
        return starts, stops

    def mask(self, n: int) -> np.ndarray:
        """The ranges as a boolean mask over ids 0 … n − 1.

        Args:
            n: the mask's length.

        Returns:
            [n] bool NumPy array.

        Raises:
            ValueError: the ranges are malformed (:meth:`check`).
        """
        starts, stops = self.check()
        edges = np.zeros(n + 1, np.int64)
        np.add.at(edges, np.minimum(starts, n), 1)
        np.add.at(edges, np.minimum(stops, n), -1)
        return np.cumsum(edges[:n]) > 0


def allowed_bits(allowed: np.ndarray | IdRanges, nq: int, n_ids: int) -> np.ndarray:
    """``allowed`` (module docstring) as a uint8 bitset [1 or Q, B] in ``np.packbits`` order.

    Args:
        allowed: a boolean mask [n], a per-query packed bitset [Q, B] uint8, or :class:`IdRanges`.
        nq: the number of queries Q.
        n_ids: one past the largest id a row of the index may have (the ranges' mask length).

    Returns:
        [1, B] (the same for every query) or [Q, B] uint8 NumPy bitset, B ≥ 1.

    Raises:
        ValueError: (naming ``allowed``) a mask that is not rank 1, a bitset that is not uint8 [Q, B ≥ 1], or
            another type, or malformed ranges.

    Example:
        >>> import numpy as np
        >>> from geojax.search import filters
        >>> filters.allowed_bits(np.array([True, False, True]), 2, 3)
        array([[160]], dtype=uint8)
    """
    if isinstance(allowed, IdRanges):
        mask = allowed.mask(n_ids)
    elif isinstance(allowed, np.ndarray | jax.Array) and allowed.dtype == bool:
        _checks.check_rank(allowed, "allowed", 1)
        mask = np.asarray(allowed)
    elif isinstance(allowed, np.ndarray | jax.Array) and allowed.dtype == np.uint8:
        if allowed.ndim != 2 or allowed.shape[0] != nq or allowed.shape[1] == 0:
            raise ValueError(
                f"allowed as a per-query bitset must be uint8 [Q = {nq}, B ≥ 1] (np.packbits of a [Q, n] "
                f"mask), got shape {tuple(allowed.shape)}"
            )
        return np.asarray(allowed)
    else:
        kind = getattr(allowed, "dtype", type(allowed).__name__)
        raise ValueError(
            "allowed must be a boolean mask [n] over ids, a uint8 per-query bitset [Q, B] (np.packbits "
            f"order) or IdRanges, got {kind}"
        )
    return np.packbits(mask if len(mask) else np.zeros(1, bool))[None]


def is_allowed(bits: jax.Array, query: jax.Array, ids: jax.Array) -> jax.Array:
    """Whether each id is allowed for its query by a bitset of :func:`allowed_bits` (jit-able).

    Args:
        bits: [1 or Q, B] uint8 bitset (one row: the same for every query).
        query: int32 query numbers, broadcastable against ``ids`` (ignored with one row).
        ids: int32 ids (``NO_ID`` for none: never allowed).

    Returns:
        bool, the broadcast shape of ``query`` and ``ids``.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import filters
        >>> bits = jnp.array([[160]], jnp.uint8)  # ids 0 and 2
        >>> print(filters.is_allowed(bits, jnp.zeros((1, 1), jnp.int32), jnp.array([[0, 1, 2, 9]])))
        [[ True False  True False]]
    """
    byte = ids >> 3
    inside = (ids < NO_ID) & (byte < bits.shape[1])
    row = jnp.zeros_like(query) if bits.shape[0] == 1 else query
    value = bits[row, jnp.minimum(byte, bits.shape[1] - 1)]
    return inside & (((value >> (7 - (ids & 7)).astype(jnp.uint8)) & 1) == 1)
