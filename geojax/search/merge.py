"""The top-k merge every index ends with: candidates from several shards, lists or blocks ranked by
(distance, id), so that ties go to the lower id whatever order the candidates came in."""

from __future__ import annotations

import jax
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
