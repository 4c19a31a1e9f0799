"""The top-k merge every index ends with: candidates from several shards, lists or blocks ranked by
(distance, id), so that ties go to the lower id whatever order the candidates came in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def merge_topk(distances: jax.Array, ids: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The k smallest (distance, id) pairs of each row, ascending by distance then id.

    Ties go to the lower id whatever order the candidates came in.

    Args:
        distances: [q, n] distances in any order; empty slots hold the dtype's largest value.
        ids: [q, n] int32 ids.
        k: the pairs kept per row, k ≤ n.

    Returns:
        (distances [q, k], ids [q, k]).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import merge
        >>> d, i = merge.merge_topk(jnp.array([[3, 1, 1, 2]]), jnp.array([[0, 9, 4, 7]]), 3)
        >>> print(d, i)
        [[1 1 2]] [[4 9 7]]
    """
    d, i = lax.sort((distances, ids), dimension=1, num_keys=2)
    return d[:, :k], i[:, :k]


def topk_blocks(keys: jax.Array, ids: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The exact top-k by (key, id) of candidates in blocks whose ids ascend along the block.

    Each block's k best by ``lax.top_k`` (ties to the lower position, i.e. the lower id) hold the block's part
    of the result; their m·k entries are then sorted by (−key, id).

    Args:
        keys: [q, m, B] keys, higher = better (negated distances).
        ids: [q, m, B] int32 ids, ascending along each block.
        k: the candidates kept per row.

    Returns:
        (−keys [q, k'] ascending, ids [q, k']), k' = min(k, m·min(k, B)).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import merge
        >>> keys = jnp.array([[[-3, -1], [-1, -2]]])  # one query, two blocks of two
        >>> d, i = merge.topk_blocks(keys, jnp.array([[[0, 9], [4, 7]]]), 3)
        >>> print(d, i)
        [[1 1 2]] [[4 9 7]]
    """
    q, m, b = keys.shape
    v, j = lax.top_k(keys, min(k, b))
    cand = jnp.take_along_axis(ids, j, axis=2)
    return merge_topk(-v.reshape(q, -1), cand.reshape(q, -1), min(k, m * min(k, b)))
