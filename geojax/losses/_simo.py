"""SimO (Bouhsine et al. 2024) for :mod:`geojax.losses`: distance and orthogonality ratios over the pairs of a
batch, from embeddings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from geojax import parallel
from geojax import similarity as _similarity
from geojax._numerics import nan_where_nonfinite, safe_div
from geojax.losses._common import check_embeddings, check_nonnegative, resolve_keys


def simo(
    embeddings: ArrayLike,
    labels: ArrayLike,
    *,
    eps: float = 1e-6,
    orthogonality: bool = True,
    orthogonality_weight: float = 1.0,
    key_embeddings: ArrayLike | None = None,
    key_labels: ArrayLike | None = None,
    self_index: ArrayLike | None = None,
    key_valid: ArrayLike | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """SimO loss (Bouhsine et al. 2024, eq. 1) over the pairs i < j of a batch.

    L = Σ_same d_ij / (ε + Σ_same o_ij) + Σ_diff o_ij / (ε + Σ_diff d_ij), d_ij = ‖e_i − e_j‖², o_ij =
    (e_i·e_j)². ``orthogonality=False`` is the paper's ablation ('Ablation study'): every o_ij is replaced by
    1, keeping the distance ratios without the squared-dot-product terms. ``orthogonality_weight`` w is the
    paper's "orthogonality learning factor" ('Ablation study'; 'The Orthogonality Learning Factor'), whose
    value and place in eq. 1 the paper does not give: it weighs the dissimilar pairs' term, L = Σ_same d /
    (ε + Σ_same o) + w Σ_diff o / (ε + Σ_diff d), the term that makes the classes orthogonal; w = 1 is eq. 1
    exactly. A zero denominator gives 0 for that
    term. Rectangular form: pair (i, j) counts when key column j > self_index[i] (all pairs when key_labels is
    given without self_index). d_ij is ``geojax.similarity.neg_sq_euclidean``'s (exact for identical rows) and
    e_i·e_j its ``dot``.

    Args:
        embeddings: [n, D] floating embeddings of the anchors.
        labels: [n] integer labels of the anchors.
        eps: ε ≥ 0 in both denominators.
        orthogonality: False replaces every o_ij by 1 (the paper's ablation).
        orthogonality_weight: w ≥ 0 on the dissimilar pairs' term (1: eq. 1 as written).
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
            ``self_index`` or ``key_valid`` are malformed; ``eps`` or ``orthogonality_weight`` is negative.

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
        >>> round(float(losses.simo(e, labels, orthogonality_weight=2.0)), 4)  # 0.625 + 2 × 0.09
        0.805
    """
    check_embeddings(embeddings, key_embeddings, labels, key_labels, self_index, key_valid)
    check_nonnegative(eps, "eps")
    check_nonnegative(orthogonality_weight, "orthogonality_weight")
    keys = embeddings if key_embeddings is None else key_embeddings
    labels = jnp.asarray(labels)
    key_labels, self_cols = resolve_keys(labels, key_labels, self_index)
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
    return safe_div(same_d, eps + same_o) + orthogonality_weight * safe_div(diff_o, eps + diff_d)
