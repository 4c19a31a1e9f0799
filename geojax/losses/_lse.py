"""The log-sum-exps every loss of :mod:`geojax.losses` uses: a running (online) row log-sum-exp over blocks of
columns, the masked row log-sum-exp of one matrix (one block of the running form, or one pass with the mask
applied first), a column log-sum-exp over the anchors of every device, and its O(n) form for a column
that holds one entry per row (a log-sum-exp per segment).

Each runs in fp32 with the stop-gradient maximum subtracted, masks with a large finite value (``BIG``) rather
than −inf, and gives −1e30 for an empty row or column: finite, with a zero gradient, so that
``softplus(lse)`` of it (log(1 + Σ), the form of several losses) is exactly 0.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from geojax import parallel
from geojax.losses._common import BIG


class LSE(NamedTuple):
    """Running log-sum-exp state per row.

    Attributes:
        m: [n] the stop-gradient maximum seen so far (−1e30 before any entry).
        s: [n] Σ exp(x − m) over the entries seen so far.
    """

    m: jax.Array
    s: jax.Array


def lse_init(zeros: jax.Array) -> LSE:
    """The empty state, shaped (and, under shard_map, device-varying) like ``zeros``.

    Args:
        zeros: [n] fp32 zeros.

    Returns:
        The state of n empty rows.
    """
    return LSE(zeros - BIG, zeros)


def lse_update(state: LSE, x: jax.Array, mask: jax.Array | bool) -> LSE:
    """Fold the masked entries of a block of columns into the running row log-sum-exp (online softmax).

    Args:
        state: the running state of n rows.
        x: [n, K] fp32 values.
        mask: [n, K] bool (or broadcastable: True counts every entry), the entries that count.

    Returns:
        The state after the block.
    """
    # The exponentials are of x − m where the mask holds and of −1e30 elsewhere (exactly 0), so a row with
    # no entry yet keeps s = 0. This order of operations is the one the committed runs were trained with
    # (python -m train.reproduce.same_code checks the outputs bit for bit).
    block_max = jnp.max(jnp.where(mask, lax.stop_gradient(x), -BIG), axis=1)
    m = jnp.maximum(state.m, block_max)
    z = jnp.where(mask, x - m[:, None], -BIG)
    return LSE(m, state.s * jnp.exp(state.m - m) + jnp.sum(jnp.exp(z), axis=1))


def lse_finish(state: LSE) -> jax.Array:
    """log Σ exp per row.

    Args:
        state: the running state of n rows.

    Returns:
        [n] fp32; −1e30 for an empty row (finite, zero gradient).
    """
    ok = state.s > 0
    return jnp.where(ok, state.m + jnp.log(jnp.where(ok, state.s, 1.0)), -BIG)


def running_row_lse(x: jax.Array, mask: jax.Array | bool) -> jax.Array:
    """log Σ exp over the masked entries of each row of one matrix, as one block folded into the running form.

    The same values as :func:`row_lse`, in :func:`lse_update`'s order of operations: the order the committed
    runs of the softmax losses and of MultiSimilarity were trained with (inside their jitted steps XLA fuses
    the one-pass form differently, and the last bits of a gradient move).

    Args:
        x: [n, K] fp32 values.
        mask: [n, K] bool (or broadcastable: True counts every entry), the entries that count.

    Returns:
        [n] fp32; −1e30 for an empty row (finite, zero gradient).
    """
    return lse_finish(lse_update(lse_init(jnp.zeros_like(x[:, 0])), x, mask))


def _global_top(top: jax.Array, axis_name: str | None) -> jax.Array:
    """The maximum over the devices of ``axis_name``, taken as 0 for a line with no entry (≤ −1e30): its
    exponentials, of −1e30 − 0, are then exactly 0, so its sum is 0."""
    top = top if axis_name is None else lax.pmax(top, axis_name)
    return jnp.where(top > -BIG, top, 0.0)


def _masked_lse(x: jax.Array, mask: jax.Array | bool, axis: int, axis_name: str | None = None) -> jax.Array:
    """log Σ exp over the masked entries along ``axis`` of one matrix, over every device of ``axis_name``.

    The masked-out entries are set to −1e30 first, so that one pass gives both the stop-gradient maximum and
    the exponentials (of x − max where the mask holds, exactly 0 elsewhere; an empty line's maximum is taken
    as 0, so its sum is 0). With ``axis_name`` (``axis`` the rows, split over the devices) the maximum is
    taken over the devices (``lax.pmax``) and the sums of the exponentials are summed over them before the
    log. On its own, each value and gradient equals that of one block folded into :func:`lse_update` bit for
    bit (tested); inside a larger jitted function XLA may fuse the two differently, and the last bit of a
    gradient can differ.

    Args:
        x: [n, K] fp32 values.
        mask: [n, K] bool (or broadcastable: True counts every entry), the entries that count.
        axis: 1 for each row's log-sum-exp, 0 for each column's.
        axis_name: the named mapped axis the rows are split over (``axis`` 0 only); None on one device.

    Returns:
        [n] (axis 1) or [K] (axis 0) fp32; −1e30 for an empty row or column (finite, zero gradient).
    """
    a = jnp.where(mask, x, -BIG)
    top = _global_top(jnp.max(lax.stop_gradient(a), axis=axis), axis_name)
    total = jnp.sum(jnp.exp(a - jnp.expand_dims(top, axis)), axis=axis)
    return lse_finish(LSE(top, parallel.global_sum(total, axis_name)))


def row_lse(x: jax.Array, mask: jax.Array | bool) -> jax.Array:
    """log Σ exp over the masked entries of each row of one matrix, in one pass (:func:`_masked_lse`).

    Args:
        x: [n, K] fp32 values.
        mask: [n, K] bool (or broadcastable: True counts every entry), the entries that count.

    Returns:
        [n] fp32; −1e30 for an empty row (finite, zero gradient).
    """
    return _masked_lse(x, mask, 1)


def column_lse(x: jax.Array, mask: jax.Array, axis_name: str | None) -> jax.Array:
    """log Σ exp over the masked rows of each column, over the rows of every device of ``axis_name``.

    The column maximum is taken over the devices (``lax.pmax``, no gradient) and the sums of the exponentials
    are summed over them before the log, so every device gets the log-sum-exp of the global column.

    Args:
        x: [n, K] fp32 values, n the rows (anchors) of this device.
        mask: [n, K] bool, the entries that count.
        axis_name: the named mapped axis the rows are split over; None on one device.

    Returns:
        [K] fp32, the same on every device; −1e30 for an empty column (finite, zero gradient).
    """
    return _masked_lse(x, mask, 0, axis_name)


def segment_lse(x: jax.Array, segments: jax.Array, count: int, axis_name: str | None) -> jax.Array:
    """log Σ exp of the values of each segment, over the values of every device of ``axis_name``.

    The column log-sum-exp of an [n, count] matrix whose row i holds one entry, ``x[i]`` in column
    ``segments[i]`` (:func:`column_lse` with a one-hot mask), in O(n) rather than O(n·count). The segment
    maximum is taken over the devices (``lax.pmax``, no gradient) and the sums of the exponentials are summed
    over them before the log.

    Args:
        x: [n] fp32 values, n those of this device.
        segments: [n] integer segment of each value, in [0, count).
        count: the number of segments.
        axis_name: the named mapped axis the values are split over; None on one device.

    Returns:
        [count] fp32, the same on every device; −1e30 for an empty segment (finite, zero gradient).
    """
    top = _global_top(jax.ops.segment_max(lax.stop_gradient(x), segments, count), axis_name)
    total = jax.ops.segment_sum(jnp.exp(x - top[segments]), segments, count)
    return lse_finish(LSE(top, parallel.global_sum(total, axis_name)))
