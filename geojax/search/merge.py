"""The top-k merge every index ends with: candidates from several shards, lists or blocks ranked by
(distance, id), so that ties go to the lower id whatever order the candidates came in."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def merge_topk(distances: jax.Array, ids: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The k smallest (distance, id) pairs of each row, ascending by distance then id.

    distances: [q, n] (any order; empty slots hold the dtype's largest value), ids: [q, n] int32 →
    (distances [q, k], ids [q, k]); k ≤ n.
    """
    d, i = lax.sort((distances, ids), dimension=1, num_keys=2)
    return d[:, :k], i[:, :k]


def topk_blocks(keys: jax.Array, ids: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The exact top-k by (key, id) of candidates in blocks whose ids ascend along the block: (−keys
    [q, k] ascending, ids [q, k]).

    keys, ids: [q, m, B]. Each block's k best by ``lax.top_k`` (ties to the lower position, i.e. the lower
    id) hold the block's part of the result; their m·k entries are then sorted by (−key, id).
    """
    q, m, b = keys.shape
    v, j = lax.top_k(keys, min(k, b))
    cand = jnp.take_along_axis(ids, j, axis=2)
    return merge_topk(-v.reshape(q, -1), cand.reshape(q, -1), min(k, m * min(k, b)))
