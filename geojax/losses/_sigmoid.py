"""The sigmoid loss of :mod:`geojax.losses` (SigLIP): one binary term per pair, over a similarity matrix, and
its ring form, in which the key blocks travel round the devices and no device ever holds the global batch.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks
from geojax import similarity as _similarity
from geojax._numerics import nan_where_nonfinite
from geojax.losses._common import (
    PAIR_SECTIONS,
    as_f32,
    check_embeddings,
    check_positive,
    fill_doc,
    global_mean,
    pair_masks,
    prepare,
)


def _check_scale_bias(scale, bias) -> None:
    check_positive(scale, "scale")
    _checks.check_rank(bias, "bias", 0)


def _pair_terms(s: jax.Array, pos: jax.Array, neg: jax.Array, scale, bias) -> jax.Array:
    """−log σ(z (t·s + b)) = softplus(−z (t·s + b)) per pair [n, K], z = +1 on the positives and −1 on the
    negatives, 0 elsewhere."""
    logits = scale * s + bias
    return jnp.where(pos | neg, jax.nn.softplus(jnp.where(pos, -logits, logits)), 0.0)


def sigmoid(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    scale: float | jax.Array = 10.0,
    bias: float | jax.Array = -10.0,
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Sigmoid loss (Zhai et al. 2023, SigLIP, eq. 1).

    Every pair (a, j) is a binary classification: L = −1/n Σ_a Σ_j log σ(z_aj (t·s_aj + b)), z_aj = +1 when
    the labels agree and −1 when they differ, summed over the keys j (the anchor's own column left out) and
    averaged over the n anchors of the (global) batch. With ``key_labels`` and no ``self_index`` no column is
    left out: the image–text form, images as anchors and texts as keys, positives where the labels match
    (SigLIP's diagonal with labels = arange(n)). SigLIP learns t = exp(t') and b, initialised at t' = log 10,
    b = −10: ``scale`` and ``bias`` may be traced arrays that receive gradients. Each term is a softplus in
    fp32, finite for any logit.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors.
        scale: t > 0, a scalar (may be traced and learned).
        bias: b, a scalar (may be traced and learned).
        {masks}
        {keys}

    Returns:
        Scalar fp32 loss; NaN when ``sim`` holds a NaN or ±Inf anywhere.

    Raises:
        ValueError: ``scale`` is not a positive scalar or ``bias`` not a scalar; ``sim``, the labels,
            ``self_index``, ``key_valid`` or a mask is malformed (as for ``contrastive``).

    References:
        Zhai, Mustafa, Kolesnikov & Beyer 2023, "Sigmoid Loss for Language Image Pre-Training" (arXiv
        2303.15343), eq. 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[0.8, -0.1, 0.3], [0.2, 0.9, -0.4], [0.1, 0.0, 0.7]])  # images × texts
        >>> ids = jnp.arange(3)  # image i goes with text i
        >>> round(float(losses.sigmoid(sim, ids, key_labels=ids, scale=5.0, bias=-2.0)), 4)
        0.54
    """
    _check_scale_bias(scale, bias)
    s, pos, neg, bad = prepare(sim, labels, key_labels, self_index, key_valid, pos_mask, neg_mask)
    total = jnp.sum(_pair_terms(s, pos, neg, scale, bias)) + bad
    return global_mean(total, jnp.asarray(s.shape[0], jnp.float32), axis_name)


# ----------------------------------------------------------------------------------------------------------
# ring form


def _ring(axis_name: str | None, blocks, visit, acc):
    """Visit this device's block, then the block of every other device, passed round the ring.

    ``visit(own, blocks, acc) -> (blocks, acc)`` sees each block once (``own`` is True for this device's
    block only); between visits every device sends its blocks to the next one (``lax.ppermute``), n_devices −
    1 hops in all. Returns (the blocks after the last visit, the accumulator); the blocks then held are
    those of the next device.
    """
    blocks, acc = visit(True, blocks, acc)
    devices = 1 if axis_name is None else lax.axis_size(axis_name)
    if devices == 1:
        return blocks, acc
    shift = [(i, (i + 1) % devices) for i in range(devices)]

    def hop(_, carry):
        return visit(False, lax.ppermute(carry[0], axis_name, shift), carry[1])

    return lax.fori_loop(1, devices, hop, (blocks, acc))


def _tile_rows(sim_fn, exclude_self: bool, own: bool, a, keys, la, lk, scale, bias) -> jax.Array:
    """Per anchor [n], the loss summed over one key block (plus NaN where a similarity is not finite)."""
    s = as_f32(sim_fn(a, keys))
    n, m = s.shape
    self_cols = jnp.arange(n) if exclude_self and own else jnp.full((n,), -1)
    pos, neg = pair_masks(la, lk, self_cols, jnp.arange(m))
    return jnp.sum(_pair_terms(s, pos, neg, scale, bias), axis=1) + nan_where_nonfinite(s, axis=1)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _ring_rows(sim_fn, axis_name, exclude_self, a, keys, la, lk, scale, bias) -> jax.Array:
    """Per anchor [n], the loss summed over the keys of every device."""

    def visit(own, blocks, acc):
        kb, lb = blocks
        return blocks, acc + _tile_rows(sim_fn, exclude_self, own, a, kb, la, lb, scale, bias)

    return _ring(axis_name, (keys, lk), visit, jnp.zeros_like(a[:, 0], jnp.float32))[1]


def _ring_rows_fwd(sim_fn, axis_name, exclude_self, a, keys, la, lk, scale, bias):
    rows = _ring_rows(sim_fn, axis_name, exclude_self, a, keys, la, lk, scale, bias)
    return rows, (a, keys, la, lk, scale, bias)


def _ring_rows_bwd(sim_fn, axis_name, exclude_self, residuals, g):
    """The key blocks go round once more, each with its gradient, which every device adds to; one last hop
    takes each block's gradient home. Only one block's similarities exist at a time."""
    a, keys, la, lk, scale, bias = residuals

    def visit(own, blocks, acc):
        kb, lb, dkb = blocks

        def tile(a_, kb_, scale_, bias_):
            return _tile_rows(sim_fn, exclude_self, own, a_, kb_, la, lb, scale_, bias_)

        da, dk, dscale, dbias = jax.vjp(tile, a, kb, scale, bias)[1](g)
        return (kb, lb, dkb + dk), (acc[0] + da, acc[1] + dscale, acc[2] + dbias)

    init = (jnp.zeros_like(a), jnp.zeros_like(scale), jnp.zeros_like(bias))
    (_, _, dkeys), (da, dscale, dbias) = _ring(axis_name, (keys, lk, jnp.zeros_like(keys)), visit, init)
    if axis_name is not None and lax.axis_size(axis_name) > 1:
        devices = lax.axis_size(axis_name)
        dkeys = lax.ppermute(dkeys, axis_name, [(i, (i + 1) % devices) for i in range(devices)])
    return da, dkeys, None, None, dscale, dbias


_ring_rows.defvjp(_ring_rows_fwd, _ring_rows_bwd)


def sigmoid_ring(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    similarity: str | _similarity.Similarity = "cosine",
    scale: float | jax.Array = 10.0,
    bias: float | jax.Array = -10.0,
    key_embeddings: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    axis_name: str | None,
) -> jax.Array:
    """Sigmoid loss (Zhai et al. 2023, SigLIP, eq. 1) over the global batch, keys passed round the devices.

    Each device holds only its own anchors and its own keys. The key blocks travel round the devices of
    ``axis_name`` (``lax.ppermute``, n_devices − 1 hops), and each device adds the terms of its anchors
    against every block as it passes; the backward pass sends the blocks round once more with their
    gradients. Only one [n, m] block of similarities exists at a time, so a device's memory does not grow
    with the number of devices. The value and the gradients equal ``sigmoid`` on the all-gathered keys
    (``self_index`` = each anchor's own global column when the keys are the anchors), as SigLIP's chunked
    implementation computes it. With ``key_embeddings`` (the image–text form) no column is left out.

    Args:
        embeddings: [n, D] floating embeddings of this device's anchors.
        labels: [n] integer labels of the anchors.
        similarity: a name of ``geojax.similarity.get`` or a callable (a [n, D], b [m, D]) → [n, m].
        scale: t > 0, a scalar (may be traced and learned).
        bias: b, a scalar (may be traced and learned).
        key_embeddings: [m, D] floating embeddings of this device's keys (texts); None: the keys are the
            anchors, each anchor's own column left out.
        key_labels: [m] integer labels of the keys; required with ``key_embeddings``.
        axis_name: the named mapped axis the anchors and keys are split over (every device holds the same
            number); None on one device (the plain loss over the local keys).

    Returns:
        Scalar fp32 loss of the global batch, the same on every device; NaN when an embedding (through its
        similarities) is NaN or ±Inf.

    Raises:
        ValueError: ``embeddings`` or ``key_embeddings`` is not a non-empty floating matrix, or their widths
            differ; ``labels`` or ``key_labels`` is malformed, or ``key_labels`` is missing with
            ``key_embeddings``; ``scale`` is not a positive scalar or ``bias`` not a scalar;
            ``similarity`` is an unknown name.

    References:
        Zhai, Mustafa, Kolesnikov & Beyer 2023, "Sigmoid Loss for Language Image Pre-Training" (arXiv
        2303.15343), eq. 1 and its chunked, device-by-device implementation (§3.3).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
        >>> labels = jnp.array([0, 0, 1, 1])
        >>> round(float(losses.sigmoid_ring(e, labels, scale=5.0, bias=-2.0, axis_name=None)), 4)
        0.9138
        >>> round(float(losses.sigmoid(similarity.cosine(e, e), labels, scale=5.0, bias=-2.0)), 4)
        0.9138
    """
    check_embeddings(embeddings, key_embeddings, labels, key_labels, None)
    if key_embeddings is not None and key_labels is None:
        raise ValueError("key_labels is required with key_embeddings (the keys' own labels)")
    _check_scale_bias(scale, bias)
    sim_fn = _similarity.get(similarity)
    embeddings = jnp.asarray(embeddings)
    keys = embeddings if key_embeddings is None else jnp.asarray(key_embeddings)
    key_labels = labels if key_labels is None else key_labels
    # a zero that varies over the devices wherever the embeddings do: a replicated scale or bias plus it
    # meets the custom VJP's per-device cotangents, and its gradient is summed over the devices
    zero = jnp.zeros_like(embeddings[0, 0], jnp.float32)
    scale, bias = as_f32(scale) + zero, as_f32(bias) + zero
    exclude_self = key_embeddings is None
    rows = _ring_rows(sim_fn, axis_name, exclude_self, embeddings, keys, labels, key_labels, scale, bias)
    return global_mean(jnp.sum(rows), jnp.asarray(rows.shape[0], jnp.float32), axis_name)


sigmoid.__doc__ = fill_doc(sigmoid.__doc__, **PAIR_SECTIONS)
