"""Range search: every row nearer than a radius, in faiss's shape (``lims``, ``D``, ``I``), on top of an
index's exact top-k search.

The rows within the radius are a prefix of a query's ranking by (distance, id), so the top-k search finds
them: a query is done once its k-th result lies at the radius or beyond (or is empty, −1, or k reached the
index's rows), and the queries not done are searched again with k doubled. Before each round the result is
bounded: the done queries' counts plus k for each query not done (each has at least k rows within the
radius) — past ``max_results`` the search stops with a ``ValueError``, never truncating. A round searches
its queries padded to a power of two, k results each: 64 per query in the first round, and after it at most
(queries not done, padded) × 2k ≤ 4 · ``max_results``, so memory stays bounded by ``max_results``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import numpy as np

from geojax import _checks

_FIRST_K = 64  # the first round's k


def check_radius(radius: float, max_results: int) -> float:
    """``radius`` as a float, checked with ``max_results``.

    Args:
        radius: a real number (int or float), not NaN.
        max_results: the most results in all, a positive int.

    Returns:
        ``radius`` as a Python float.

    Raises:
        ValueError: ``radius`` is not a real number or is NaN, or ``max_results`` is not a positive int.
    """
    _checks.check_positive_int(max_results, "max_results")
    if isinstance(radius, bool) or not isinstance(radius, int | float | np.integer | np.floating):
        raise ValueError(f"radius must be a real number, got {type(radius).__name__}")
    if math.isnan(float(radius)):
        raise ValueError("radius must be a number, got NaN")
    return float(radius)


def range_search(
    search: Callable[[np.ndarray, int], tuple[jax.Array, jax.Array]],
    nq: int,
    ntotal: int,
    radius: float,
    max_results: int,
    dtype: np.dtype,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row at distance < ``radius`` of each query, by rounds of an exact top-k search.

    The rounds and the bound on the results: the module docstring.

    Args:
        search: ``search(query rows [b] int, k)`` → (distances [b, k] ascending, ids [b, k], −1 for none):
            the index's exact search of those queries, ties to the lower id.
        nq: the number of queries Q.
        ntotal: the rows in the index (the largest k).
        radius: the radius (:func:`check_radius`).
        max_results: the most results in all.
        dtype: the distances' dtype (int32 or float32).

    Returns:
        (lims [Q + 1] int64, D [lims[Q]] distances, I [lims[Q]] int64): query q's results are
        D[lims[q]:lims[q + 1]] ascending, ties to the lower id, and their ids I[lims[q]:lims[q + 1]].

    Raises:
        ValueError: the results would exceed ``max_results``.

    Example:
        >>> import numpy as np
        >>> from geojax.search import IndexFlat, TorusCodec
        >>> index = IndexFlat(TorusCodec(2))
        >>> index.add(np.array([[0.0, 0.0], [0.0, 0.1], [0.5, 0.5]], np.float32))
        >>> lims, d, i = index.range_search(np.array([[0.0, 0.0]], np.float32), 30)
        >>> lims.tolist(), d.tolist(), i.tolist()
        ([0, 2], [0, 26], [0, 1])
    """
    found = [(np.zeros(0, dtype), np.zeros(0, np.int32))] * nq
    todo = np.arange(nq) if ntotal else np.arange(0)
    k = min(_FIRST_K, ntotal)
    while len(todo):
        d, i = _search_padded(search, todo, k)
        within = (d < radius) & (i >= 0)
        done = ~within[:, -1] | (k == ntotal)
        for row in np.flatnonzero(done):
            found[todo[row]] = (d[row][within[row]], i[row][within[row]])
        todo = todo[~done]
        bound = sum(len(f[1]) for f in found) + k * len(todo)
        if bound > max_results:
            raise ValueError(
                f"max_results = {max_results} is exceeded: the radius gives at least {bound} results; lower "
                "the radius or raise max_results"
            )
        k = min(2 * k, ntotal)
    lims = np.concatenate([[0], np.cumsum([len(f[1]) for f in found])]).astype(np.int64)
    return lims, np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found]).astype(np.int64)


def _search_padded(search, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``search`` of query rows padded (by repeating the first) to a power of two, so that few shapes
    compile; the padding's results dropped."""
    size = 1 << (len(rows) - 1).bit_length()
    d, i = search(np.pad(rows, (0, size - len(rows)), mode="edge"), k)
    return np.asarray(d)[: len(rows)], np.asarray(i)[: len(rows)]
