"""The top-k merge every index ends with: candidates from several shards, lists or blocks ranked by
(distance, id), so that ties go to the lower id whatever order the candidates came in."""

from __future__ import annotations

import jax
from jax import lax


def merge_topk(distances: jax.Array, ids: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The k smallest (distance, id) pairs of each row, ascending by distance then id.

    distances: [q, n] (any order; empty slots hold the dtype's largest value), ids: [q, n] int32 →
    (distances [q, k], ids [q, k]); k ≤ n.
    """
    d, i = lax.sort((distances, ids), dimension=1, num_keys=2)
    return d[:, :k], i[:, :k]
