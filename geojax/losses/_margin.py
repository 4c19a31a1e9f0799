"""The margin family of :mod:`geojax.losses`: contrastive, triplet (all, hard and semi-hard mining) and lifted
structured, over a similarity matrix with margins in similarity units.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, parallel
from geojax.losses._common import (
    BIG,
    MININGS,
    PAIR_SECTIONS,
    REDUCTIONS,
    Mining,
    Reduction,
    fill_doc,
    global_mean,
    mean_nonzero,
    prepare,
)
from geojax.losses._lse import column_lse, row_lse


def contrastive(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    pos_margin: float = 1.0,
    neg_margin: float = 0.0,
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
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
        {masks}
        {keys}

    Returns:
        Scalar fp32 loss; NaN when ``sim`` holds a NaN or ±Inf anywhere.

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, M] matrix; ``labels``, ``key_labels`` or
            ``self_index`` has the wrong length or a non-integer dtype; ``self_index`` lies outside [0, M);
            ``key_labels`` is missing while M ≠ n; ``key_valid`` is not a bool [M] vector; ``pos_mask`` or
            ``neg_mask`` is not a bool [n, M] matrix.

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
    s, pos, neg, bad = prepare(sim, labels, key_labels, self_index, key_valid, pos_mask, neg_mask)
    return mean_nonzero(jax.nn.relu(pos_margin - s), pos, bad, axis_name) + mean_nonzero(
        jax.nn.relu(s - neg_margin), neg, bad, axis_name
    )


def _kth_positive(pos: jax.Array, rank: jax.Array, k) -> tuple[jax.Array, jax.Array]:
    """Column of each row's k-th positive [n] (0 if it has fewer) and whether it exists [n]."""
    hit = pos & (rank == k)
    return jnp.argmax(hit, axis=1), jnp.any(hit, axis=1)


def triplet_pass(
    s: jax.Array,
    pos: jax.Array,
    neg: jax.Array,
    select: Callable[[jax.Array, jax.Array], jax.Array],
    visit: Callable[[Any, jax.Array, jax.Array, jax.Array], Any],
    init: Any,
) -> Any:
    """Loop over the k-th positive p of every anchor at once; ``visit`` folds each step's selected triplets.

    The loop runs max_a |P(a)| steps of O(n·M) work each, so the n·M·M triplet tensor is never formed.

    Args:
        s: [n, M] similarities.
        pos: [n, M] bool positive pairs.
        neg: [n, M] bool negative pairs.
        select: (s_ap [n, 1], s [n, M]) → [n, M] bool, which negatives n make the triplet (a, p, n) count.
        visit: (acc, col [n], s_ap [n], active [n, M]) → acc, folding the step where ``col`` is each anchor's
            k-th positive and ``active`` its selected negatives (none for an anchor with fewer positives).
        init: the accumulator before the first step.

    Returns:
        The accumulator after the last step.
    """
    rank = jnp.cumsum(pos, axis=1, dtype=jnp.int32) - 1
    steps = jnp.max(jnp.sum(pos, axis=1, dtype=jnp.int32))

    def body(k, acc):
        col, has = _kth_positive(pos, rank, k)
        s_ap = jnp.take_along_axis(s, col[:, None], axis=1)[:, 0]
        return visit(acc, col, s_ap, neg & has[:, None] & select(s_ap[:, None], s))

    return lax.fori_loop(0, steps, body, init)


def _violating(margin, semihard: bool):
    """The negatives of the loss's triplets: m + s_an − s_ap > 0, and s_an < s_ap for 'semihard'."""

    def select(s_ap, s):
        active = s > s_ap - margin
        return active & (s < s_ap) if semihard else active

    return select


def _triplet_forward(s, pos, neg, margin, semihard):
    def visit(acc, col, s_ap, active):
        total, count = acc
        cnt = jnp.sum(active, axis=1, dtype=jnp.float32)
        return total + cnt * (margin - s_ap) + jnp.sum(jnp.where(active, s, 0.0), axis=1), count + cnt

    zeros = jnp.zeros_like(s[:, 0])
    return triplet_pass(s, pos, neg, _violating(margin, semihard), visit, (zeros, zeros))


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

    select = _violating(margin, semihard)
    return triplet_pass(s, pos, neg, select, visit, jnp.zeros_like(s)), None, None, None


_triplet_sums.defvjp(_triplet_sums_fwd, _triplet_sums_bwd)


def triplet(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float = 0.2,
    mining: Mining = "all",
    reduction: Reduction = "mean_nonzero",
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
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
    and receives no gradient. With a miner's ``pos_mask`` / ``neg_mask`` the triplets are every (a, p, n)
    whose pairs (a, p) and (a, n) both are kept: one triplet per anchor from ``geojax.miners.batch_hard``, a
    superset of the mined triplets from ``geojax.miners.triplet_margin``.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors.
        margin: m, in similarity units.
        mining: 'all', 'hard' or 'semihard' (above).
        reduction: 'mean_nonzero' averages the positive terms (pytorch-metric-learning's AvgNonZeroReducer),
            'mean' all selected triplets.
        {masks}
        {keys}

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
    s, pos, neg, bad = prepare(sim, labels, key_labels, self_index, key_valid, pos_mask, neg_mask)
    if mining == "hard":
        valid = jnp.any(pos, axis=1) & jnp.any(neg, axis=1)
        hardest_pos = jnp.min(jnp.where(pos, s, BIG), axis=1)
        hardest_neg = jnp.max(jnp.where(neg, s, -BIG), axis=1)
        terms = jax.nn.relu(margin + jnp.where(valid, hardest_neg - hardest_pos, -BIG))
        if reduction == "mean_nonzero":
            return mean_nonzero(terms, valid, bad, axis_name)
        return global_mean(jnp.sum(terms) + bad, jnp.sum(valid), axis_name)
    total, count = _triplet_sums(s, pos, neg, jnp.asarray(margin, jnp.float32), mining == "semihard")
    if reduction == "mean" and mining == "all":
        selected = jnp.sum(pos, axis=1, dtype=jnp.float32) * jnp.sum(neg, axis=1, dtype=jnp.float32)
    else:
        selected = count  # 'semihard' selects only violating triplets; 'mean_nonzero' counts the terms > 0
    return global_mean(jnp.sum(total) + bad, jnp.sum(selected), axis_name)


def lifted_structured(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    pos_margin: float = 0.0,
    neg_margin: float = 1.0,
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
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
    whole batch whose label differs from p's (for a symmetric similarity, the batch part of p's row). A
    ``neg_mask`` narrows N(a) to its row a and N(p) to its row p (for a memory key, its column).

    Args:
        sim: [n, M] floating similarities of n anchors to M keys: one column per anchor of the (gathered)
            batch first, then any further keys (memory rows).
        labels: [n] integer labels of the anchors.
        pos_margin: m_pos, in similarity units.
        neg_margin: m_neg, in similarity units.
        {masks}
        {keys}

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
    s, pos, neg, bad = prepare(sim, labels, key_labels, self_index, key_valid, pos_mask, neg_mask)
    anchor_lse = row_lse(s, neg)  # [n]
    key_lse = parallel.gather(anchor_lse, axis_name)
    batch = key_lse.shape[0]
    if s.shape[1] < batch:
        raise ValueError(
            f"sim must have one column per anchor of the (gathered) batch first for lifted_structured: "
            f"{batch} anchors, got {s.shape[1]} columns"
        )
    if s.shape[1] > batch:  # keys without a row (memory): N(p) from their column over the global batch
        key_lse = jnp.concatenate([key_lse, column_lse(s[:, batch:], neg[:, batch:], axis_name)])
    union = jnp.logaddexp(anchor_lse[:, None], key_lse[None, :])
    valid = pos & (union > -BIG / 2)
    terms = jnp.square(jax.nn.relu(jnp.where(valid, union - neg_margin + pos_margin - s, 0.0))) / 2
    return global_mean(jnp.sum(terms) + bad, jnp.sum(valid), axis_name)


contrastive.__doc__ = fill_doc(contrastive.__doc__, **PAIR_SECTIONS)
triplet.__doc__ = fill_doc(triplet.__doc__, **PAIR_SECTIONS)
lifted_structured.__doc__ = fill_doc(lifted_structured.__doc__, **PAIR_SECTIONS)
