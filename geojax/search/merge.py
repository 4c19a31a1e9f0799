"""The top-k merge every index ends with: candidates from several shards, lists or blocks ranked by
(distance, id), so that ties go to the lower id whatever order the candidates came in.

On CPU the selection is two ``lax.top_k`` calls, not a sort: XLA:CPU sorts a row with a comparator called
per comparison (a two-key ``lax.sort`` of 80 candidates took about 11 µs per query here, ``lax.top_k`` about
1.3 µs). ``lax.top_k`` ranks float32 by the integer order of their bits (negative patterns mirrored, a total
order that includes the NaN patterns), so any int32 key fed through ``_as_topk_key`` is ranked exactly at
float32 speed; distances become such keys by :func:`order_bits`. The first ``top_k`` takes the k smallest
distances (ties by position); the k-th of them, t, splits the answer into the rows closer than t (all among
those k) and the lowest ids of the rows at exactly t, which the second ``top_k`` finds by id (run only when
some row has more candidates at t than the first kept); the k are then put in (distance, id) order by
counting. Rows of at most 32 candidates sort, and so does every row on other platforms. The platform is that
of the devices the candidates lie on, which the index passes (``platform``), not JAX's default backend: an
index placed on CPU devices in a GPU process ranks by ``top_k``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from geojax.search.placement import NO_ID

_INT_MAX = 0x7FFFFFFF
_PAIRWISE = 64  # up to this k the answer is put in order by counting, above it by a sort of k rows
_SHORT = 32  # rows this short are sorted (faster than two top_k calls)


def order_bits(distances: jax.Array) -> jax.Array:
    """int32 keys in the order of ``distances``.

    The integers themselves, or a float's bits with negative floats mirrored (−0.0 just below +0.0, NaN
    patterns at the ends).

    Args:
        distances: [...] int32 or floating distances.

    Returns:
        [...] int32 keys, a < b exactly where the distances order a before b.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import merge
        >>> print(merge.order_bits(jnp.array([-1.0, -0.0, 0.0, 2.0])))
        [-1065353217          -1           0  1073741824]
    """
    if jnp.issubdtype(distances.dtype, jnp.integer):
        return distances.astype(jnp.int32)
    bits = lax.bitcast_convert_type(distances.astype(jnp.float32), jnp.int32)
    return jnp.where(bits < 0, bits ^ _INT_MAX, bits)


def _as_topk_key(v: jax.Array) -> jax.Array:
    """float32 values that ``lax.top_k`` ranks as the int32 ``v`` (its comparator mirrors negative bit
    patterns; mirroring them first undoes it)."""
    return lax.bitcast_convert_type(jnp.where(v < 0, v ^ _INT_MAX, v), jnp.float32)


def _from_topk_key(f: jax.Array) -> jax.Array:
    """The int32 ``v`` of ``_as_topk_key``'s ``f`` (the mirroring is its own inverse)."""
    bits = lax.bitcast_convert_type(f, jnp.int32)
    return jnp.where(bits < 0, bits ^ _INT_MAX, bits)


def _on_cpu(platform: str | None) -> bool:
    """Whether the devices of ``platform`` (None: JAX's default backend) are CPUs."""
    return (platform or jax.default_backend()) == "cpu"


def top_k(keys: jax.Array, k: int, *, platform: str | None = None) -> tuple[jax.Array, jax.Array]:
    """The k largest float32 or int32 keys of each row and their positions, ties to the lower position.

    ``lax.top_k``, except that on a CPU int32 keys are ranked as float32 bit patterns (``_as_topk_key``)
    and mapped back: the same order, where ``lax.top_k`` on int32 sorts the whole row (15–100× slower on
    XLA:CPU). Other platforms rank int32 keys as they are.

    Args:
        keys: [..., n] float32 or int32 keys.
        k: the keys kept per row, 1 ≤ k ≤ n.
        platform: the platform of the devices ``keys`` lie on ("cpu", "gpu", …); None: JAX's default backend.

    Returns:
        (values [..., k] in the dtype of ``keys``, descending; positions [..., k] int32).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import merge
        >>> v, j = merge.top_k(jnp.array([[-2**31, 7, 2**31 - 1, 7]], jnp.int32), 3, platform="cpu")
        >>> print(v, j)
        [[2147483647          7          7]] [[2 1 3]]
    """
    if keys.dtype == jnp.int32 and _on_cpu(platform):
        v, j = lax.top_k(_as_topk_key(keys), k)
        return _from_topk_key(v), j
    return lax.top_k(keys, k)


def _largest(v: jax.Array, k: int) -> jax.Array:
    """Positions [q, k] of the k largest int32 ``v`` of each row, ties to the lower position (CPU)."""
    return top_k(v, k, platform="cpu")[1]


def _in_order(keys: jax.Array, ids: jax.Array, pos: jax.Array) -> jax.Array:
    """``pos`` [q, k] reordered by (keys, ids) ascending."""
    k = pos.shape[1]
    if k > _PAIRWISE:
        return lax.sort((keys, ids, pos), dimension=1, num_keys=2)[2]
    ki, kj, ii, ij = keys[:, :, None], keys[:, None, :], ids[:, :, None], ids[:, None, :]
    earlier = jnp.arange(k)[None, :] < jnp.arange(k)[:, None]  # equal pairs (empty slots) by position
    before = (kj < ki) | ((kj == ki) & ((ij < ii) | ((ij == ii) & earlier)))
    rank = jnp.sum(before, axis=2)  # [q, k]: the rows ranked before each, distinct
    slot = rank[:, :, None] == jnp.arange(k)  # [q, row, slot]
    return jnp.sum(jnp.where(slot, pos[:, :, None], 0), axis=1)


def select_topk(
    distances: jax.Array, ids: jax.Array, k: int, *, ordered: bool = True, platform: str | None = None
) -> jax.Array:
    """Positions of the k smallest (distance, id) pairs of each row.

    Two ``lax.top_k`` calls on a CPU (module docstring), a sort of each row elsewhere.

    Args:
        distances: [q, n] int32 or floating distances in any order.
        ids: [q, n] int32 ids, distinct within a row except for empty slots (which share one id and the
            largest distance).
        k: the pairs kept per row, 1 ≤ k ≤ n.
        ordered: put the positions in (distance, id) order; otherwise only the set is exact.
        platform: the platform of the devices the rows lie on ("cpu", "gpu", …); None: JAX's default backend.

    Returns:
        [q, k] int32 positions into each row.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import merge
        >>> print(merge.select_topk(jnp.array([[3, 1, 1, 2]]), jnp.array([[0, 9, 4, 7]]), 3))
        [[2 1 3]]
    """
    keys = order_bits(distances)
    ids = ids.astype(jnp.int32)
    if not _on_cpu(platform) or keys.shape[1] <= _SHORT:
        pos = jnp.broadcast_to(jnp.arange(keys.shape[1], dtype=jnp.int32), keys.shape)
        return lax.sort((keys, ids, pos), dimension=1, num_keys=2)[2][:, :k]
    first = _largest(~keys, k)  # the k smallest keys, ties by position
    first_keys = jnp.take_along_axis(keys, first, axis=1)
    t = first_keys[:, -1:]  # the k-th smallest key
    below = jnp.sum(first_keys < t, axis=1, keepdims=True)  # rows closer than t: all among the first k
    at_t = keys == t
    slot = jnp.arange(k)

    def with_lowest_ids_at_t(_):
        tied = _largest(jnp.where(at_t, _INT_MAX - ids, -1), k)  # the rows at t, lowest id first
        return jnp.where(slot < below, first, jnp.take_along_axis(tied, jnp.maximum(slot - below, 0), axis=1))

    # The second top_k only when some row has more candidates at t than the first one kept.
    extra = jnp.any(jnp.sum(at_t, axis=1, keepdims=True) > k - below)
    pos = lax.cond(extra, with_lowest_ids_at_t, lambda _: first, None)
    if not ordered:
        return pos
    return _in_order(jnp.take_along_axis(keys, pos, axis=1), jnp.take_along_axis(ids, pos, axis=1), pos)


def merge_topk(
    distances: jax.Array, ids: jax.Array, k: int, *, platform: str | None = None
) -> tuple[jax.Array, jax.Array]:
    """The k smallest (distance, id) pairs of each row, ascending by distance then id.

    Ties go to the lower id whatever order the candidates came in (:func:`select_topk`).

    Args:
        distances: [q, n] distances in any order; empty slots hold the dtype's largest value.
        ids: [q, n] int32 ids.
        k: the pairs kept per row, k ≤ n.
        platform: the platform of the devices the rows lie on ("cpu", "gpu", …); None: JAX's default backend.

    Returns:
        (distances [q, k], ids [q, k]).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import merge
        >>> d, i = merge.merge_topk(jnp.array([[3, 1, 1, 2]]), jnp.array([[0, 9, 4, 7]]), 3)
        >>> print(d, i)
        [[1 1 2]] [[4 9 7]]
    """
    pos = select_topk(distances, ids, k, platform=platform)
    return jnp.take_along_axis(distances, pos, axis=1), jnp.take_along_axis(ids, pos, axis=1)


def merge_over_axis(
    distances: jax.Array, ids: jax.Array, k: int, axis: str, *, empty: float, platform: str | None = None
) -> tuple[jax.Array, jax.Array]:
    """Each device's top-k merged over a mesh axis into the top-k of all, inside ``shard_map``.

    The per-device candidates [q, k] are gathered over ``axis`` and ranked by (distance, id)
    (:func:`merge_topk`); slots no row filled (id ``placement.NO_ID``) come out as id −1 and
    distance ``empty``.

    Args:
        distances: [q, k] this device's distances, ascending.
        ids: [q, k] int32 ids (``placement.NO_ID`` in empty slots).
        k: the pairs kept per row.
        axis: the mesh axis the devices' candidates are gathered over.
        empty: the distance of an empty slot (the dtype's largest value).
        platform: as :func:`merge_topk`'s.

    Returns:
        (distances [q, k], ids [q, k] int32, −1 in empty slots), the same on every device of ``axis``.
    """
    if lax.axis_size(axis) > 1:
        distances, ids = merge_topk(
            lax.all_gather(distances, axis, axis=1, tiled=True),
            lax.all_gather(ids, axis, axis=1, tiled=True),
            k,
            platform=platform,
        )
    found = ids < NO_ID
    return jnp.where(found, distances, empty), jnp.where(found, ids, -1)
