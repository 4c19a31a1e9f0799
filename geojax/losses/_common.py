"""What every loss of :mod:`geojax.losses` shares: the names of the losses and their options, the checks of
their inputs (at Python level, before any tracing), the positive and negative masks of anchors against keys
(from integer labels or multi-hot label sets, narrowed by a miner's masks), the global means over a named
axis, and the docstring sections the losses share.
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from geojax import _checks, parallel
from geojax._numerics import nan_where_nonfinite, safe_div

#: Finite stand-in for infinity in masks and empty log-sum-exps (fp32 max ≈ 3.4e38).
BIG = 1e30

LossName = Literal[
    "supcon",
    "sincere",
    "info_nce",
    "contrastive",
    "triplet",
    "lifted_structured",
    "simo",
    "proxy_anchor",
    "proxy_nca",
    "normalized_softmax",
    "arcface",
    "cosface",
    "multi_similarity",
    "circle",
    "sigmoid",
]
Mining = Literal["all", "hard", "semihard"]
Reduction = Literal["mean_nonzero", "mean"]
MultiLabel = Literal["any", "jaccard"]
LOSSES: tuple[str, ...] = get_args(LossName)
MININGS: tuple[str, ...] = get_args(Mining)
REDUCTIONS: tuple[str, ...] = get_args(Reduction)
MULTILABELS: tuple[str, ...] = get_args(MultiLabel)


# ----------------------------------------------------------------------------------------------------------
# validation (Python level, before any tracing)


def check_positive(v: float | jax.Array, name: str) -> None:
    """Raise unless the hyper-parameter ``v`` is a scalar > 0 (skipped when ``v`` is traced).

    Args:
        v: the value.
        name: its name in the message.

    Raises:
        ValueError: ``v`` is not a positive scalar.
    """
    if isinstance(v, jax.core.Tracer):
        return
    if jnp.ndim(v) != 0 or not float(v) > 0:
        raise ValueError(f"{name} must be a positive scalar, got {v!r}")


def check_nonnegative(v: float | jax.Array, name: str) -> None:
    """Raise unless the hyper-parameter ``v`` is a scalar ≥ 0 (skipped when ``v`` is traced).

    Args:
        v: the value.
        name: its name in the message.

    Raises:
        ValueError: ``v`` is not a non-negative scalar.
    """
    if isinstance(v, jax.core.Tracer):
        return
    if jnp.ndim(v) != 0 or not float(v) >= 0:
        raise ValueError(f"{name} must be a non-negative scalar, got {v!r}")


def check_labels(x: ArrayLike, name: str, n: int, what: str) -> None:
    """Raise unless ``x`` is an integer vector of length ``n``.

    Args:
        x: the labels.
        name: their name in the message.
        n: the length required.
        what: where ``n`` comes from (in the message).

    Raises:
        ValueError: ``x`` is not rank 1, has another length or a non-integer dtype.
    """
    _checks.check_rank(x, name, 1)
    _checks.check_length(x, name, n, what)
    _checks.check_integer(x, name)


def _check_multi_hot(x, name: str, n: int, what: str, width: int | None) -> None:
    """Raise unless ``x`` is a bool or 0/1 integer [n, L] matrix (L = ``width`` when given); its values are
    read only when ``x`` is concrete."""
    _checks.check_length(x, name, n, what)
    _checks.check_integer(x, name)
    if width is not None and jnp.shape(x)[1] != width:
        raise ValueError(
            f"{name} must have {width} label columns, as labels, got shape {tuple(jnp.shape(x))}"
        )
    if _checks.is_traced(x):
        return
    with jax.ensure_compile_time_eval():  # a concrete array closed over by a traced function is read too
        values = np.unique(np.asarray(x))
    if not set(values.tolist()) <= {0, 1}:
        raise ValueError(f"{name} must be multi-hot (bool, or integers 0 and 1), got values {values[:5]}")


def check_keys(
    labels: ArrayLike,
    n: int,
    m: int,
    key_labels: ArrayLike | None,
    self_index: ArrayLike | None,
    key_valid: ArrayLike | None,
    rows: str,
    cols: str,
    multi_hot: bool = False,
) -> None:
    """Check the labels of n anchors and m keys, the anchors' own key columns and the valid keys.

    Args:
        labels: [n] integer labels of the anchors (or, with ``multi_hot``, [n, L] multi-hot label sets).
        n: the number of anchors.
        m: the number of keys.
        key_labels: [m] integer labels of the keys ([m, L] multi-hot when ``labels`` is), or None (then m
            must equal n).
        self_index: [n] integer column of each anchor's own key in [0, m), or None.
        key_valid: [m] bool, or None.
        rows: what the anchors are (in messages).
        cols: what the keys are (in messages).
        multi_hot: whether labels may be [n, L] multi-hot sets.

    Raises:
        ValueError: an argument has the wrong rank, length or dtype; ``key_labels`` is missing while m ≠ n;
            ``self_index`` lies outside [0, m); multi-hot labels hold values other than 0 and 1.
    """
    multi = multi_hot and jnp.ndim(labels) == 2
    if multi:
        _check_multi_hot(labels, "labels", n, rows, None)
    else:
        _checks.check_rank(labels, "labels", (1, 2) if multi_hot else 1)
        check_labels(labels, "labels", n, rows)
    if key_valid is not None:
        _checks.check_rank(key_valid, "key_valid", 1)
        _checks.check_length(key_valid, "key_valid", m, cols)
        _checks.check_dtype(key_valid, "key_valid", jnp.bool_)
    if key_labels is None and m != n:
        raise ValueError(f"key_labels is required when the keys differ from the anchors ({cols} = {m} ≠ {n})")
    if key_labels is not None and multi:
        _checks.check_rank(key_labels, "key_labels", 2)
        _check_multi_hot(key_labels, "key_labels", m, cols, jnp.shape(labels)[1])
    elif key_labels is not None:
        check_labels(key_labels, "key_labels", m, cols)
    if self_index is not None:
        check_labels(self_index, "self_index", n, rows)
        if not isinstance(self_index, jax.core.Tracer):
            with jax.ensure_compile_time_eval():  # also when closed over by a traced function
                lo, hi = int(jnp.min(self_index)), int(jnp.max(self_index))
            if lo < 0 or hi >= m:
                raise ValueError(f"self_index must lie in [0, {m}) ({cols}), got values in [{lo}, {hi}]")


def check_sim(
    sim: ArrayLike,
    labels: ArrayLike,
    key_labels: ArrayLike | None,
    self_index: ArrayLike | None,
    key_valid: ArrayLike | None = None,
    multi_hot: bool = False,
) -> None:
    """Check a similarity matrix [n, M] and the labels, self columns and valid keys that go with it.

    Args:
        sim: [n, M] floating similarities.
        labels: [n] integer labels of the anchors ([n, L] multi-hot sets with ``multi_hot``).
        key_labels: [M] integer labels of the keys, or None.
        self_index: [n] integer self columns, or None.
        key_valid: [M] bool, or None.
        multi_hot: whether labels may be multi-hot sets.

    Raises:
        ValueError: ``sim`` is not a non-empty floating matrix, or :func:`check_keys` fails.
    """
    _checks.check_matrix(sim, "sim")
    _checks.check_floating(sim, "sim")
    n, m = jnp.shape(sim)
    check_keys(labels, n, m, key_labels, self_index, key_valid, "rows of sim", "columns of sim", multi_hot)


def check_embeddings(
    embeddings: ArrayLike,
    key_embeddings: ArrayLike | None,
    labels: ArrayLike,
    key_labels: ArrayLike | None,
    self_index: ArrayLike | None,
    key_valid: ArrayLike | None = None,
    multi_hot: bool = False,
) -> None:
    """Check anchor embeddings [n, D], optional key embeddings [M, D] and the labels that go with them.

    Args:
        embeddings: [n, D] floating embeddings of the anchors.
        key_embeddings: [M, D] floating embeddings of the keys, or None (the anchors).
        labels: the anchors' labels, as for :func:`check_sim`.
        key_labels: the keys' labels, as for :func:`check_sim`.
        self_index: the self columns, as for :func:`check_sim`.
        key_valid: the valid keys, as for :func:`check_sim`.
        multi_hot: as for :func:`check_sim`.

    Raises:
        ValueError: an embedding set is not a non-empty floating matrix, the widths differ, or
            :func:`check_keys` fails.
    """
    _checks.check_matrix(embeddings, "embeddings")
    _checks.check_floating(embeddings, "embeddings")
    m = jnp.shape(embeddings)[0]
    if key_embeddings is not None:
        _checks.check_matrix(key_embeddings, "key_embeddings")
        _checks.check_floating(key_embeddings, "key_embeddings")
        _checks.check_same_width(embeddings, key_embeddings, "embeddings", "key_embeddings")
        m = jnp.shape(key_embeddings)[0]
    n = jnp.shape(embeddings)[0]
    rows, cols = "rows of embeddings", "rows of key_embeddings"
    check_keys(labels, n, m, key_labels, self_index, key_valid, rows, cols, multi_hot)


# ----------------------------------------------------------------------------------------------------------
# shared masking and reduction


def resolve_keys(
    labels: jax.Array, key_labels: ArrayLike | None, self_index: ArrayLike | None
) -> tuple[jax.Array, jax.Array]:
    """The key labels and each anchor's self column, from the optional arguments of a loss.

    Args:
        labels: [n] labels of the anchors.
        key_labels: [M] labels of the keys, or None (the keys are the anchors).
        self_index: [n] self columns, or None.

    Returns:
        (key labels [M], self columns [n] int32); −1 marks 'no self column' (never equal to a key column).
    """
    n = labels.shape[0]
    if self_index is None:
        self_cols = jnp.arange(n, dtype=jnp.int32) if key_labels is None else jnp.full((n,), -1, jnp.int32)
    else:
        self_cols = jnp.asarray(self_index, jnp.int32)
    return (labels if key_labels is None else jnp.asarray(key_labels)), self_cols


def label_overlap(labels: jax.Array, key_labels: jax.Array) -> jax.Array:
    """How many labels each anchor shares with each key, for multi-hot label sets.

    Args:
        labels: [n, L] multi-hot labels of the anchors.
        key_labels: [K, L] multi-hot labels of the keys.

    Returns:
        [n, K] fp32 counts #(y_a ∩ y_k).
    """
    a, b = labels.astype(jnp.float32), key_labels.astype(jnp.float32)
    return jnp.einsum("nl,kl->nk", a, b, preferred_element_type=jnp.float32)


def pair_masks(
    labels: jax.Array,
    key_labels: jax.Array,
    self_cols: jax.Array,
    key_cols: jax.Array,
    key_valid: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Positive and negative masks of anchors against keys.

    Positive: same label (for multi-hot sets, at least one label shared), not the anchor's own column;
    negative: different label (no label shared).

    Args:
        labels: [n] labels of the anchors, or [n, L] multi-hot label sets.
        key_labels: [K] labels of the keys, or [K, L] multi-hot label sets.
        self_cols: [n] each anchor's own column (−1: none).
        key_cols: [K] the keys' columns.
        key_valid: [K] bool, False on padding columns (dropped from both masks), or None.

    Returns:
        (positive [n, K] bool, negative [n, K] bool).
    """
    if labels.ndim == 2:
        same = label_overlap(labels, key_labels) > 0
    else:
        same = labels[:, None] == key_labels[None, :]
    pos = same & (key_cols[None, :] != self_cols[:, None])
    neg = ~same
    if key_valid is not None:
        valid = jnp.asarray(key_valid)[None, :]
        pos, neg = pos & valid, neg & valid
    return pos, neg


def pair_weights(multilabel: str, labels: jax.Array, key_labels: jax.Array) -> jax.Array | None:
    """The weight of each positive pair in the mean over an anchor's positives.

    Args:
        multilabel: 'any' (every positive pair weighs 1) or 'jaccard' (#(y_a ∩ y_k) / #(y_a ∪ y_k)).
        labels: [n] or [n, L] multi-hot labels of the anchors.
        key_labels: [K] or [K, L] multi-hot labels of the keys.

    Returns:
        [n, K] fp32 weights, or None where every positive pair weighs 1 ('any', or 1-D labels, whose Jaccard
        index is 1 on every positive pair).
    """
    if multilabel == "any" or labels.ndim == 1:
        return None
    shared = label_overlap(labels, key_labels)
    sizes = jnp.sum(labels, axis=1, dtype=jnp.float32)[:, None] + jnp.sum(
        key_labels, axis=1, dtype=jnp.float32
    )
    return safe_div(shared, sizes - shared)


def check_pair_mask(mask: ArrayLike | None, name: str, shape: tuple[int, ...]) -> None:
    """Raise unless a miner's mask is a bool matrix of the similarity's shape.

    Args:
        mask: the mask, or None (no mask).
        name: its name in the message.
        shape: (n, M), the similarity's shape.

    Raises:
        ValueError: ``mask`` is not a bool [n, M] matrix.
    """
    if mask is None:
        return
    _checks.check_dtype(mask, name, jnp.bool_)
    if tuple(jnp.shape(mask)) != tuple(shape):
        raise ValueError(f"{name} must have the shape of sim {tuple(shape)}, got {tuple(jnp.shape(mask))}")


def prepare(
    sim: ArrayLike,
    labels: ArrayLike,
    key_labels: ArrayLike | None,
    self_index: ArrayLike | None,
    key_valid: ArrayLike | None,
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Validate a pair loss's arguments, then its similarities and pair masks.

    Args:
        sim: [n, M] floating similarities.
        labels: [n] integer labels of the anchors.
        key_labels: [M] integer labels of the keys, or None.
        self_index: [n] integer self columns, or None.
        key_valid: [M] bool, or None.
        pos_mask: [n, M] bool, the positive pairs a miner keeps (ANDed with the label mask), or None.
        neg_mask: [n, M] bool, the negative pairs a miner keeps (ANDed with the label mask), or None.

    Returns:
        (sim fp32 [n, M], positive mask, negative mask, 0 or NaN if ``sim`` is not all finite).

    Raises:
        ValueError: :func:`check_sim` or :func:`check_pair_mask` fails.
    """
    check_sim(sim, labels, key_labels, self_index, key_valid)
    check_pair_mask(pos_mask, "pos_mask", jnp.shape(sim))
    check_pair_mask(neg_mask, "neg_mask", jnp.shape(sim))
    labels = jnp.asarray(labels)
    all_keys, self_cols = resolve_keys(labels, key_labels, self_index)
    s = as_f32(sim)
    pos, neg = pair_masks(labels, all_keys, self_cols, jnp.arange(s.shape[1]), key_valid)
    if pos_mask is not None:
        pos = pos & jnp.asarray(pos_mask)
    if neg_mask is not None:
        neg = neg & jnp.asarray(neg_mask)
    return s, pos, neg, nan_where_nonfinite(s)


def global_mean(num: jax.Array, den: jax.Array, axis_name: str | None) -> jax.Array:
    """Global numerator over global denominator, both summed over the devices of ``axis_name``.

    Args:
        num: this device's part of the numerator.
        den: this device's part of the denominator (a count).
        axis_name: the named mapped axis; None on one device.

    Returns:
        The quotient: 0 when the global den is 0, NaN when the global num is not finite.
    """
    return safe_div(*parallel.global_sum((num, den.astype(jnp.float32)), axis_name))


def mean_nonzero(terms: jax.Array, mask: jax.Array, bad: jax.Array, axis_name: str | None) -> jax.Array:
    """Mean of the masked terms that are > 0 (pytorch-metric-learning's AvgNonZeroReducer), over the devices.

    Args:
        terms: the terms (≥ 0).
        mask: bool of the shape of ``terms``, the terms that exist.
        bad: 0, or NaN when an input was not finite (joins the numerator).
        axis_name: the named mapped axis; None on one device.

    Returns:
        Σ masked terms / #(masked terms > 0), over the global batch; 0 when there are none.
    """
    return global_mean(jnp.sum(jnp.where(mask, terms, 0.0)) + bad, jnp.sum(mask & (terms > 0)), axis_name)


def as_f32(x: ArrayLike) -> jax.Array:
    """``x`` as an fp32 array, the precision of every loss's arithmetic.

    Args:
        x: any array.

    Returns:
        fp32 array.
    """
    return jnp.asarray(x, jnp.float32)


# ----------------------------------------------------------------------------------------------------------
# docstring sections shared by reference (each loss's docstring holds a ``{masks}`` / ``{keys}`` line)

#: The Args entries of a miner's masks, in a pair loss's docstring in place of its ``{masks}`` line.
MASKS_DOC = """pos_mask: [n, M] bool, the positive pairs to keep (a miner's, :mod:`geojax.miners`), ANDed with
            the label mask; None: every positive pair.
        neg_mask: [n, M] bool, the negative pairs to keep, ANDed with the label mask; None: every negative
            pair."""

#: The Args entries of the keys and the device axis, in a loss's docstring in place of its ``{keys}`` line.
KEYS_DOC = """key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys
            are the anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss on
            every device); None on one device."""


#: The sections of the pair losses' docstrings, by the name of the line they take the place of.
PAIR_SECTIONS = {"masks": MASKS_DOC, "keys": KEYS_DOC}


def fill_doc(doc: str | None, **sections: str) -> str:
    """A docstring with its placeholder lines (a name in braces) replaced by the texts shared by name.

    Args:
        doc: the docstring as written in the ``def``.
        **sections: name → the shared text.

    Returns:
        The docstring as users read it.
    """
    doc = doc or ""
    for name, text in sections.items():
        doc = doc.replace("{" + name + "}", text)
    return doc
