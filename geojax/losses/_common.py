"""What every loss of :mod:`geojax.losses` shares: the names of the losses and their options, the checks of
their inputs (at Python level, before any tracing), the positive and negative masks of anchors against keys,
and the global mean over a named axis.
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from geojax import _checks, parallel
from geojax._numerics import safe_div

#: Finite stand-in for infinity in masks and empty log-sum-exps (fp32 max ≈ 3.4e38).
BIG = 1e30

LossName = Literal["supcon", "sincere", "info_nce", "contrastive", "triplet", "lifted_structured", "simo"]
Mining = Literal["all", "hard", "semihard"]
Reduction = Literal["mean_nonzero", "mean"]
LOSSES: tuple[str, ...] = get_args(LossName)
MININGS: tuple[str, ...] = get_args(Mining)
REDUCTIONS: tuple[str, ...] = get_args(Reduction)


# ----------------------------------------------------------------------------------------------------------
# validation (Python level, before any tracing)


def check_positive(v, name: str) -> None:
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


def check_nonnegative(v, name: str) -> None:
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


def check_labels(x, name: str, n: int, what: str) -> None:
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


def check_keys(labels, n: int, m: int, key_labels, self_index, key_valid, rows: str, cols: str) -> None:
    """Check the labels of n anchors and m keys, the anchors' own key columns and the valid keys.

    Args:
        labels: [n] integer labels of the anchors.
        n: the number of anchors.
        m: the number of keys.
        key_labels: [m] integer labels of the keys, or None (then m must equal n).
        self_index: [n] integer column of each anchor's own key in [0, m), or None.
        key_valid: [m] bool, or None.
        rows: what the anchors are (in messages).
        cols: what the keys are (in messages).

    Raises:
        ValueError: an argument has the wrong rank, length or dtype; ``key_labels`` is missing while m ≠ n;
            ``self_index`` lies outside [0, m).
    """
    check_labels(labels, "labels", n, rows)
    if key_valid is not None:
        _checks.check_rank(key_valid, "key_valid", 1)
        _checks.check_length(key_valid, "key_valid", m, cols)
        _checks.check_dtype(key_valid, "key_valid", jnp.bool_)
    if key_labels is not None:
        check_labels(key_labels, "key_labels", m, cols)
    elif m != n:
        raise ValueError(f"key_labels is required when the keys differ from the anchors ({cols} = {m} ≠ {n})")
    if self_index is not None:
        check_labels(self_index, "self_index", n, rows)
        if not isinstance(self_index, jax.core.Tracer):
            lo, hi = int(jnp.min(self_index)), int(jnp.max(self_index))
            if lo < 0 or hi >= m:
                raise ValueError(f"self_index must lie in [0, {m}) ({cols}), got values in [{lo}, {hi}]")


def check_sim(sim, labels, key_labels, self_index, key_valid=None) -> None:
    """Check a similarity matrix [n, M] and the labels, self columns and valid keys that go with it.

    Args:
        sim: [n, M] floating similarities.
        labels: [n] integer labels of the anchors.
        key_labels: [M] integer labels of the keys, or None.
        self_index: [n] integer self columns, or None.
        key_valid: [M] bool, or None.

    Raises:
        ValueError: ``sim`` is not a non-empty floating matrix, or :func:`check_keys` fails.
    """
    _checks.check_matrix(sim, "sim")
    _checks.check_floating(sim, "sim")
    n, m = sim.shape
    check_keys(labels, n, m, key_labels, self_index, key_valid, "rows of sim", "columns of sim")


def check_embeddings(embeddings, key_embeddings, labels, key_labels, self_index, key_valid=None) -> None:
    """Check anchor embeddings [n, D], optional key embeddings [M, D] and the labels that go with them.

    Args:
        embeddings: [n, D] floating embeddings of the anchors.
        key_embeddings: [M, D] floating embeddings of the keys, or None (the anchors).
        labels: [n] integer labels of the anchors.
        key_labels: [M] integer labels of the keys, or None.
        self_index: [n] integer self columns, or None.
        key_valid: [M] bool, or None.

    Raises:
        ValueError: an embedding set is not a non-empty floating matrix, the widths differ, or
            :func:`check_keys` fails.
    """
    _checks.check_matrix(embeddings, "embeddings")
    _checks.check_floating(embeddings, "embeddings")
    m = embeddings.shape[0]
    if key_embeddings is not None:
        _checks.check_matrix(key_embeddings, "key_embeddings")
        _checks.check_floating(key_embeddings, "key_embeddings")
        _checks.check_same_width(embeddings, key_embeddings, "embeddings", "key_embeddings")
        m = key_embeddings.shape[0]
    n = embeddings.shape[0]
    check_keys(
        labels, n, m, key_labels, self_index, key_valid, "rows of embeddings", "rows of key_embeddings"
    )


# ----------------------------------------------------------------------------------------------------------
# shared masking and reduction


def resolve_keys(labels: jax.Array, key_labels, self_index) -> tuple[jax.Array, jax.Array]:
    """The key labels and each anchor's self column, from the optional arguments of a loss.

    Args:
        labels: [n] labels of the anchors.
        key_labels: [M] labels of the keys, or None (the keys are the anchors).
        self_index: [n] self columns, or None.

    Returns:
        (key labels [M], self columns [n] int32); −1 marks 'no self column' (never equal to a key column).
    """
    n = labels.shape[0]
    if key_labels is None:
        return labels, jnp.arange(n, dtype=jnp.int32) if self_index is None else self_index.astype(jnp.int32)
    if self_index is None:
        return key_labels, jnp.full((n,), -1, jnp.int32)
    return key_labels, self_index.astype(jnp.int32)


def pair_masks(labels, key_labels, self_cols, key_cols, key_valid=None) -> tuple[jax.Array, jax.Array]:
    """Positive and negative masks of anchors against keys.

    Positive: same label, not the anchor's own column; negative: different label.

    Args:
        labels: [n] labels of the anchors.
        key_labels: [K] labels of the keys.
        self_cols: [n] each anchor's own column (−1: none).
        key_cols: [K] the keys' columns.
        key_valid: [K] bool, False on padding columns (dropped from both masks), or None.

    Returns:
        (positive [n, K] bool, negative [n, K] bool).
    """
    same = labels[:, None] == key_labels[None, :]
    pos = same & (key_cols[None, :] != self_cols[:, None])
    neg = ~same
    if key_valid is not None:
        pos, neg = pos & key_valid[None, :], neg & key_valid[None, :]
    return pos, neg


def global_mean(num: jax.Array, den: jax.Array, axis_name) -> jax.Array:
    """Global numerator over global denominator, both summed over the devices of ``axis_name``.

    Args:
        num: this device's part of the numerator.
        den: this device's part of the denominator (a count).
        axis_name: the named mapped axis; None on one device.

    Returns:
        The quotient: 0 when the global den is 0, NaN when the global num is not finite.
    """
    return safe_div(*parallel.global_sum((num, den.astype(jnp.float32)), axis_name))


def as_f32(x: ArrayLike) -> jax.Array:
    """``x`` as an fp32 array, the precision of every loss's arithmetic.

    Args:
        x: any array.

    Returns:
        fp32 array.
    """
    return jnp.asarray(x, jnp.float32)
