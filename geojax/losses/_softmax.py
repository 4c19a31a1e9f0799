"""The softmax family of :mod:`geojax.losses`: SupCon, SINCERE and InfoNCE over a similarity matrix, and their
blocked forms from embeddings, which never materialise the matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks
from geojax import similarity as _similarity
from geojax._numerics import nan_where_nonfinite
from geojax.losses._common import (
    MULTILABELS,
    MultiLabel,
    as_f32,
    check_embeddings,
    check_positive,
    check_sim,
    global_mean,
    pair_masks,
    pair_weights,
    resolve_keys,
)
from geojax.losses._lse import lse_finish, lse_init, lse_update, running_row_lse

# ----------------------------------------------------------------------------------------------------------
# softmax family: supcon, sincere, info_nce


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


def _softmax_rows(spec: _Softmax, x, pos, lse, weight) -> tuple[jax.Array, jax.Array]:
    """Σ over positives of the (weighted) pair term [n] and of the weights [n], for x [n, K], lse [n] and the
    positive pairs' weights [n, K] (None: each weighs 1, the sum of the weights is the positive count)."""
    w = pos.astype(jnp.float32) if weight is None else jnp.where(pos, weight, 0.0)
    terms = jnp.where(pos, spec.term(x, lse[:, None]) * w, 0.0)
    return jnp.sum(terms, axis=1), jnp.sum(w, axis=1)


def _softmax_reduce(
    spec: _Softmax, row_sum: jax.Array, count: jax.Array, bad: jax.Array, scale, axis_name
) -> jax.Array:
    """The loss from per-anchor sums and positive weights (counts) [n]; ``bad`` (0 or NaN) joins the
    numerator, and ``scale`` (τ / τ_base, or None) multiplies the result."""
    if spec.per_anchor:
        has = count > 0
        num = jnp.sum(jnp.where(has, row_sum / jnp.where(has, count, 1.0), 0.0))
        loss = global_mean(num + bad, jnp.sum(has), axis_name)
    else:
        loss = global_mean(jnp.sum(row_sum) + bad, jnp.sum(count), axis_name)
    return loss if scale is None else loss * scale


def _base_scale(temperature, base_temperature):
    """SupContrast's factor τ / τ_base, or None (no factor) when ``base_temperature`` is None."""
    if base_temperature is None:
        return None
    check_positive(base_temperature, "base_temperature")
    return temperature / base_temperature


def _softmax_loss(
    spec: _Softmax,
    sim,
    labels,
    temperature,
    base_temperature,
    multilabel,
    key_labels,
    self_index,
    key_valid,
    axis_name,
) -> jax.Array:
    check_sim(sim, labels, key_labels, self_index, key_valid, multi_hot=True)
    check_positive(temperature, "temperature")
    _checks.check_choice(multilabel, "multilabel", MULTILABELS)
    scale = _base_scale(temperature, base_temperature)
    labels = jnp.asarray(labels)
    key_labels, self_cols = resolve_keys(labels, key_labels, self_index)
    x = as_f32(sim) / temperature
    pos, neg = pair_masks(labels, key_labels, self_cols, jnp.arange(x.shape[1]), key_valid)
    lse = running_row_lse(x, spec.denominator(pos, neg))
    row_sum, count = _softmax_rows(spec, x, pos, lse, pair_weights(multilabel, labels, key_labels))
    return _softmax_reduce(spec, row_sum, count, nan_where_nonfinite(x), scale, axis_name)


def supcon(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    multilabel: MultiLabel = "any",
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

    {sections}

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
        _SUPCON, sim, labels, temperature, base_temperature, multilabel, key_labels, self_index, key_valid,
        axis_name,
    )  # fmt: skip


def sincere(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    multilabel: MultiLabel = "any",
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

    {sections}

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
        _SINCERE, sim, labels, temperature, base_temperature, multilabel, key_labels, self_index, key_valid,
        axis_name,
    )  # fmt: skip


def info_nce(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.1,
    base_temperature: float | None = None,
    multilabel: MultiLabel = "any",
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """InfoNCE / NT-Xent (Oord et al. 2018; Chen et al. 2020, eq. 1).

    Per positive pair (a, p), with x = s / τ: −log(e^{x_ap} / (e^{x_ap} + Σ_{n: y_n≠y_a} e^{x_an})), the
    SINCERE pair term, averaged once over *all positive pairs* (not per anchor); with two views per image
    and instance labels this is SimCLR's NT-Xent.

    {sections}

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
        _INFO_NCE, sim, labels, temperature, base_temperature, multilabel, key_labels, self_index, key_valid,
        axis_name,
    )  # fmt: skip


# The three losses above share their Args, Returns and Raises: written once here, they take the place of
# {sections} in each docstring (documentation by reference: a module-level __doc__ assignment is no code to
# train.helpers.version.code_hash; tests/test_docstrings.py checks the docstrings made).
supcon.__doc__ = (supcon.__doc__ or "").replace(
    "{sections}",
    (
        _SOFTMAX_SECTIONS := """Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar); the square call
            ``{name}(sim, labels)`` has keys = anchors.
        labels: [n] integer labels of the anchors, or [n, L] multi-hot label sets (bool, or integers 0 and
            1): a key is then a positive of an anchor when they share a label, a negative when they share
            none.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (pytorch-metric-learning's form, no factor) or τ_base > 0, which multiplies
            the loss by τ / τ_base as SupContrast's code does (its default τ_base is 0.07).
        multilabel: how multi-hot labels weigh the positive pairs in an anchor's mean over its positives:
            'any' (each weighs 1) or 'jaccard' (pair (a, p) weighs w_ap = #(y_a ∩ y_p) / #(y_a ∪ y_p), and
            the anchor's term is Σ_p w_ap ℓ_ap / Σ_p w_ap; InfoNCE's mean over all positive pairs is weighted
            alike). The denominators are not weighted. Integer labels are one-hot sets: both give the same
            loss.
        key_labels: [M] integer labels of the keys (rectangular / distributed form), [M, L] multi-hot sets
            with multi-hot labels; None: the keys are the anchors.
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
            ``self_index`` has the wrong length or a non-integer dtype; multi-hot ``labels`` or ``key_labels``
            hold values other than 0 and 1 or differ in width; ``key_labels`` is missing while M ≠ n;
            ``self_index`` lies outside [0, M); ``key_valid`` is not a bool [M] vector; ``temperature`` or
            ``base_temperature`` is not > 0; ``multilabel`` is not 'any' or 'jaccard'."""
    ).format(name="supcon"),
)
sincere.__doc__ = (sincere.__doc__ or "").replace("{sections}", _SOFTMAX_SECTIONS.format(name="sincere"))
info_nce.__doc__ = (info_nce.__doc__ or "").replace("{sections}", _SOFTMAX_SECTIONS.format(name="info_nce"))


# ----------------------------------------------------------------------------------------------------------
# memory-bounded (blocked) softmax losses


def _pad_rows_repeating_last(x: jax.Array, rows: int) -> jax.Array:
    """Pad the leading axis to ``rows`` by repeating the last row (keeps similarities finite)."""
    pad = rows - x.shape[0]
    return x if pad == 0 else jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)], axis=0)


def _softmax_blocked(
    spec: _Softmax,
    embeddings,
    labels,
    temperature,
    base_temperature,
    multilabel,
    similarity,
    block_size,
    key_embeddings,
    key_labels,
    self_index,
    key_valid,
    axis_name,
) -> jax.Array:
    """Blocked form of a softmax loss: [B, K] similarity tiles only, recomputed in the backward pass."""
    check_embeddings(embeddings, key_embeddings, labels, key_labels, self_index, key_valid, multi_hot=True)
    check_positive(temperature, "temperature")
    _checks.check_choice(multilabel, "multilabel", MULTILABELS)
    scale = _base_scale(temperature, base_temperature)
    _checks.check_positive_int(block_size, "block_size")
    sim_fn = _similarity.get(similarity)
    keys = embeddings if key_embeddings is None else key_embeddings
    labels = jnp.asarray(labels)
    key_labels, self_cols = resolve_keys(labels, key_labels, self_index)
    (n, _), m = embeddings.shape, keys.shape[0]
    b, k = min(block_size, n), min(block_size, m)
    nb, nk = -(-n // b), -(-m // k)

    anchors = (
        _pad_rows_repeating_last(embeddings, nb * b).reshape(nb, b, -1),
        _pad_rows_repeating_last(labels, nb * b).reshape(nb, b, *labels.shape[1:]),
        _pad_rows_repeating_last(self_cols, nb * b).reshape(nb, b),
    )
    key_cols = jnp.arange(nk * k, dtype=jnp.int32)
    real_keys = key_cols < m
    if key_valid is not None:
        real_keys = real_keys & jnp.pad(key_valid, (0, nk * k - m))
    key_blocks = (
        _pad_rows_repeating_last(keys, nk * k).reshape(nk, k, -1),
        _pad_rows_repeating_last(key_labels, nk * k).reshape(nk, k, *key_labels.shape[1:]),
        key_cols.reshape(nk, k),
        real_keys.reshape(nk, k),
    )

    def anchor_block(block):
        a, la, sa = block
        # zeros [b] that vary over devices wherever the anchors or keys do (scan carries must match that)
        zeros = jnp.zeros_like(a[:, 0], jnp.float32) + jnp.zeros_like(key_blocks[0][0, 0, 0], jnp.float32)

        def tile(kb):
            kv, lk, ck, valid = kb
            x = as_f32(sim_fn(a, kv)) / temperature
            return (x, *pair_masks(la, lk, sa, ck, valid))

        @jax.checkpoint
        def lse_step(state, kb):
            x, pos, neg = tile(kb)
            return lse_update(state, x, spec.denominator(pos, neg)), None

        lse = lse_finish(lax.scan(lse_step, lse_init(zeros), key_blocks)[0])

        @jax.checkpoint
        def term_step(acc, kb):
            x, pos, _ = tile(kb)
            row_sum, count = _softmax_rows(spec, x, pos, lse, pair_weights(multilabel, la, kb[1]))
            return (acc[0] + row_sum, acc[1] + count, acc[2] + nan_where_nonfinite(x, axis=1)), None

        return lax.scan(term_step, (zeros, zeros, zeros), key_blocks)[0]

    row_sum, count, row_bad = lax.map(jax.checkpoint(anchor_block), anchors)
    real = jnp.arange(nb * b) < n
    row_sum = jnp.where(real, row_sum.reshape(-1), 0.0)
    count = jnp.where(real, count.reshape(-1), 0.0)
    bad = jnp.sum(jnp.where(real, row_bad.reshape(-1), 0.0))
    return _softmax_reduce(spec, row_sum, count, bad, scale, axis_name)


# The three blocked forms share one signature and one docstring, filled in with the plain form's name, title
# and references.
_BLOCKED_DOC = """{title} in blocks, from embeddings.

    Equals ``{name}(similarity(embeddings, keys), labels, ...)`` without materialising the [n, M] matrix
    (nor storing it for the backward pass): anchors are processed in blocks, each with an online
    log-sum-exp over key blocks, under ``jax.checkpoint``.

    Args:
        embeddings: [n, D] floating embeddings of the n anchors.
        labels: [n] integer labels of the anchors, or [n, L] multi-hot label sets, as in the plain form.
        temperature: τ > 0 (a scalar, may be traced); the logits are x = s / τ.
        base_temperature: None (no factor) or τ_base > 0, which multiplies the loss by τ / τ_base, as in
            the plain form.
        multilabel: 'any' or 'jaccard', the weights of the positive pairs of multi-hot labels, as in the
            plain form.
        similarity: a name of ``geojax.similarity.get`` or a callable (a [B, D], b [K, D]) → [B, K].
        block_size: positive int, the rows per anchor block and per key block; memory O(block_size²).
        key_embeddings: [M, D] floating embeddings of the keys; None: the keys are the anchors.
        key_labels: [M] integer labels of the keys ([M, L] multi-hot sets); None: the keys are the anchors.
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
            ``base_temperature`` or ``block_size`` is not positive; ``multilabel`` or ``similarity`` is an
            unknown name.

    References:
        {references}

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.{name}_blocked(e, labels, block_size=2)), 4)
        0.0638
        >>> round(float(losses.{name}(similarity.cosine(e, e), labels)), 4)
        0.0638
    """


def _blocked_form(spec: _Softmax, name: str, title: str, references: str) -> Callable[..., jax.Array]:
    """The public blocked form of the softmax loss ``spec``: ``{name}_blocked`` with its docstring."""

    def blocked(
        embeddings: ArrayLike,
        labels: ArrayLike,
        *,
        temperature: float | jax.Array = 0.1,
        base_temperature: float | None = None,
        multilabel: MultiLabel = "any",
        similarity: str | _similarity.Similarity = "cosine",
        block_size: int = 512,
        key_embeddings: ArrayLike | None = None,
        key_labels: ArrayLike | None = None,
        self_index: ArrayLike | None = None,
        key_valid: ArrayLike | None = None,
        axis_name: str | None = None,
    ) -> jax.Array:
        return _softmax_blocked(
            spec, embeddings, labels, temperature, base_temperature, multilabel, similarity, block_size,
            key_embeddings, key_labels, self_index, key_valid, axis_name,
        )  # fmt: skip

    blocked.__name__ = blocked.__qualname__ = f"{name}_blocked"
    blocked.__doc__ = _BLOCKED_DOC.format(title=title, name=name, references=references)
    return blocked


supcon_blocked = _blocked_form(
    _SUPCON,
    "supcon",
    title="SupCon (Khosla et al. 2020, eq. 2)",
    references='Khosla et al. 2020, "Supervised Contrastive Learning" (arXiv 2004.11362), eq. 2.',
)
sincere_blocked = _blocked_form(
    _SINCERE,
    "sincere",
    title="SINCERE (Feeney & Hughes 2024)",
    references='Feeney & Hughes 2024, similarity functions × contrastive losses, "cross entropy losses".',
)
info_nce_blocked = _blocked_form(
    _INFO_NCE,
    "info_nce",
    title="InfoNCE / NT-Xent (Chen et al. 2020, eq. 1)",
    references='Oord et al. 2018 (arXiv 1807.03748); Chen et al. 2020, "A Simple Framework for Contrastive\n'
    '        Learning of Visual Representations" (arXiv 2002.05709), eq. 1.',
)
