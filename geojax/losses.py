"""Contrastive and metric-learning losses over a batch similarity matrix: SupCon (Khosla et al. 2020), SINCERE
and the margin losses compared by Feeney & Hughes (2024), InfoNCE (Oord et al. 2018), SimO (Bouhsine et al.
2024). Each loss's exact form, and where the papers' public code differs: docs/conventions.md.

Every loss takes ``sim`` [n, M] (higher = more similar) between n anchors and M keys, integer ``labels`` [n]
and, for the rectangular / distributed form, ``key_labels`` [M], ``self_index`` [n] (column of each anchor's
own key, masked as a self-pair) and ``axis_name`` (numerators *and* counts are summed over that named axis,
so every device returns the loss of the whole global batch). The square call ``loss(sim, labels)`` is the
plain form: keys = anchors, self-pairs excluded. If ``key_labels`` is given without ``self_index`` no column
is excluded. Anchors, pairs or triplets that do not exist (no positive, no negative) are left out of the
means; an empty set gives a loss of 0 with zero gradients.

Conventions match pytorch-metric-learning's with a similarity (CosineSimilarity): margins are in similarity
units and pairs are ordered (i, j), i ≠ j. Log-sum-exps run in fp32 with the (stop-gradient) row maximum
subtracted, and masked entries hold large finite values, never ±inf. A NaN or ±Inf anywhere in ``sim`` (or
in the embeddings of the blocked forms and SimO, through their similarities) makes the loss NaN, whatever
the masks select.

``supcon_blocked``, ``sincere_blocked`` and ``info_nce_blocked`` take embeddings and a similarity function
and never materialise the [n, M] matrix (nor store it for the backward pass): anchors are processed in
blocks, each with an online log-sum-exp over key blocks, under ``jax.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, parallel
from geojax import similarity as _similarity
from geojax._numerics import nan_where_nonfinite, safe_div

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


# ----------------------------------------------------------------------------------------------------------
# softmax family: supcon, sincere, info_nce


class _LSE(NamedTuple):
    """Running log-sum-exp state per row: stop-gradient max ``m`` [n] and rescaled sum ``s`` [n]."""

    m: jax.Array
    s: jax.Array


def _lse_init(zeros: jax.Array) -> _LSE:
    """Empty state shaped (and, under shard_map, device-varying) like ``zeros`` [n]."""
    return _LSE(zeros - _BIG, zeros)


def _lse_update(state: _LSE, x: jax.Array, mask: jax.Array) -> _LSE:
    """Fold the masked entries of x [n, K] into the running row log-sum-exp (online softmax)."""
    block_max = jnp.max(jnp.where(mask, lax.stop_gradient(x), -_BIG), axis=1)
    m = jnp.maximum(state.m, block_max)
    z = jnp.where(mask, x - m[:, None], -_BIG)
    return _LSE(m, state.s * jnp.exp(state.m - m) + jnp.sum(jnp.exp(z), axis=1))


def _lse_finish(state: _LSE) -> jax.Array:
    """log Σ exp per row [n]; −1e30 for an empty row (finite, zero gradient)."""
    ok = state.s > 0
    return jnp.where(ok, state.m + jnp.log(jnp.where(ok, state.s, 1.0)), -_BIG)


class _Softmax(NamedTuple):
    """One softmax loss: which keys form the denominator, the per-positive term, and the reduction."""

    denominator: Callable[[jax.Array, jax.Array], jax.Array]  # (pos, neg) -> mask
    term: Callable[[jax.Array, jax.Array], jax.Array]  # (x_ap, lse_a) -> loss of the pair (a, p)
    per_anchor: bool  # mean over positives, then over anchors (else one mean over all positive pairs)


# SupCon (Khosla et al. 2020, L^sup_out): −log(e^{x_ap} / Σ_{k≠a} e^{x_ak}).
_SUPCON = _Softmax(lambda pos, neg: pos | neg, lambda x, lse: lse - x, per_anchor=True)
# SINCERE (Feeney & Hughes 2024): −log(e^{x_ap} / (e^{x_ap} + Σ_n e^{x_an})) = softplus(LSE_n − x_ap).
_SINCERE = _Softmax(lambda pos, neg: neg, lambda x, lse: jax.nn.softplus(lse - x), per_anchor=True)
# InfoNCE / NT-Xent (Oord et al. 2018; Chen et al. 2020): same pair term, one mean over positive pairs.
_INFO_NCE = _SINCERE._replace(per_anchor=False)


def _softmax_rows(spec: _Softmax, x, pos, lse) -> tuple[jax.Array, jax.Array]:
    """Σ over positives of the pair term [n] and the positive count [n], for x [n, K] and lse [n]."""
    terms = jnp.where(pos, spec.term(x, lse[:, None]), 0.0)
    return jnp.sum(terms, axis=1), jnp.sum(pos, axis=1, dtype=jnp.int32)


def _softmax_reduce(
    spec: _Softmax, row_sum: jax.Array, count: jax.Array, bad: jax.Array, scale, axis_name
) -> jax.Array:
    """The loss from per-anchor sums and positive counts [n]; ``bad`` (0 or NaN) joins the numerator, and
    ``scale`` (τ / τ_base, or None) multiplies the result."""
    if spec.per_anchor:
        has = count > 0
        num = jnp.sum(jnp.where(has, row_sum / jnp.maximum(count, 1), 0.0))
        loss = _mean(num + bad, jnp.sum(has), axis_name)
    else:
        loss = _mean(jnp.sum(row_sum) + bad, jnp.sum(count), axis_name)
    return loss if scale is None else loss * scale


def _base_scale(temperature, base_temperature):
    """SupContrast's factor τ / τ_base, or None (no factor) when ``base_temperature`` is None."""
    if base_temperature is None:
        return None
    _check_positive(base_temperature, "base_temperature")
    return temperature / base_temperature


def _softmax_loss(
    spec: _Softmax, sim, labels, temperature, base_temperature, key_labels, self_index, key_valid, axis_name
) -> jax.Array:
    _check_sim(sim, labels, key_labels, self_index, key_valid)
    _check_positive(temperature, "temperature")
    scale = _base_scale(temperature, base_temperature)
    key_labels, self_cols = _resolve_keys(labels, key_labels, self_index)
    x = _f32(sim) / temperature
    pos, neg = _pair_masks(labels, key_labels, self_cols, jnp.arange(x.shape[1]), key_valid)
    lse = _lse_finish(_lse_update(_lse_init(jnp.zeros_like(x[:, 0])), x, spec.denominator(pos, neg)))
    row_sum, count = _softmax_rows(spec, x, pos, lse)
    return _softmax_reduce(spec, row_sum, count, nan_where_nonfinite(x), scale, axis_name)


def supcon(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Supervised contrastive loss L^sup_out (Khosla et al. 2020, eq. 2).

    Per anchor a, with x = s / τ: ℓ_a = −mean_{p∈P(a)} [x_ap − log Σ_{k≠a} e^{x_ak}], the sum over every key
    but the anchor's own column; the loss is the mean of ℓ_a over the anchors that have a positive
    (SupContrast's code also counts the others, as 0: docs/conventions.md), times τ / τ_base when
    ``base_temperature`` is given. Log-sum-exps run in fp32 with the (stop-gradient) row maximum subtracted.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar); the square call
            ``supcon(sim, labels)`` has keys = anchors.
        labels: [n] integer labels of the anchors.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (pytorch-metric-learning's form, no factor) or τ_base > 0, which multiplies
            the loss by τ / τ_base as SupContrast's code does (its default τ_base is 0.07).
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators *and* counts are summed, so every device returns
            the loss of the global batch; None on one device.

    Returns:
        Scalar fp32 loss: 0 with zero gradients when no anchor has a positive; NaN when ``sim`` holds a NaN
        or ±Inf anywhere, whatever the masks select.

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, M] matrix; ``labels``, ``key_labels`` or
            ``self_index`` has the wrong length or a non-integer dtype; ``key_labels`` is missing while
            M ≠ n; ``self_index`` lies outside [0, M); ``key_valid`` is not a bool [M] vector;
            ``temperature`` or ``base_temperature`` is not > 0.

    References:
        Khosla et al. 2020, "Supervised Contrastive Learning" (arXiv 2004.11362), eq. 2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.9, 0.1, 0.3], [0.9, 1.0, 0.2, 0.0],
        ...                  [0.1, 0.2, 1.0, 0.7], [0.3, 0.0, 0.7, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.supcon(sim, labels, temperature=0.5)), 4)
        0.4482
        >>> round(float(losses.supcon(sim, labels, temperature=0.5, base_temperature=0.07)), 4)
        3.2017
    """
    return _softmax_loss(
        _SUPCON, sim, labels, temperature, base_temperature, key_labels, self_index, key_valid, axis_name
    )


def sincere(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """SINCERE loss (Feeney & Hughes 2024, "cross entropy losses").

    As ``supcon`` but each positive's denominator holds only itself and the negatives (other labels): per
    anchor ℓ_a = −mean_{p∈P(a)} log(e^{x_ap} / (e^{x_ap} + Σ_{n: y_n≠y_a} e^{x_an})) = mean_p
    softplus(LSE_{N(a)} x − x_ap), x = s / τ; the loss is the mean of ℓ_a over the anchors that have a
    positive.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar); the square call
            ``sincere(sim, labels)`` has keys = anchors.
        labels: [n] integer labels of the anchors.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (pytorch-metric-learning's form, no factor) or τ_base > 0, which multiplies
            the loss by τ / τ_base as SupContrast's code does (its default τ_base is 0.07).
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators *and* counts are summed, so every device returns
            the loss of the global batch; None on one device.

    Returns:
        Scalar fp32 loss: 0 with zero gradients when no anchor has a positive; NaN when ``sim`` holds a NaN
        or ±Inf anywhere, whatever the masks select.

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, M] matrix; ``labels``, ``key_labels`` or
            ``self_index`` has the wrong length or a non-integer dtype; ``key_labels`` is missing while
            M ≠ n; ``self_index`` lies outside [0, M); ``key_valid`` is not a bool [M] vector;
            ``temperature`` or ``base_temperature`` is not > 0.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses, "cross entropy losses" (the
        SINCERE loss).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.9, 0.1, 0.3], [0.9, 1.0, 0.2, 0.0],
        ...                  [0.1, 0.2, 1.0, 0.7], [0.3, 0.0, 0.7, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.sincere(sim, labels, temperature=0.5)), 4)
        0.4482
    """
    return _softmax_loss(
        _SINCERE, sim, labels, temperature, base_temperature, key_labels, self_index, key_valid, axis_name
    )


def info_nce(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """InfoNCE / NT-Xent (Oord et al. 2018; Chen et al. 2020, eq. 1).

    Per positive pair (a, p), with x = s / τ: −log(e^{x_ap} / (e^{x_ap} + Σ_{n: y_n≠y_a} e^{x_an})), the
    SINCERE pair term, averaged once over *all positive pairs* (not per anchor); with two views per image
    and instance labels this is SimCLR's NT-Xent.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar); the square call
            ``info_nce(sim, labels)`` has keys = anchors.
        labels: [n] integer labels of the anchors.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (pytorch-metric-learning's form, no factor) or τ_base > 0, which multiplies
            the loss by τ / τ_base as SupContrast's code does (its default τ_base is 0.07).
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators *and* counts are summed, so every device returns
            the loss of the global batch; None on one device.

    Returns:
        Scalar fp32 loss: 0 with zero gradients when no anchor has a positive; NaN when ``sim`` holds a NaN
        or ±Inf anywhere, whatever the masks select.

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, M] matrix; ``labels``, ``key_labels`` or
            ``self_index`` has the wrong length or a non-integer dtype; ``key_labels`` is missing while
            M ≠ n; ``self_index`` lies outside [0, M); ``key_valid`` is not a bool [M] vector;
            ``temperature`` or ``base_temperature`` is not > 0.

    References:
        Oord et al. 2018, "Representation Learning with Contrastive Predictive Coding" (arXiv 1807.03748);
        Chen et al. 2020, "A Simple Framework for Contrastive Learning of Visual Representations" (arXiv
        2002.05709), eq. 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.9, 0.1, 0.3], [0.9, 1.0, 0.2, 0.0],
        ...                  [0.1, 0.2, 1.0, 0.7], [0.3, 0.0, 0.7, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.info_nce(sim, labels, temperature=0.5)), 4)
        0.4482
    """
    return _softmax_loss(
        _INFO_NCE, sim, labels, temperature, base_temperature, key_labels, self_index, key_valid, axis_name
    )


# ----------------------------------------------------------------------------------------------------------
# memory-bounded (blocked) softmax losses


def _pad_rows(x: jax.Array, rows: int) -> jax.Array:
    """Pad the leading axis to ``rows`` by repeating the last row (keeps similarities finite)."""
    pad = rows - x.shape[0]
    return x if pad == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)], axis=0)


def _softmax_blocked(
    spec: _Softmax,
    embeddings,
    labels,
    temperature,
    base_temperature,
    similarity,
    block_size,
    key_embeddings,
    key_labels,
    self_index,
    key_valid,
    axis_name,
) -> jax.Array:
    """Blocked form of a softmax loss: [B, K] similarity tiles only, recomputed in the backward pass."""
    _check_embeddings(embeddings, key_embeddings, labels, key_labels, self_index, key_valid)
    _check_positive(temperature, "temperature")
    scale = _base_scale(temperature, base_temperature)
    _checks.check_positive_int(block_size, "block_size")
    sim_fn = _similarity.get(similarity)
    keys = embeddings if key_embeddings is None else key_embeddings
    key_labels, self_cols = _resolve_keys(labels, key_labels, self_index)
    (n, _), m = embeddings.shape, keys.shape[0]
    b, k = min(block_size, n), min(block_size, m)
    nb, nk = -(-n // b), -(-m // k)

    anchors = (
        _pad_rows(embeddings, nb * b).reshape(nb, b, -1),
        _pad_rows(labels, nb * b).reshape(nb, b),
        _pad_rows(self_cols, nb * b).reshape(nb, b),
    )
    key_cols = jnp.arange(nk * k, dtype=jnp.int32)
    real_keys = key_cols < m
    if key_valid is not None:
        real_keys = real_keys & jnp.pad(key_valid, (0, nk * k - m))
    key_blocks = (
        _pad_rows(keys, nk * k).reshape(nk, k, -1),
        _pad_rows(key_labels, nk * k).reshape(nk, k),
        key_cols.reshape(nk, k),
        real_keys.reshape(nk, k),
    )

    def anchor_block(block):
        a, la, sa = block
        # zeros [b] that vary over devices wherever the anchors or keys do (scan carries must match that)
        zeros = jnp.zeros_like(a[:, 0], jnp.float32) + jnp.zeros_like(key_blocks[0][0, 0, 0], jnp.float32)

        def tile(kb):
            kv, lk, ck, valid = kb
            x = _f32(sim_fn(a, kv)) / temperature
            return (x, *_pair_masks(la, lk, sa, ck, valid))

        @jax.checkpoint
        def lse_step(state, kb):
            x, pos, neg = tile(kb)
            return _lse_update(state, x, spec.denominator(pos, neg)), None

        lse = _lse_finish(lax.scan(lse_step, _lse_init(zeros), key_blocks)[0])

        @jax.checkpoint
        def term_step(acc, kb):
            x, pos, _ = tile(kb)
            row_sum, count = _softmax_rows(spec, x, pos, lse)
            return (acc[0] + row_sum, acc[1] + count, acc[2] + nan_where_nonfinite(x, axis=1)), None

        return lax.scan(term_step, (zeros, zeros.astype(jnp.int32), zeros), key_blocks)[0]

    row_sum, count, row_bad = lax.map(jax.checkpoint(anchor_block), anchors)
    real = jnp.arange(nb * b) < n
    row_sum = jnp.where(real, row_sum.reshape(-1), 0.0)
    count = jnp.where(real, count.reshape(-1), 0)
    bad = jnp.sum(jnp.where(real, row_bad.reshape(-1), 0.0))
    return _softmax_reduce(spec, row_sum, count, bad, scale, axis_name)


def supcon_blocked(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    similarity: str | _similarity.Similarity = "cosine",
    block_size: int = 512,
    key_embeddings: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """SupCon (Khosla et al. 2020, eq. 2) in blocks, from embeddings.

    Equals ``supcon(similarity(embeddings, keys), labels, ...)`` without materialising the [n, M] matrix
    (nor storing it for the backward pass): anchors are processed in blocks, each with an online
    log-sum-exp over key blocks, under ``jax.checkpoint``.

    Args:
        embeddings: [n, D] floating embeddings of the n anchors.
        labels: [n] integer labels of the anchors.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (no factor) or τ_base > 0, which multiplies the loss by τ / τ_base, as in
            the plain form.
        similarity: a name of ``geojax.similarity.get`` or a callable (a [B, D], b [K, D]) → [B, K].
        block_size: positive int, the rows per anchor block and per key block; memory O(block_size²).
        key_embeddings: [M, D] floating embeddings of the keys; None: the keys are the anchors.
        key_labels: [M] integer labels of the keys; None: the keys are the anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss
            on every device); None on one device.

    Returns:
        Scalar fp32 loss, equal to the plain form on ``similarity(embeddings, keys)``; NaN when an embedding
        (through its similarities) is NaN or ±Inf.

    Raises:
        ValueError: ``embeddings`` or ``key_embeddings`` is not a non-empty floating matrix, or their widths
            differ; labels, ``self_index`` or ``key_valid`` have the wrong length, dtype or range;
            ``key_labels`` is missing while the keys differ from the anchors; ``temperature``,
            ``base_temperature`` or ``block_size`` is not positive; ``similarity`` is an unknown name.

    References:
        Khosla et al. 2020, "Supervised Contrastive Learning" (arXiv 2004.11362), eq. 2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.supcon_blocked(e, labels, block_size=2)), 4)
        0.0638
        >>> round(float(losses.supcon(similarity.cosine(e, e), labels)), 4)
        0.0638
    """
    return _softmax_blocked(
        _SUPCON, embeddings, labels, temperature, base_temperature, similarity, block_size, key_embeddings,
        key_labels, self_index, key_valid, axis_name,
    )  # fmt: skip


def sincere_blocked(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    similarity: str | _similarity.Similarity = "cosine",
    block_size: int = 512,
    key_embeddings: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """SINCERE (Feeney & Hughes 2024) in blocks, from embeddings.

    Equals ``sincere(similarity(embeddings, keys), labels, ...)`` without materialising the [n, M] matrix
    (nor storing it for the backward pass): anchors are processed in blocks, each with an online
    log-sum-exp over key blocks, under ``jax.checkpoint``.

    Args:
        embeddings: [n, D] floating embeddings of the n anchors.
        labels: [n] integer labels of the anchors.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (no factor) or τ_base > 0, which multiplies the loss by τ / τ_base, as in
            the plain form.
        similarity: a name of ``geojax.similarity.get`` or a callable (a [B, D], b [K, D]) → [B, K].
        block_size: positive int, the rows per anchor block and per key block; memory O(block_size²).
        key_embeddings: [M, D] floating embeddings of the keys; None: the keys are the anchors.
        key_labels: [M] integer labels of the keys; None: the keys are the anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss
            on every device); None on one device.

    Returns:
        Scalar fp32 loss, equal to the plain form on ``similarity(embeddings, keys)``; NaN when an embedding
        (through its similarities) is NaN or ±Inf.

    Raises:
        ValueError: ``embeddings`` or ``key_embeddings`` is not a non-empty floating matrix, or their widths
            differ; labels, ``self_index`` or ``key_valid`` have the wrong length, dtype or range;
            ``key_labels`` is missing while the keys differ from the anchors; ``temperature``,
            ``base_temperature`` or ``block_size`` is not positive; ``similarity`` is an unknown name.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses, "cross entropy losses".

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.sincere_blocked(e, labels, block_size=2)), 4)
        0.0638
        >>> round(float(losses.sincere(similarity.cosine(e, e), labels)), 4)
        0.0638
    """
    return _softmax_blocked(
        _SINCERE, embeddings, labels, temperature, base_temperature, similarity, block_size, key_embeddings,
        key_labels, self_index, key_valid, axis_name,
    )  # fmt: skip


def info_nce_blocked(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    similarity: str | _similarity.Similarity = "cosine",
    block_size: int = 512,
    key_embeddings: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """InfoNCE / NT-Xent (Chen et al. 2020, eq. 1) in blocks, from embeddings.

    Equals ``info_nce(similarity(embeddings, keys), labels, ...)`` without materialising the [n, M] matrix
    (nor storing it for the backward pass): anchors are processed in blocks, each with an online
    log-sum-exp over key blocks, under ``jax.checkpoint``.

    Args:
        embeddings: [n, D] floating embeddings of the n anchors.
        labels: [n] integer labels of the anchors.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (no factor) or τ_base > 0, which multiplies the loss by τ / τ_base, as in
            the plain form.
        similarity: a name of ``geojax.similarity.get`` or a callable (a [B, D], b [K, D]) → [B, K].
        block_size: positive int, the rows per anchor block and per key block; memory O(block_size²).
        key_embeddings: [M, D] floating embeddings of the keys; None: the keys are the anchors.
        key_labels: [M] integer labels of the keys; None: the keys are the anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss
            on every device); None on one device.

    Returns:
        Scalar fp32 loss, equal to the plain form on ``similarity(embeddings, keys)``; NaN when an embedding
        (through its similarities) is NaN or ±Inf.

    Raises:
        ValueError: ``embeddings`` or ``key_embeddings`` is not a non-empty floating matrix, or their widths
            differ; labels, ``self_index`` or ``key_valid`` have the wrong length, dtype or range;
            ``key_labels`` is missing while the keys differ from the anchors; ``temperature``,
            ``base_temperature`` or ``block_size`` is not positive; ``similarity`` is an unknown name.

    References:
        Oord et al. 2018 (arXiv 1807.03748); Chen et al. 2020, "A Simple Framework for Contrastive
        Learning of Visual Representations" (arXiv 2002.05709), eq. 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.info_nce_blocked(e, labels, block_size=2)), 4)
        0.0638
        >>> round(float(losses.info_nce(similarity.cosine(e, e), labels)), 4)
        0.0638
    """
    return _softmax_blocked(
        _INFO_NCE, embeddings, labels, temperature, base_temperature, similarity, block_size, key_embeddings,
        key_labels, self_index, key_valid, axis_name,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# margin losses


def _prepare(
    sim, labels, key_labels, self_index, key_valid
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Validate, then (sim fp32 [n, M], positive mask, negative mask, 0 or NaN if sim is not all finite)."""
    _check_sim(sim, labels, key_labels, self_index, key_valid)
    key_labels, self_cols = _resolve_keys(labels, key_labels, self_index)
    s = _f32(sim)
    pos, neg = _pair_masks(labels, key_labels, self_cols, jnp.arange(s.shape[1]), key_valid)
    return s, pos, neg, nan_where_nonfinite(s)


def _mean_nonzero(terms: jax.Array, mask: jax.Array, bad: jax.Array, axis_name) -> jax.Array:
    """Mean of the masked terms that are > 0 (pytorch-metric-learning's AvgNonZeroReducer); ``bad`` (0 or
    NaN) joins the numerator."""
    return _mean(jnp.sum(jnp.where(mask, terms, 0.0)) + bad, jnp.sum(mask & (terms > 0)), axis_name)


def contrastive(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    pos_margin: float = 1.0,
    neg_margin: float = 0.0,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Contrastive loss (Hadsell, Chopra & LeCun 2006), similarity form.

    As compared by Feeney & Hughes (2024, "margin losses"). Positive pairs relu(m_pos − s), negative pairs
    relu(s − m_neg), each averaged over its non-zero terms (an empty set gives 0), then summed. Margins are in
    similarity units.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors.
        pos_margin: m_pos, the similarity a positive pair should reach.
        neg_margin: m_neg, the similarity a negative pair should stay below.
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss on
            every device); None on one device.

    Returns:
        Scalar fp32 loss; NaN when ``sim`` holds a NaN or ±Inf anywhere.

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, M] matrix; ``labels``, ``key_labels`` or
            ``self_index`` has the wrong length or a non-integer dtype; ``self_index`` lies outside [0, M);
            ``key_labels`` is missing while M ≠ n; ``key_valid`` is not a bool [M] vector.

    References:
        Hadsell, Chopra & LeCun 2006, "Dimensionality Reduction by Learning an Invariant Mapping", eq. 4
        (distance form); Feeney & Hughes 2024, similarity functions × contrastive losses, "margin losses".

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.9, 0.1, 0.3], [0.9, 1.0, 0.2, 0.0],
        ...                  [0.1, 0.2, 1.0, 0.7], [0.3, 0.0, 0.7, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.contrastive(sim, labels, pos_margin=0.95, neg_margin=0.2)), 4)
        0.25
    """
    s, pos, neg, bad = _prepare(sim, labels, key_labels, self_index, key_valid)
    return _mean_nonzero(jax.nn.relu(pos_margin - s), pos, bad, axis_name) + _mean_nonzero(
        jax.nn.relu(s - neg_margin), neg, bad, axis_name
    )


def _kth_positive(pos: jax.Array, rank: jax.Array, k) -> tuple[jax.Array, jax.Array]:
    """Column of each row's k-th positive [n] (0 if it has fewer) and whether it exists [n]."""
    hit = pos & (rank == k)
    return jnp.argmax(hit, axis=1), jnp.any(hit, axis=1)


def _triplet_pass(s, pos, neg, margin, semihard: bool, visit, init):
    """Loop over the k-th positive p of every anchor at once; ``visit`` folds each step's active triplets.

    For each anchor a and its k-th positive p, the active negatives are those with m + s_an − s_ap > 0
    (and s_an < s_ap for 'semihard'). The loop runs max_a |P(a)| steps of O(n M) work each, so the
    n·M·M triplet tensor is never formed.
    """
    rank = jnp.cumsum(pos, axis=1, dtype=jnp.int32) - 1
    steps = jnp.max(jnp.sum(pos, axis=1, dtype=jnp.int32))

    def body(k, acc):
        col, has = _kth_positive(pos, rank, k)
        s_ap = jnp.take_along_axis(s, col[:, None], axis=1)[:, 0]
        active = neg & has[:, None] & (s > (s_ap - margin)[:, None])
        if semihard:
            active = active & (s < s_ap[:, None])
        return visit(acc, col, s_ap, active)

    return lax.fori_loop(0, steps, body, init)


def _triplet_forward(s, pos, neg, margin, semihard):
    def visit(acc, col, s_ap, active):
        total, count = acc
        cnt = jnp.sum(active, axis=1, dtype=jnp.float32)
        return total + cnt * (margin - s_ap) + jnp.sum(jnp.where(active, s, 0.0), axis=1), count + cnt

    zeros = jnp.zeros_like(s[:, 0])
    return _triplet_pass(s, pos, neg, margin, semihard, visit, (zeros, zeros))


@partial(jax.custom_vjp, nondiff_argnums=(4,))
def _triplet_sums(s, pos, neg, margin, semihard: bool) -> tuple[jax.Array, jax.Array]:
    """Per anchor [n]: Σ relu(m + s_an − s_ap) over its active triplets, and their number (as float)."""
    return _triplet_forward(s, pos, neg, margin, semihard)


def _triplet_sums_fwd(s, pos, neg, margin, semihard):
    return _triplet_forward(s, pos, neg, margin, semihard), (s, pos, neg, margin)


def _triplet_sums_bwd(semihard, residuals, cotangents):
    """∂/∂s_an = Σ_p g_a [active], ∂/∂s_ap = −g_a · #active(a, p); counts and the margin get no gradient."""
    s, pos, neg, margin = residuals
    g = cotangents[0]
    cols = jnp.arange(s.shape[1])

    def visit(grad, col, s_ap, active):
        cnt = jnp.sum(active, axis=1, dtype=jnp.float32)
        grad = grad + jnp.where(active, g[:, None], 0.0)
        return grad - jnp.where(cols[None, :] == col[:, None], (g * cnt)[:, None], 0.0)

    return _triplet_pass(s, pos, neg, margin, semihard, visit, jnp.zeros_like(s)), None, None, None


_triplet_sums.defvjp(_triplet_sums_fwd, _triplet_sums_bwd)


def triplet(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float = 0.2,
    mining: Mining = "all",
    reduction: Reduction = "mean_nonzero",
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Triplet margin loss (Schroff et al. 2015; Feeney & Hughes 2024, "margin losses"), similarity form.

    relu(m + s_an − s_ap) over triplets (a, p, n), p ≠ a same label, n other label. ``mining``: 'all'
    triplets; 'hard' = hardest positive (lowest s_ap) and hardest negative (highest s_an) per anchor (Hermans
    et al. 2017); 'semihard' = triplets with s_ap − m < s_an < s_ap. 'all' and 'semihard' loop over the k-th
    positive of every anchor (O(n·M·max|P|) time, O(n·M) memory, custom VJP); the margin is a hyper-parameter
    and receives no gradient.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors.
        margin: m, in similarity units.
        mining: 'all', 'hard' or 'semihard' (above).
        reduction: 'mean_nonzero' averages the positive terms (pytorch-metric-learning's AvgNonZeroReducer),
            'mean' all selected triplets.
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss on
            every device); None on one device.

    Returns:
        Scalar fp32 loss; 0 when no triplet exists; NaN when ``sim`` holds a NaN or ±Inf anywhere.

    Raises:
        ValueError: ``mining`` or ``reduction`` is not one of the names above; ``sim``, ``labels``,
            ``key_labels`` or ``self_index`` is malformed (as for ``contrastive``).

    References:
        Schroff et al. 2015, "FaceNet" (arXiv 1503.03832), eq. 1; Hermans et al. 2017, "In Defense of the
        Triplet Loss for Person Re-Identification" (arXiv 1703.07737), batch hard.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.9, 0.1, 0.3], [0.9, 1.0, 0.2, 0.0],
        ...                  [0.1, 0.2, 1.0, 0.7], [0.3, 0.0, 0.7, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.triplet(sim, labels, margin=0.5)), 4)
        0.05
        >>> round(float(losses.triplet(sim, labels, margin=0.5, mining="hard")), 4)
        0.1
    """
    _checks.check_choice(mining, "mining", MININGS)
    _checks.check_choice(reduction, "reduction", REDUCTIONS)
    s, pos, neg, bad = _prepare(sim, labels, key_labels, self_index, key_valid)
    if mining == "hard":
        valid = jnp.any(pos, axis=1) & jnp.any(neg, axis=1)
        hardest_pos = jnp.min(jnp.where(pos, s, _BIG), axis=1)
        hardest_neg = jnp.max(jnp.where(neg, s, -_BIG), axis=1)
        terms = jax.nn.relu(margin + jnp.where(valid, hardest_neg - hardest_pos, -_BIG))
        if reduction == "mean_nonzero":
            return _mean_nonzero(terms, valid, bad, axis_name)
        return _mean(jnp.sum(terms) + bad, jnp.sum(valid), axis_name)
    total, count = _triplet_sums(s, pos, neg, jnp.asarray(margin, jnp.float32), mining == "semihard")
    if reduction == "mean" and mining == "all":
        selected = jnp.sum(pos, axis=1, dtype=jnp.float32) * jnp.sum(neg, axis=1, dtype=jnp.float32)
    else:
        selected = count  # 'semihard' selects only violating triplets; 'mean_nonzero' counts the terms > 0
    return _mean(jnp.sum(total) + bad, jnp.sum(selected), axis_name)


def _column_lse(x: jax.Array, mask: jax.Array, axis_name) -> jax.Array:
    """log Σ exp over the masked rows of x [n, K], per column, over the anchors of every device [K]; −1e30
    for an empty column (finite, zero gradient). The (stop-gradient) column maximum is subtracted first."""
    top = jnp.max(jnp.where(mask, lax.stop_gradient(x), -_BIG), axis=0)
    top = top if axis_name is None else lax.pmax(top, axis_name)
    total = jnp.sum(jnp.exp(jnp.where(mask, x - top[None, :], -_BIG)), axis=0)
    return _lse_finish(_LSE(top, parallel.global_sum(total, axis_name)))


def lifted_structured(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    pos_margin: float = 0.0,
    neg_margin: float = 1.0,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Lifted structured loss (Song et al. 2016, eq. 4; Feeney & Hughes 2024), similarity form.

    Per ordered positive pair (a, p): relu(LSE_{n∈N(a)∪N(p)}(s_n − m_neg) + m_pos − s_ap)² / 2, mean over
    positive pairs (pairs without any negative are left out). N(p) needs key p's own row: the first keys are
    taken to be the anchors of all devices in ``axis_name`` order (the ``all_gather`` layout), so key p's row
    log-sum-exp is gathered from its device. Keys past them (a cross-batch memory's rows, ``geojax.memory``:
    Wang et al. 2020) have no row of their own: N(p) of such a key is read from its column, the anchors of the
    whole batch whose label differs from p's (for a symmetric similarity, the batch part of p's row).

    Args:
        sim: [n, M] floating similarities of n anchors to M keys: one column per anchor of the (gathered)
            batch first, then any further keys (memory rows).
        labels: [n] integer labels of the anchors.
        pos_margin: m_pos, in similarity units.
        neg_margin: m_neg, in similarity units.
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss on
            every device); None on one device.

    Returns:
        Scalar fp32 loss; NaN when ``sim`` holds a NaN or ±Inf anywhere.

    Raises:
        ValueError: ``sim`` has fewer columns than the anchors of the (gathered) batch; ``sim``, ``labels``,
            ``key_labels``, ``self_index`` or ``key_valid`` is malformed (as for ``contrastive``).

    References:
        Song et al. 2016, "Deep Metric Learning via Lifted Structured Feature Embedding" (arXiv 1511.06452),
        eq. 4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.9, 0.1, 0.3], [0.9, 1.0, 0.2, 0.0],
        ...                  [0.1, 0.2, 1.0, 0.7], [0.3, 0.0, 0.7, 1.0]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.lifted_structured(sim, labels, pos_margin=1.0, neg_margin=0.5)), 4)
        0.7769
    """
    s, pos, neg, bad = _prepare(sim, labels, key_labels, self_index, key_valid)
    row_lse = _lse_finish(_lse_update(_lse_init(jnp.zeros_like(s[:, 0])), s, neg))  # [n]
    key_lse = parallel.gather(row_lse, axis_name)
    batch = key_lse.shape[0]
    if s.shape[1] < batch:
        raise ValueError(
            f"sim must have one column per anchor of the (gathered) batch first for lifted_structured: "
            f"{batch} anchors, got {s.shape[1]} columns"
        )
    if s.shape[1] > batch:  # keys without a row (memory): N(p) from their column over the global batch
        key_lse = jnp.concatenate([key_lse, _column_lse(s[:, batch:], neg[:, batch:], axis_name)])
    union = jnp.logaddexp(row_lse[:, None], key_lse[None, :])
    valid = pos & (union > -_BIG / 2)
    terms = jnp.square(jax.nn.relu(jnp.where(valid, union - neg_margin + pos_margin - s, 0.0))) / 2
    return _mean(jnp.sum(terms) + bad, jnp.sum(valid), axis_name)


# ----------------------------------------------------------------------------------------------------------
# SimO


def simo(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    eps: float = 1e-6,
    orthogonality: bool = True,
    key_embeddings: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """SimO loss (Bouhsine et al. 2024, eq. 1) over the pairs i < j of a batch.

    L = Σ_same d_ij / (ε + Σ_same o_ij) + Σ_diff o_ij / (ε + Σ_diff d_ij), d_ij = ‖e_i − e_j‖², o_ij =
    (e_i·e_j)². ``orthogonality=False`` is the paper's ablation ('Ablation study'): every o_ij is replaced by
    1, keeping the distance ratios without the squared-dot-product terms. A zero denominator gives 0 for that
    term. Rectangular form: pair (i, j) counts when key column j > self_index[i] (all pairs when key_labels is
    given without self_index). d_ij is ``geojax.similarity.neg_sq_euclidean``'s (exact for identical rows) and
    e_i·e_j its ``dot``.

    Args:
        embeddings: [n, D] floating embeddings of the anchors.
        labels: [n] integer labels of the anchors.
        eps: ε ≥ 0 in both denominators.
        orthogonality: False replaces every o_ij by 1 (the paper's ablation).
        key_embeddings: [M, D] floating embeddings of the keys; None: the keys are the anchors.
        key_labels: [M] integer labels of the keys (rectangular / distributed form); None: the keys are the
            anchors.
        self_index: [n] integer column of each anchor's own key in [0, M), masked as a self-pair; with
            ``key_labels`` but no ``self_index`` no column is excluded.
        key_valid: [M] bool, False on key columns to leave out (a cross-batch memory's empty slots,
            ``geojax.memory.keys``); None: every column is a key.
        axis_name: named mapped axis over which numerators and counts are summed (the global batch's loss on
            every device); None on one device.

    Returns:
        Scalar fp32 loss; NaN when an embedding holds a NaN or ±Inf.

    Raises:
        ValueError: an embedding set is not a non-empty floating matrix or the widths differ; labels,
            ``self_index`` or ``key_valid`` are malformed; ``eps`` is negative.

    References:
        Bouhsine et al. 2024, "SimO Loss: Anchor-Free Contrastive Loss for Fine-Grained Supervised
        Contrastive Learning" (arXiv 2410.05233), eq. 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.simo(e, labels)), 4)
        0.715
        >>> round(float(losses.simo(e, labels, orthogonality=False)), 4)
        0.9
    """
    _check_embeddings(embeddings, key_embeddings, labels, key_labels, self_index, key_valid)
    _check_nonnegative(eps, "eps")
    keys = embeddings if key_embeddings is None else key_embeddings
    labels = jnp.asarray(labels)
    key_labels, self_cols = _resolve_keys(labels, key_labels, self_index)
    d = -_similarity.neg_sq_euclidean(embeddings, keys)
    dots = _similarity.dot(embeddings, keys)
    o = jnp.square(dots) if orthogonality else jnp.ones_like(dots)
    upper = jnp.arange(d.shape[1])[None, :] > self_cols[:, None]
    if key_valid is not None:
        upper = upper & jnp.asarray(key_valid)[None, :]
    same = labels[:, None] == key_labels[None, :]
    sums = [jnp.sum(jnp.where(upper & mask, v, 0.0)) for mask in (same, ~same) for v in (d, o)]
    sums[0] = sums[0] + nan_where_nonfinite(d) + nan_where_nonfinite(dots)
    same_d, same_o, diff_d, diff_o = parallel.global_sum(sums, axis_name)
    return safe_div(same_d, eps + same_o) + safe_div(diff_o, eps + diff_d)
