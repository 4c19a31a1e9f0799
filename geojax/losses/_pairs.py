"""The pair-weighting family of :mod:`geojax.losses`: MultiSimilarity and Circle, over a similarity matrix,
each pair weighted through a log-sum-exp over an anchor's positives and over its negatives.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax.losses._common import (
    BIG,
    PAIR_SECTIONS,
    check_nonnegative,
    check_positive,
    fill_doc,
    global_mean,
    mean_nonzero,
    prepare,
)
from geojax.losses._lse import row_lse, running_row_lse


def multi_similarity(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    alpha: float | jax.Array = 2.0,
    beta: float | jax.Array = 50.0,
    base: float | jax.Array = 0.5,
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Multi-Similarity loss (Wang et al. 2019, the MS loss of §4).

    Per anchor a: ℓ_a = 1/α log(1 + Σ_{p∈P(a)} e^{−α(s_ap − λ)}) + 1/β log(1 + Σ_{n∈N(a)} e^{β(s_an − λ)}),
    λ = ``base``; the loss is the mean of ℓ_a over all anchors of the (global) batch, an anchor without pairs
    counting 0. The paper's pair mining is a separate step (``geojax.miners.multi_similarity``) whose masks
    this takes as ``pos_mask`` / ``neg_mask``. Equals pytorch-metric-learning's ``MultiSimilarityLoss(alpha,
    beta, base)`` with cosine similarity, with or without its ``MultiSimilarityMiner``.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors.
        alpha: α > 0, the positive pairs' scale.
        beta: β > 0, the negative pairs' scale.
        base: λ, the similarity both log-sum-exps are centred on.
        {masks}
        {keys}

    Returns:
        Scalar fp32 loss; NaN when ``sim`` holds a NaN or ±Inf anywhere.

    Raises:
        ValueError: ``alpha`` or ``beta`` is not positive; ``sim``, the labels, ``self_index``,
            ``key_valid`` or a mask is malformed (as for ``contrastive``).

    References:
        Wang, Han, Huang, Dong & Scott 2019, "Multi-Similarity Loss with General Pair Weighting for Deep
        Metric Learning" (arXiv 1904.06627), §4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[1.0, 0.6, -0.1], [0.6, 1.0, 0.2], [-0.1, 0.2, 1.0]])
        >>> round(float(losses.multi_similarity(sim, jnp.array([0, 0, 1]), beta=10.0)), 4)
        0.2028
    """
    check_positive(alpha, "alpha")
    check_positive(beta, "beta")
    s, pos, neg, bad = prepare(sim, labels, key_labels, self_index, key_valid, pos_mask, neg_mask)
    pos_term = jax.nn.softplus(running_row_lse(-alpha * (s - base), pos)) / alpha
    neg_term = jax.nn.softplus(running_row_lse(beta * (s - base), neg)) / beta
    return global_mean(jnp.sum(pos_term + neg_term) + bad, jnp.asarray(s.shape[0], jnp.float32), axis_name)


def circle(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float | jax.Array = 0.4,
    gamma: float | jax.Array = 80.0,
    pos_mask: ArrayLike | None = None,
    neg_mask: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Circle loss (Sun et al. 2020, eq. 6 with the settings of eq. 8), pair-label form.

    Per anchor a: ℓ_a = log(1 + Σ_{n∈N(a)} e^{γ α_n (s_an − Δ_n)} · Σ_{p∈P(a)} e^{−γ α_p (s_ap − Δ_p)}), with
    α_p = [1 + m − s_ap]₊ and α_n = [s_an + m]₊ held constant in the backward pass (the paper's self-paced
    weights), Δ_p = 1 − m, Δ_n = m. The loss is the mean of ℓ_a over the anchors that have both a positive
    and a negative and ℓ_a > 0 (pytorch-metric-learning's AvgNonZeroReducer, over the global batch). Equals
    pytorch-metric-learning's ``CircleLoss(m, gamma)`` with cosine similarity.

    Args:
        sim: [n, M] floating similarities of n anchors to M keys (higher = more similar).
        labels: [n] integer labels of the anchors.
        margin: m ≥ 0, the relaxation margin.
        gamma: γ > 0, the scale.
        {masks}
        {keys}

    Returns:
        Scalar fp32 loss; 0 when no anchor has both a positive and a negative; NaN when ``sim`` holds a NaN or
        ±Inf anywhere.

    Raises:
        ValueError: ``margin`` is negative or ``gamma`` not positive; ``sim``, the labels, ``self_index``,
            ``key_valid`` or a mask is malformed (as for ``contrastive``).

    References:
        Sun, Cheng, Zhang, Zhang, Zheng, Wang & Wei 2020, "Circle Loss: A Unified Perspective of Pair
        Similarity Optimization" (arXiv 2002.10857), eqs. 6 and 8.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses, similarity
        >>> e = jnp.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [-0.8, 0.6]])
        >>> round(float(losses.circle(similarity.cosine(e, e), jnp.array([0, 0, 1, 1]), gamma=16.0)), 4)
        4.2058
    """
    check_nonnegative(margin, "margin")
    check_positive(gamma, "gamma")
    s, pos, neg, bad = prepare(sim, labels, key_labels, self_index, key_valid, pos_mask, neg_mask)
    alpha_p = lax.stop_gradient(jax.nn.relu(1.0 + margin - s))
    alpha_n = lax.stop_gradient(jax.nn.relu(s + margin))
    pos_lse = row_lse(-gamma * alpha_p * (s - (1.0 - margin)), pos)
    neg_lse = row_lse(gamma * alpha_n * (s - margin), neg)
    both = jnp.any(pos, axis=1) & jnp.any(neg, axis=1)
    terms = jax.nn.softplus(jnp.where(both, pos_lse + neg_lse, -BIG))
    return mean_nonzero(terms, both, bad, axis_name)


multi_similarity.__doc__ = fill_doc(multi_similarity.__doc__, **PAIR_SECTIONS)
circle.__doc__ = fill_doc(circle.__doc__, **PAIR_SECTIONS)
