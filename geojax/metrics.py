"""Retrieval and distribution metrics: P@1, R@k, MAP@R, mAP, kNN accuracy and nearest neighbours, circular
variance (Stowell 2026, eq. 4) and prototype few-shot accuracy (Stowell 2026, Experiment 3).

Retrieval protocol, shared by every ranking function ``f(query, query_labels, reference=None,
reference_labels=None, *, similarity='cosine', ..., chunk_size=1024)`` and by :func:`nearest_neighbors`
(the full statement of the conventions is in docs/conventions.md):

- ``similarity`` is a name understood by :func:`geojax.similarity.get` or a callable ``(a, b) -> [N, M]``,
  *higher = more similar*. A distance such as ``similarity.manifold_distance`` must be passed negated, e.g.
  ``lambda a, b: -manifold_distance(a[0], a[1], b[0], b[1])``; with a callable, ``query`` and ``reference``
  may be tuples of arrays sharing the leading axis (such as ``(coords, q)`` of an atlas, Korman 2021).
- ``reference=None`` ranks the query set against itself with each query's own row excluded. (Passing the
  same array as ``reference`` excludes nothing.)
- Ties rank the lower reference index first. NaN and −inf similarities rank below every finite one (but
  above an excluded self-row).
- Non-finite *input* is rejected: every floating array of ``query`` and ``reference`` (each leaf of a tuple)
  must be finite, or a ``ValueError`` names it and counts its bad rows before any work. (An all-NaN
  embedding would otherwise rank exactly like an all-zero one.)
- A query is *relevant-free* when no other reference item shares its label; such queries are left out of
  ``precision_at_1``, ``recall_at_k`` and ``map_at_r`` (pytorch-metric-learning's rule) and score 0 in
  ``mean_average_precision`` and ``knn_accuracy``. When every query is left out the metric is NaN.
- Work runs in blocks of ``chunk_size`` queries against the full reference set: each block's similarity
  row block [chunk_size, M] is reduced on the device to its top-k (``lax.top_k`` on float32) and then to
  per-query scores, so a 60,000 × 60,000 problem never holds more than chunk_size × 60,000 similarities.
  The block step is jitted once per shape; the loop over blocks and the label bookkeeping run in Python,
  so these metrics are evaluation-time functions (not themselves jit-able).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, _numerics
from geojax import similarity as _similarity

_F32 = jnp.float32
# NaN / −inf / anything lower becomes _LOW; an excluded self-row becomes _EXCLUDED < _LOW. Both finite.
_LOW = -1e38
_EXCLUDED = float(jnp.finfo(_F32).min)

Similarity = _similarity.SimilarityName | Callable[[jax.Array, jax.Array], jax.Array]
# One [N, D] array, or (with a callable similarity) a tuple of arrays sharing the leading axis N.
Embeddings = ArrayLike | tuple[ArrayLike, ...]


# --------------------------------------------------------------------------------------------------------
# Per-query scores of one block: functions of (neighbour values [b, k], *per-query arrays [b], params).
# The labelled metrics see neighbour labels, the query labels and R; nearest_neighbors sees indices.
# --------------------------------------------------------------------------------------------------------


def _hits(nbr: jax.Array, labels: jax.Array) -> jax.Array:
    """[b, k] bool: neighbour j of query i shares its label."""
    return nbr == labels[:, None]


def _precisions(rel: jax.Array) -> jax.Array:
    """Precision at each rank 1..k. rel: [b, k] bool -> [b, k] float32."""
    return jnp.cumsum(rel, axis=1, dtype=_F32) / jnp.arange(1, rel.shape[1] + 1, dtype=_F32)


def _score_top1(nbr, labels, r, params):
    return _hits(nbr, labels)[:, 0].astype(_F32)


def _score_recall(nbr, labels, r, ks):
    found = jnp.cumsum(_hits(nbr, labels), axis=1) > 0
    return found[:, jnp.asarray(ks) - 1].astype(_F32)


def _score_map_at_r(nbr, labels, r, params):
    rel = _hits(nbr, labels)
    within_r = jnp.arange(1, rel.shape[1] + 1)[None, :] <= r[:, None]
    return jnp.sum(_precisions(rel) * (rel & within_r), axis=1) / jnp.maximum(r, 1)


def _score_ap(nbr, labels, r, params):
    rel = _hits(nbr, labels)
    return jnp.sum(_precisions(rel) * rel, axis=1) / jnp.maximum(jnp.sum(rel, axis=1), 1)


def _score_knn(nbr, labels, r, params):
    votes = jnp.sum(nbr[:, :, None] == nbr[:, None, :], axis=2)  # votes for the label at each rank
    winner = jnp.argmax(votes, axis=1)  # first rank among the most-voted labels
    return (jnp.take_along_axis(nbr, winner[:, None], axis=1)[:, 0] == labels).astype(_F32)


def _score_retrieval(nbr, labels, r, params):
    knn_k, ks = params
    top1 = _score_top1(nbr, labels, r, None)[:, None]
    knn = _score_knn(nbr[:, :knn_k], labels, r, None)[:, None]
    recall = [_score_recall(nbr, labels, r, ks)] if ks else []
    return jnp.concatenate([top1, knn, *recall], axis=1)


def _score_indices(nbr, params):
    return nbr


@functools.partial(jax.jit, static_argnames=("chunk", "sim_fn", "k", "exclude_self", "score", "params"))
def _score_block(
    query, reference, ref_values, per_query, start, *, chunk, sim_fn, k, exclude_self, score, params
):
    """Top-k of the query rows [start, start + chunk) against the whole reference, reduced to per-query
    scores [chunk, ...] by ``score(ref_values[top-k], *(a[rows] for a in per_query), params)``. Rows past the
    end repeat the last query (one static shape; the caller drops them)."""
    n_query = jax.tree_util.tree_leaves(query)[0].shape[0]
    rows = jnp.minimum(start + jnp.arange(chunk), n_query - 1)
    s = jnp.asarray(sim_fn(jax.tree_util.tree_map(lambda a: a[rows], query), reference), _F32)
    s = jnp.where(jnp.isnan(s), _LOW, jnp.maximum(s, _LOW))
    if exclude_self:
        s = jnp.where(jnp.arange(s.shape[1])[None, :] == rows[:, None], _EXCLUDED, s)
    _, idx = lax.top_k(s, k)
    return score(ref_values[idx], *(a[rows] for a in per_query), params)


# --------------------------------------------------------------------------------------------------------
# Validation and the blocked driver.
# --------------------------------------------------------------------------------------------------------


def _leaves(x, name: str) -> list[jax.Array]:
    leaves = jax.tree_util.tree_leaves(x)
    if not leaves:
        raise ValueError(f"{name} must be an array [N, D] or a tuple of arrays, got {x!r}")
    shapes = [tuple(jnp.shape(leaf)) for leaf in leaves]
    if any(len(s) == 0 for s in shapes) or shapes[0][0] == 0 or any(s[0] != shapes[0][0] for s in shapes):
        raise ValueError(f"{name} must hold arrays with one shared, non-zero leading length, got {shapes}")
    return leaves


def _check_finite_leaves(x, name: str) -> None:
    """Every leaf finite; a tuple's leaves are named like ``query[1]``."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(x)[0]:
        _checks.check_finite(leaf, name + jax.tree_util.keystr(path))


def _resolve_similarity(similarity: Similarity) -> Callable:
    if callable(similarity):
        return similarity
    if not isinstance(similarity, str):
        raise ValueError(
            f"similarity must be a name in {list(_similarity.names())} or a callable, got {similarity!r}"
        )
    return _similarity.get(similarity)


def _labels(x, name: str, n: int, what: str) -> np.ndarray:
    x = np.asarray(x)
    _checks.check_rank(x, name, 1)
    _checks.check_integer(x, name)
    _checks.check_length(x, name, n, what)
    return x


class _Ranking:
    """Validated query and reference sets of a ranking, and the blocked top-k driver."""

    def __init__(self, query, reference, similarity, chunk_size):
        _checks.check_positive_int(chunk_size, "chunk_size")
        self.sim_fn = _resolve_similarity(similarity)
        self.same = reference is None
        reference = query if self.same else reference
        q_leaves, r_leaves = _leaves(query, "query"), _leaves(reference, "reference")
        if not callable(similarity):
            for x, name in ((query, "query"), (reference, "reference")):
                if len(jax.tree_util.tree_leaves(x)) != 1 or jax.tree_util.tree_leaves(x)[0] is not x:
                    raise ValueError(
                        f"{name} must be one [N, D] array for a named similarity (tuples need a callable)"
                    )
            _checks.check_matrix(query, "query")
            _checks.check_floating(query, "query")
            _checks.check_matrix(reference, "reference")
            _checks.check_floating(reference, "reference")
        if jax.tree_util.tree_structure(query) != jax.tree_util.tree_structure(reference) or any(
            jnp.shape(a)[1:] != jnp.shape(b)[1:] for a, b in zip(q_leaves, r_leaves, strict=True)
        ):
            raise ValueError(
                "query and reference must have the same structure and the same trailing (width) shapes, got "
                f"{[tuple(jnp.shape(a)) for a in q_leaves]} and {[tuple(jnp.shape(b)) for b in r_leaves]}"
            )
        self.n_query = jnp.shape(q_leaves[0])[0]
        self.n_ref = jnp.shape(r_leaves[0])[0]
        self.available = self.n_ref - 1 if self.same else self.n_ref  # rankable reference items per query
        if self.available < 1:
            raise ValueError("query must have at least 2 rows when reference is None (self is excluded)")
        self.chunk = min(chunk_size, self.n_query)
        self.query, self.reference = query, reference
        self._check_output_shape()
        _check_finite_leaves(query, "query")
        if not self.same:
            _check_finite_leaves(reference, "reference")

    def _check_output_shape(self) -> None:
        block = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct((self.chunk, *a.shape[1:]), a.dtype), self.query
        )
        out = jax.eval_shape(self.sim_fn, block, self.reference)
        if not hasattr(out, "shape") or out.shape != (self.chunk, self.n_ref):
            got = getattr(out, "shape", type(out).__name__)
            raise ValueError(
                f"similarity must return [N, M] = {(self.chunk, self.n_ref)} for a block, got {got}"
            )

    def check_k(self, k: int, name: str) -> None:
        what = "reference rows besides the query itself" if self.same else "reference rows"
        _checks.check_k(k, name, self.available, what)

    def top_k(self, k: int, score: Callable, ref_values, per_query: tuple, params=None) -> np.ndarray:
        """Per-query results [Nq, ...] (host) of ``score`` on each query's top-k ``ref_values``."""
        args = (
            jax.tree_util.tree_map(jnp.asarray, self.query),
            jax.tree_util.tree_map(jnp.asarray, self.reference),
            jnp.asarray(ref_values),
            tuple(jnp.asarray(a) for a in per_query),
        )
        static = dict(
            chunk=self.chunk, sim_fn=self.sim_fn, k=k, exclude_self=self.same, score=score, params=params
        )
        out = [
            _score_block(*args, jnp.int32(start), **static)[: self.n_query - start]
            for start in range(0, self.n_query, self.chunk)
        ]
        return np.concatenate([np.asarray(o) for o in out])


class _Problem(_Ranking):
    """A labelled ranking: labels on host and relevant counts R."""

    def __init__(self, query, query_labels, reference, reference_labels, similarity, chunk_size):
        if reference is None and reference_labels is not None:
            raise ValueError("reference_labels must be None when reference is None (query vs itself)")
        if reference is not None and reference_labels is None:
            raise ValueError("reference_labels must be given with reference")
        super().__init__(query, reference, similarity, chunk_size)
        self.labels = _labels(query_labels, "query_labels", self.n_query, "one per query row")
        self.ref_labels = (
            self.labels
            if self.same
            else _labels(reference_labels, "reference_labels", self.n_ref, "one per reference row")
        )
        self.relevant = _relevant_counts(self.labels, self.ref_labels, self.same)

    def scores(self, k: int, score: Callable, params=None) -> np.ndarray:
        """Per-query scores [Nq, ...] (host) of ``score`` on each query's top-k reference labels."""
        return self.top_k(k, score, self.ref_labels, (self.labels, self.relevant), params)


def _relevant_counts(labels: np.ndarray, ref_labels: np.ndarray, same: bool) -> np.ndarray:
    """R per query: reference items with the query's label, the query itself not counted. -> [Nq] int32."""
    uniq, counts = np.unique(ref_labels, return_counts=True)
    pos = np.minimum(np.searchsorted(uniq, labels), len(uniq) - 1)
    r = np.where(uniq[pos] == labels, counts[pos], 0) - int(same)
    return r.astype(np.int32)


def _mean_over(values: np.ndarray, keep: np.ndarray) -> float:
    return float(np.mean(values[keep], axis=0)) if keep.any() else math.nan


# --------------------------------------------------------------------------------------------------------
# Public ranking metrics.
# --------------------------------------------------------------------------------------------------------


def precision_at_1(
    query: Embeddings,
    query_labels: ArrayLike,
    reference: Embeddings | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> float:
    """Precision at 1 (Stowell 2026, Experiment 1): the share of queries whose nearest item has their label.

    The retrieval protocol (ties, exclusions, relevant-free queries, chunking) is the module docstring's.
    Relevant-free queries (no other reference item of their label) are left out.

    Args:
        {queries}
        {ranking}

    Returns:
        P@1 in [0, 1] as a Python float; NaN when every query is relevant-free.

    Raises:
        ValueError: {bad_input}.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Experiment 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> round(metrics.precision_at_1(x, labels), 4)
        0.8
    """
    p = _Problem(query, query_labels, reference, reference_labels, similarity, chunk_size)
    return _mean_over(p.scores(1, _score_top1), p.relevant > 0)


def recall_at_k(
    query: Embeddings,
    query_labels: ArrayLike,
    reference: Embeddings | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    ks: Sequence[int] = (1, 2, 4, 8),
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> dict[int, float]:
    """Recall at k (Korman 2021, §3.2, R@1/2/4/8): the share of queries with a same-label item in their top k.

    The retrieval protocol (ties, exclusions, relevant-free queries, chunking) is the module docstring's.
    Relevant-free queries are left out.

    Args:
        {queries}
        ks: a non-empty sequence of positive ints, each at most the reference rows available.
        {ranking}

    Returns:
        {k: R@k} for each k in ``ks``, Python floats in [0, 1] (NaN when every query is relevant-free).

    Raises:
        ValueError: {bad_input}; ``ks`` is empty, not a sequence, or holds a
            k that is not a positive int or exceeds the reference rows.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §3.2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> {k: round(v, 4) for k, v in metrics.recall_at_k(x, labels, ks=(1, 2)).items()}
        {1: 0.8, 2: 1.0}
    """
    if isinstance(ks, int | str) or not isinstance(ks, Sequence) or len(ks) == 0:
        raise ValueError(f"ks must be a non-empty sequence of positive integers, got {ks!r}")
    for k in ks:
        _checks.check_positive_int(k, "ks")
    p = _Problem(query, query_labels, reference, reference_labels, similarity, chunk_size)
    ks = tuple(int(k) for k in ks)
    p.check_k(max(ks), "ks")
    found = p.scores(max(ks), _score_recall, ks)
    keep = p.relevant > 0
    return {k: _mean_over(found[:, j], keep) for j, k in enumerate(ks)}


def map_at_r(
    query: Embeddings,
    query_labels: ArrayLike,
    reference: Embeddings | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> float:
    """MAP@R (Musgrave et al. 2020, as pytorch-metric-learning): mean of (1/R) Σ_{i≤R} P(i)·rel(i).

    R is the number of reference items sharing the query's label (itself excluded) and P(i) the precision
    among the top i. Relevant-free queries are left out. Each block keeps the top max(R) neighbours. The
    retrieval protocol (ties, exclusions, relevant-free queries, chunking) is the module docstring's.

    Args:
        {queries}
        {ranking}

    Returns:
        MAP@R in [0, 1] as a Python float; NaN when every query is relevant-free.

    Raises:
        ValueError: {bad_input}.

    References:
        Musgrave, Belongie & Lim 2020, "A Metric Learning Reality Check" (arXiv 2003.08505), MAP@R.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> round(metrics.map_at_r(x, labels), 4)
        0.85
    """
    p = _Problem(query, query_labels, reference, reference_labels, similarity, chunk_size)
    keep = p.relevant > 0
    if not keep.any():
        return math.nan
    return _mean_over(p.scores(int(p.relevant.max()), _score_map_at_r), keep)


def mean_average_precision(
    query: Embeddings,
    query_labels: ArrayLike,
    reference: Embeddings | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    k: int | None = None,
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> float:
    """Mean average precision of the top-k ranking (Hong, Meng & Yuan 2018's Hamming-ranking mAP: k=None).

    Per query AP = Σ_{i≤k} P(i)·rel(i) / (number of relevant items among the top k); a query with no relevant
    item in its top k scores 0, and every query counts. ``k=None`` ranks the whole reference set (every
    relevant item is retrieved, so this is the usual uninterpolated AP; the cost is a full sort per query
    block); ``k`` gives mAP@k. Ties rank the lower reference index first (a stable sort, not a tie-aware AP:
    docs/conventions.md). The retrieval protocol (ties, exclusions, relevant-free queries, chunking) is the
    module docstring's.

    Args:
        {queries}
        k: the ranking depth (1 ≤ k ≤ the reference rows available), or None for the whole reference set.
        {ranking}

    Returns:
        mAP in [0, 1] as a Python float.

    Raises:
        ValueError: {bad_input}; ``k`` is not a positive int or exceeds the
            reference rows.

    References:
        Hong, Meng & Yuan 2018, tensorized projection for high-dimensional binary embedding (Hamming-ranking
        mAP).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> round(metrics.mean_average_precision(x, labels), 4)
        0.9
    """
    p = _Problem(query, query_labels, reference, reference_labels, similarity, chunk_size)
    k = p.available if k is None else k
    p.check_k(k, "k")
    return float(np.mean(p.scores(k, _score_ap)))


def knn_accuracy(
    query: Embeddings,
    query_labels: ArrayLike,
    reference: Embeddings | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    k: int = 5,
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> float:
    """k-nearest-neighbour classification accuracy (the 1NN/5NN of Feeney & Hughes 2024).

    Majority vote of the top-k labels. A tie in votes goes to the tied label whose best-ranked member is
    nearest (the earlier rank; equal similarities rank the lower reference index first). Every query counts (a
    relevant-free query is simply misclassified). The retrieval protocol (ties, exclusions, relevant-free
    queries, chunking) is the module docstring's.

    Args:
        {queries}
        k: the neighbours that vote (1 ≤ k ≤ the reference rows available).
        {ranking}

    Returns:
        Accuracy in [0, 1] as a Python float.

    Raises:
        ValueError: {bad_input}; ``k`` is not a positive int or exceeds the
            reference rows.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses (1NN / 5NN accuracy).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> round(metrics.knn_accuracy(x, labels, k=1), 4)
        0.8
        >>> round(metrics.knn_accuracy(x, labels, k=3), 4)
        0.4
    """
    p = _Problem(query, query_labels, reference, reference_labels, similarity, chunk_size)
    p.check_k(k, "k")
    return float(np.mean(p.scores(k, _score_knn)))


def retrieval_metrics(
    query: Embeddings,
    query_labels: ArrayLike,
    reference: Embeddings | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    knn_k: int = 5,
    ks: Sequence[int] = (),
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> dict[str, float | dict[int, float]]:
    """:func:`precision_at_1`, :func:`knn_accuracy` and :func:`recall_at_k` from one top-k search.

    k = max(knn_k, ks): each value equals its function's, at about the cost of one of them (a costly
    similarity, such as the atlas d_M of Korman 2021 eq. 7, is computed once). The retrieval protocol (ties,
    exclusions, relevant-free queries, chunking) is the module docstring's.

    Args:
        {queries}
        knn_k: the k of :func:`knn_accuracy` (a positive int).
        ks: the ks of :func:`recall_at_k` (a sequence of positive ints, possibly empty).
        {ranking}

    Returns:
        {"precision_at_1": float, "knn_accuracy": float, "recall_at_k": {k: R@k}} (``recall_at_k`` only when
        ``ks`` is given).

    Raises:
        ValueError: {bad_input}; ``knn_k`` or a k of ``ks`` is not a
            positive int, ``ks`` is not a sequence, or max(knn_k, ks) exceeds the reference rows.
    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> out = metrics.retrieval_metrics(x, labels, knn_k=3, ks=(2,))
        >>> round(out["precision_at_1"], 4), round(out["knn_accuracy"], 4), out["recall_at_k"]
        (0.8, 0.4, {2: 1.0})
    """
    if isinstance(ks, int | str) or not isinstance(ks, Sequence):
        raise ValueError(f"ks must be a sequence of positive integers, got {ks!r}")
    _checks.check_positive_int(knn_k, "knn_k")
    for k in ks:
        _checks.check_positive_int(k, "ks")
    p = _Problem(query, query_labels, reference, reference_labels, similarity, chunk_size)
    ks = tuple(int(k) for k in ks)
    k = max((int(knn_k), *ks))
    p.check_k(k, "knn_k and ks")
    found = p.scores(k, _score_retrieval, (int(knn_k), ks))
    keep = p.relevant > 0
    out: dict[str, float | dict[int, float]] = {
        "precision_at_1": _mean_over(found[:, 0], keep),
        "knn_accuracy": float(np.mean(found[:, 1])),
    }
    if ks:
        out["recall_at_k"] = {k: _mean_over(found[:, 2 + j], keep) for j, k in enumerate(ks)}
    return out


def nearest_neighbors(
    query: Embeddings,
    reference: Embeddings | None = None,
    *,
    k: int = 1,
    similarity: Similarity = "cosine",
    chunk_size: int = 1024,
) -> np.ndarray:
    """Indices of each query's k most similar reference rows, best first, without an N × M matrix.

    The ranking is that of the metrics above (module docstring): ties to the lower reference index, NaN and
    −inf similarities last, and with ``reference=None`` the query set is ranked against itself with each
    query's own row excluded. Memory: chunk_size × Nr similarities at a time.

    Args:
        query: [Nq, D] floating, finite (or a tuple, with a callable similarity).
        reference: [Nr, D] floating, finite (or a tuple), or None for the query set itself.
        k: neighbours per query (1 ≤ k ≤ the reference rows available).
        {ranking}

    Returns:
        [Nq, k] int32 NumPy array (host) of reference row indices.

    Raises:
        ValueError: an embedding array is not a non-empty floating matrix, holds NaN or ±inf, or the widths
            differ; ``k`` is not a positive int or exceeds the reference rows; the similarity does not return
            [N, M].

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.7, 0.7]])
        >>> labels = jnp.array([0, 0, 1, 1, 1])
        >>> print(metrics.nearest_neighbors(x, k=2))
        [[1 4]
         [0 4]
         [3 4]
         [2 4]
         [1 3]]
    """
    p = _Ranking(query, reference, similarity, chunk_size)
    p.check_k(k, "k")
    return p.top_k(k, _score_indices, jnp.arange(p.n_ref, dtype=jnp.int32), ())


# --------------------------------------------------------------------------------------------------------
# Distribution statistic and few-shot episodes.
# --------------------------------------------------------------------------------------------------------


def circular_variance(z: ArrayLike) -> jax.Array:
    """Circular variance 1 − ‖(1/n) Σ_i Z_i‖₂ of unit vectors (Stowell 2026, eq. 4), one number for the set.

    Rows are L2-normalised first (a no-op for sphere embeddings and Clifford-form torus embeddings, which is
    the form Stowell 2026 uses for tori; zero rows stay zero). As in the paper this is computed over the whole
    D-vector, not per angle: for Clifford vectors of D/2 angles ‖mean Z‖² = mean_k R̄_k², R̄_k being angle k's
    mean resultant length. A jit-able kernel: a row with a NaN or ±inf entry makes the result NaN.

    Args:
        z: [N, D] floating vectors.

    Returns:
        float32 scalar in [0, 1].

    Raises:
        ValueError: ``z`` is not a non-empty floating matrix.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), eq. 4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> float(metrics.circular_variance(jnp.array([[1.0, 0.0], [-1.0, 0.0]])))
        1.0
        >>> round(float(metrics.circular_variance(jnp.array([[1.0, 0.0], [0.0, 1.0]]))), 4)
        0.2929
    """
    _checks.check_matrix(z, "z")
    _checks.check_floating(z, "z")
    mean = jnp.mean(_numerics.safe_normalize(jnp.asarray(z, _F32)), axis=0)
    return 1.0 - _numerics.safe_norm(mean)


def _class_table(labels: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of each class, padded: table [C, max count] int32, counts [C] int32."""
    members = [np.flatnonzero(labels == c) for c in classes]
    counts = np.array([len(m) for m in members], np.int32)
    table = np.zeros((len(classes), counts.max()), np.int32)
    for i, m in enumerate(members):
        table[i, : len(m)] = m
    return table, counts


@functools.partial(jax.jit, static_argnames=("sim_fn", "ways", "shots", "queries", "episodes"))
def _episodes(
    key, query, reference, q_table, q_counts, s_table, s_counts, *, sim_fn, ways, shots, queries, episodes
):
    """Accuracy of each of ``episodes`` prototype-classifier episodes -> [episodes] float32.

    Tables list each eligible class's rows (padded, with counts). Classes and members are drawn without
    replacement as the top entries of uniform scores. Same-set mode (reference is None): support and query
    rows are one draw of shots + queries rows per class. Memory: episodes × ways × (largest class) floats.
    """
    k_cls, k_s, k_q = jax.random.split(key, 3)
    _, cls = lax.top_k(jax.random.uniform(k_cls, (episodes, q_table.shape[0])), ways)  # [E, ways]

    def draw(k, table, counts, n):  # n distinct members of each chosen class -> [E, ways, n] rows
        u = jax.random.uniform(k, (episodes, ways, table.shape[1]))
        valid = jnp.arange(table.shape[1]) < counts[cls][..., None]
        _, pos = lax.top_k(jnp.where(valid, u, -1.0), n)
        return jnp.take_along_axis(table[cls], pos, axis=2)

    if reference is None:
        rows = draw(k_s, q_table, q_counts, shots + queries)
        support, qrows, bank = rows[..., :shots], rows[..., shots:], query
    else:
        support, qrows, bank = (
            draw(k_s, s_table, s_counts, shots),
            draw(k_q, q_table, q_counts, queries),
            reference,
        )
    prototypes = jnp.mean(bank[support].astype(_F32), axis=2)  # [E, ways, D]
    sim = jnp.asarray(jax.vmap(sim_fn)(query[qrows.reshape(episodes, ways * queries)], prototypes), _F32)
    pred = jnp.argmax(jnp.where(jnp.isnan(sim), _LOW, sim), axis=2)  # [E, ways * queries]
    return jnp.mean(pred == jnp.repeat(jnp.arange(ways), queries)[None, :], axis=1)


def few_shot_accuracy(
    query: ArrayLike,
    query_labels: ArrayLike,
    reference: ArrayLike | None = None,
    reference_labels: ArrayLike | None = None,
    *,
    key: jax.Array,
    ways: int = 5,
    shots: int = 1,
    queries: int = 15,
    episodes: int = 600,
    similarity: Similarity = "cosine",
) -> tuple[float, float]:
    """Few-shot accuracy of a prototype classifier over n-way k-shot episodes (Stowell 2026, Experiment 3).

    ProtoCLR's protocol. Each episode draws ``ways`` distinct classes, ``shots`` support and ``queries`` query
    rows per class (without replacement); the prototype of a class is the mean of its support rows, and each
    query row is assigned to the prototype of highest similarity (ties to the lower class slot).
    reference=None draws support and query rows disjointly from ``query``; otherwise support rows come from
    ``reference`` and query rows from ``query``. Only classes with enough rows take part.

    Args:
        query: [Nq, D] floating, finite.
        query_labels: [Nq] integer labels.
        reference: [Nr, D] floating, finite, or None (support and query rows both from ``query``).
        reference_labels: [Nr] integer labels; given exactly when ``reference`` is.
        key: a JAX PRNG key for the episodes.
        ways: classes per episode (≥ 2).
        shots: support rows per class (a positive int).
        queries: query rows per class (a positive int).
        episodes: the number of episodes (≥ 2).
        similarity: a name understood by :func:`geojax.similarity.get` or a callable (a, b) → [N, M].

    Returns:
        (mean accuracy, 95% CI half-width 1.96·s/√episodes with the sample std s), Python floats.

    Raises:
        ValueError: an embedding array is not a non-empty floating matrix, holds NaN or ±inf, or the widths
            differ; labels are malformed; ``reference`` and ``reference_labels`` are not given together;
            ``ways`` < 2, ``episodes`` < 2, or fewer than ``ways`` classes have enough rows.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Experiment 3.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import metrics
        >>> x = jnp.array([[1.0, 0.0]] * 3 + [[0.0, 1.0]] * 3)
        >>> labels = jnp.array([0, 0, 0, 1, 1, 1])
        >>> metrics.few_shot_accuracy(x, labels, key=jax.random.key(0), ways=2, queries=2, episodes=10)
        (1.0, 0.0)
    """
    sim_fn = _resolve_similarity(similarity)
    _checks.check_matrix(query, "query")
    _checks.check_floating(query, "query")
    labels = _labels(query_labels, "query_labels", jnp.shape(query)[0], "one per query row")
    for v, name in ((ways, "ways"), (shots, "shots"), (queries, "queries")):
        _checks.check_positive_int(v, name)
    _checks.check_positive_int(episodes, "episodes")
    if episodes < 2:
        raise ValueError(f"episodes must be at least 2 (confidence interval), got {episodes}")
    if ways < 2:
        raise ValueError(f"ways must be at least 2, got {ways}")
    q_classes, q_counts = np.unique(labels, return_counts=True)
    if reference is None:
        if reference_labels is not None:
            raise ValueError("reference_labels must be None when reference is None (query vs itself)")
        eligible = q_classes[q_counts >= shots + queries]
        need = f"{shots + queries} rows (shots + queries) in query"
    else:
        if reference_labels is None:
            raise ValueError("reference_labels must be given with reference")
        _checks.check_matrix(reference, "reference")
        _checks.check_floating(reference, "reference")
        _checks.check_same_width(query, reference, "query", "reference")
        ref_labels = _labels(
            reference_labels, "reference_labels", jnp.shape(reference)[0], "one per reference row"
        )
        r_classes, r_counts = np.unique(ref_labels, return_counts=True)
        eligible = np.intersect1d(q_classes[q_counts >= queries], r_classes[r_counts >= shots])
        need = f"{queries} query rows and {shots} reference rows"
    if len(eligible) < ways:
        raise ValueError(f"ways must be at most {len(eligible)} (classes with {need}), got {ways}")
    _checks.check_finite(query, "query")
    if reference is not None:
        _checks.check_finite(reference, "reference")
    q_table, q_cnt = _class_table(labels, eligible)
    s_table, s_cnt = (q_table, q_cnt) if reference is None else _class_table(ref_labels, eligible)
    acc = np.asarray(
        _episodes(
            key,
            jnp.asarray(query),
            None if reference is None else jnp.asarray(reference),
            jnp.asarray(q_table),
            jnp.asarray(q_cnt),
            jnp.asarray(s_table),
            jnp.asarray(s_cnt),
            sim_fn=sim_fn,
            ways=ways,
            shots=shots,
            queries=queries,
            episodes=episodes,
        ),
        np.float64,
    )
    return float(acc.mean()), float(1.96 * acc.std(ddof=1) / math.sqrt(episodes))


# The retrieval metrics share the Args of their query and reference sets, of their ranking, and the first
# problems they refuse: written once here, they take the place of {queries}, {ranking} and {bad_input} in
# each docstring (documentation by reference, as geojax.losses does).
_SHARED_DOC = {
    "{queries}": """query: [Nq, D] floating query embeddings, finite (or, with a callable
            similarity, a tuple of arrays sharing the leading axis, such as an atlas's (coords, q)).
        query_labels: [Nq] integer labels of the queries.
        reference: [Nr, D] floating reference embeddings, finite (or a tuple, as ``query``); None
            ranks the query set against itself with each query's own row excluded.
        reference_labels: [Nr] integer labels of the reference rows; given exactly when ``reference``
            is.""",
    "{ranking}": """similarity: a name understood by :func:`geojax.similarity.get` or a callable
            (a, b) → [N, M], higher = more similar (pass a distance negated).
        chunk_size: queries per block (a positive int); memory chunk_size × Nr similarities at a
            time.""",
    "{bad_input}": """an embedding array is not a non-empty floating matrix, holds NaN or
            ±inf, or the widths differ; labels have the wrong length or dtype; ``reference`` and
            ``reference_labels`` are not given together; the similarity does not return [N, M]""",
}


def _filled(doc: str | None) -> str:
    for mark, text in _SHARED_DOC.items():
        doc = (doc or "").replace(mark, text)
    return doc or ""


precision_at_1.__doc__ = _filled(precision_at_1.__doc__)
recall_at_k.__doc__ = _filled(recall_at_k.__doc__)
map_at_r.__doc__ = _filled(map_at_r.__doc__)
mean_average_precision.__doc__ = _filled(mean_average_precision.__doc__)
knn_accuracy.__doc__ = _filled(knn_accuracy.__doc__)
retrieval_metrics.__doc__ = _filled(retrieval_metrics.__doc__)
nearest_neighbors.__doc__ = _filled(nearest_neighbors.__doc__)
