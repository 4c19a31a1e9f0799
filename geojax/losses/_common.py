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

# Finite stand-in for infinity in masks and empty log-sum-exps (fp32 max ≈ 3.4e38).
_BIG = 1e30

LossName = Literal["supcon", "sincere", "info_nce", "contrastive", "triplet", "lifted_structured", "simo"]
Mining = Literal["all", "hard", "semihard"]
Reduction = Literal["mean_nonzero", "mean"]
LOSSES: tuple[str, ...] = get_args(LossName)
MININGS: tuple[str, ...] = get_args(Mining)
REDUCTIONS: tuple[str, ...] = get_args(Reduction)


# ----------------------------------------------------------------------------------------------------------
# validation (Python level, before any tracing)


def _check_positive(v, name: str) -> None:
    """Raise unless the hyper-parameter ``v`` is > 0 (skipped when ``v`` is traced)."""
    if isinstance(v, jax.core.Tracer):
        return
    if jnp.ndim(v) != 0 or not float(v) > 0:
        raise ValueError(f"{name} must be a positive scalar, got {v!r}")


def _check_nonnegative(v, name: str) -> None:
    """Raise unless the hyper-parameter ``v`` is ≥ 0 (skipped when ``v`` is traced)."""
    if isinstance(v, jax.core.Tracer):
        return
    if jnp.ndim(v) != 0 or not float(v) >= 0:
        raise ValueError(f"{name} must be a non-negative scalar, got {v!r}")


def _check_labels(x, name: str, n: int, what: str) -> None:
    _checks.check_rank(x, name, 1)
    _checks.check_length(x, name, n, what)
    _checks.check_integer(x, name)


def _check_keys(labels, n: int, m: int, key_labels, self_index, key_valid, rows: str, cols: str) -> None:
    """Check labels [n], key_labels [m], self_index [n] and key_valid [m] for n anchors (``rows``) and m keys
    (``cols``)."""
    _check_labels(labels, "labels", n, rows)
    if key_valid is not None:
        _checks.check_rank(key_valid, "key_valid", 1)
        _checks.check_length(key_valid, "key_valid", m, cols)
        _checks.check_dtype(key_valid, "key_valid", jnp.bool_)
    if key_labels is not None:
        _check_labels(key_labels, "key_labels", m, cols)
    elif m != n:
        raise ValueError(f"key_labels is required when the keys differ from the anchors ({cols} = {m} ≠ {n})")
    if self_index is not None:
        _check_labels(self_index, "self_index", n, rows)
        if not isinstance(self_index, jax.core.Tracer):
            lo, hi = int(jnp.min(self_index)), int(jnp.max(self_index))
            if lo < 0 or hi >= m:
                raise ValueError(f"self_index must lie in [0, {m}) ({cols}), got values in [{lo}, {hi}]")


def _check_sim(sim, labels, key_labels, self_index, key_valid=None) -> None:
    _checks.check_matrix(sim, "sim")
    _checks.check_floating(sim, "sim")
    n, m = sim.shape
    _check_keys(labels, n, m, key_labels, self_index, key_valid, "rows of sim", "columns of sim")


def _check_embeddings(embeddings, key_embeddings, labels, key_labels, self_index, key_valid=None) -> None:
    _checks.check_matrix(embeddings, "embeddings")
    _checks.check_floating(embeddings, "embeddings")
    m = embeddings.shape[0]
    if key_embeddings is not None:
        _checks.check_matrix(key_embeddings, "key_embeddings")
        _checks.check_floating(key_embeddings, "key_embeddings")
        _checks.check_same_width(embeddings, key_embeddings, "embeddings", "key_embeddings")
        m = key_embeddings.shape[0]
    n = embeddings.shape[0]
    _check_keys(
        labels, n, m, key_labels, self_index, key_valid, "rows of embeddings", "rows of key_embeddings"
    )


# ----------------------------------------------------------------------------------------------------------
# shared masking and reduction


def _resolve_keys(labels: jax.Array, key_labels, self_index) -> tuple[jax.Array, jax.Array]:
    """Key labels [M] and self columns [n]; −1 marks 'no self column' (never equal to a key column)."""
    n = labels.shape[0]
    if key_labels is None:
        return labels, jnp.arange(n, dtype=jnp.int32) if self_index is None else self_index.astype(jnp.int32)
    if self_index is None:
        return key_labels, jnp.full((n,), -1, jnp.int32)
    return key_labels, self_index.astype(jnp.int32)


def _pair_masks(labels, key_labels, self_cols, key_cols, key_valid=None) -> tuple[jax.Array, jax.Array]:
    """Positive and negative masks [n, K] of anchors (labels [n], self_cols [n]) against keys [K].

    Positive: same label, not the anchor's own column; negative: different label. ``key_valid`` [K] drops
    padding columns.
    """
    same = labels[:, None] == key_labels[None, :]
    pos = same & (key_cols[None, :] != self_cols[:, None])
    neg = ~same
    if key_valid is not None:
        pos, neg = pos & key_valid[None, :], neg & key_valid[None, :]
    return pos, neg


def _mean(num: jax.Array, den: jax.Array, axis_name) -> jax.Array:
    """Global num / global den (0 when the global den is 0, NaN when the global num is not finite)."""
    return safe_div(*parallel.global_sum((num, den.astype(jnp.float32)), axis_name))


def _f32(x: ArrayLike) -> jax.Array:
    return jnp.asarray(x, jnp.float32)
