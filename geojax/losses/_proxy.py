"""The proxy and margin-softmax family of :mod:`geojax.losses`: ProxyAnchor, ProxyNCA, NormalizedSoftmax,
ArcFace (with SubCenter ArcFace) and CosFace, over the similarity [n, C] of n embeddings to C class proxies
(class weights), column c = class c.

The proxies are parameters the caller keeps (on the run's geometry, with their own learning rate); these
functions take only the similarity to them, so they stay pure and any geometry's similarity can serve. With
``axis_name`` the per-proxy sums of ProxyAnchor and the per-embedding means of the others run over the global
batch: every device returns the loss of the whole batch.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from geojax import _checks, parallel
from geojax._numerics import nan_where_nonfinite, safe_div, safe_sqrt
from geojax.losses._common import (
    BIG,
    as_f32,
    check_labels,
    check_nonnegative,
    check_positive,
    fill_doc,
    global_mean,
)
from geojax.losses._lse import column_lse, row_lse, segment_lse


def _check_proxies(sim, labels, sub_centers: int = 1) -> int:
    """Validate sim [n, C·K] and labels [n] in [0, C); return C."""
    _checks.check_matrix(sim, "sim")
    _checks.check_floating(sim, "sim")
    _checks.check_positive_int(sub_centers, "sub_centers")
    n, columns = sim.shape
    if columns % sub_centers:
        raise ValueError(
            f"sim must have C·sub_centers columns (class-major), got {columns} columns for "
            f"sub_centers={sub_centers}"
        )
    classes = columns // sub_centers
    check_labels(labels, "labels", n, "rows of sim")
    _checks.check_index_range(labels, "labels", classes, "classes: columns of sim")
    return classes


def _cross_entropy(logits: jax.Array, target: jax.Array, labels: jax.Array, bad, axis_name) -> jax.Array:
    """Mean over the global batch of −log softmax, each row's own-class logit replaced by ``target`` [n]."""
    own = labels[:, None] == jnp.arange(logits.shape[1])
    x = jnp.where(own, target[:, None], logits)
    total = jnp.sum(row_lse(x, True) - target) + bad
    return global_mean(total, jnp.asarray(logits.shape[0], jnp.float32), axis_name)


def _own(x: jax.Array, labels: jax.Array) -> jax.Array:
    """Each row's entry in its class's column [n]."""
    return jnp.take_along_axis(x, labels[:, None], axis=1)[:, 0]


def proxy_anchor(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float | jax.Array = 0.1,
    alpha: float | jax.Array = 32.0,
    axis_name: str | None = None,
) -> jax.Array:
    """Proxy Anchor loss (Kim et al. 2020, eq. 4).

    Each proxy p is an anchor against the batch: with X⁺_p the embeddings of its class and X⁻_p the others,
    L = mean_{p∈P⁺} log(1 + Σ_{x∈X⁺_p} e^{−α(s(x,p) − δ)}) + mean_{p∈P} log(1 + Σ_{x∈X⁻_p} e^{α(s(x,p) + δ)}),
    P⁺ the proxies with a positive in the (global) batch, P all C proxies. The sums over x are
    log-sum-exps per proxy, summed over the devices of ``axis_name`` before the log; the positive one runs
    over each embedding's own-class entry alone (by segment: O(n), not O(n·C)). Equals
    pytorch-metric-learning's ``ProxyAnchorLoss(C, D, margin=δ, alpha=α)`` with its proxies and cosine
    similarity.

    {proxies}
        margin: δ, in similarity units (≥ 0).
        alpha: α > 0, the scale.
        {axis}

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, C] matrix; ``labels`` is not an integer [n]
            vector in [0, C); ``margin`` is negative or ``alpha`` not positive.

    References:
        Kim, Kim, Cho & Kwak 2020, "Proxy Anchor Loss for Deep Metric Learning" (arXiv 2003.13911), eq. 4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[0.9, 0.1, -0.2], [0.7, 0.3, 0.0], [0.2, 0.8, 0.1]])
        >>> round(float(losses.proxy_anchor(sim, jnp.array([0, 0, 1]), alpha=4.0)), 4)
        1.8409
    """
    _check_proxies(sim, labels)
    check_nonnegative(margin, "margin")
    check_positive(alpha, "alpha")
    s, labels = as_f32(sim), jnp.asarray(labels)
    own = labels[:, None] == jnp.arange(s.shape[1])
    pos_lse = segment_lse(alpha * (margin - _own(s, labels)), labels, s.shape[1], axis_name)
    neg_lse = column_lse(alpha * (s + margin), ~own, axis_name)
    with_positive = pos_lse > -BIG / 2
    pos = safe_div(jnp.sum(jax.nn.softplus(pos_lse)), jnp.sum(with_positive, dtype=jnp.float32))
    neg = jnp.sum(jax.nn.softplus(neg_lse)) / s.shape[1]
    return pos + neg + parallel.global_sum(nan_where_nonfinite(s), axis_name)


def proxy_nca(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    scale: float | jax.Array = 1.0,
    axis_name: str | None = None,
) -> jax.Array:
    """ProxyNCA (Movshovitz-Attias et al. 2017), as pytorch-metric-learning computes it.

    Per embedding x of class y: −log(e^{t·s(x,p_y)} / Σ_c e^{t·s(x,p_c)}), mean over the (global) batch. The
    paper writes the loss with the positive proxy left out of the denominator; pytorch-metric-learning's
    ``ProxyNCALoss`` (and this function) keeps it, a softmax over all proxies. With ``sim`` =
    ``similarity.neg_sq_euclidean`` of the L2-normalised embeddings and proxies it equals
    ``ProxyNCALoss(C, D, softmax_scale=t)`` (whose LpDistance(power=2) normalises both), except where that
    drops a row whose softmax underflows to exactly 0 (a log-softmax here, finite).

    {proxies}
        scale: t > 0, the softmax scale (``softmax_scale``).
        {axis}

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, C] matrix; ``labels`` is not an integer [n]
            vector in [0, C); ``scale`` is not positive.

    References:
        Movshovitz-Attias, Toshev, Leung, Ioffe & Singh 2017, "No Fuss Distance Metric Learning using
        Proxies" (arXiv 1703.07464), the proxy NCA loss.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = -jnp.array([[0.1, 1.5, 3.2], [2.0, 0.4, 1.1]])  # −‖x̂ − p̂‖²
        >>> round(float(losses.proxy_nca(sim, jnp.array([0, 1]))), 4)
        0.3928
    """
    _check_proxies(sim, labels)
    check_positive(scale, "scale")
    logits, labels = as_f32(sim) * scale, jnp.asarray(labels)
    return _cross_entropy(logits, _own(logits, labels), labels, nan_where_nonfinite(logits), axis_name)


def normalized_softmax(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    temperature: float | jax.Array = 0.05,
    axis_name: str | None = None,
) -> jax.Array:
    """NormSoftmax (Zhai & Wu 2019): softmax cross-entropy of the cosines to the class weights over τ.

    Per embedding x of class y: −log(e^{s(x,w_y)/τ} / Σ_c e^{s(x,w_c)/τ}), mean over the (global) batch. With
    ``sim`` the cosine to the weights it equals pytorch-metric-learning's ``NormalizedSoftmaxLoss(C, D,
    temperature=τ)``.

    {proxies}
        temperature: τ > 0.
        {axis}

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, C] matrix; ``labels`` is not an integer [n]
            vector in [0, C); ``temperature`` is not positive.

    References:
        Zhai & Wu 2019, "Classification is a Strong Baseline for Deep Metric Learning" (arXiv 1811.12649),
        the normalized softmax loss.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[0.7, -0.3], [0.1, 0.5], [0.4, 0.6]])
        >>> round(float(losses.normalized_softmax(sim, jnp.array([0, 1, 1]), temperature=0.5)), 4)
        0.337
    """
    _check_proxies(sim, labels)
    check_positive(temperature, "temperature")
    logits, labels = as_f32(sim) / temperature, jnp.asarray(labels)
    return _cross_entropy(logits, _own(logits, labels), labels, nan_where_nonfinite(logits), axis_name)


def _arc_margin(c: jax.Array, margin) -> jax.Array:
    """cos(θ + m) of cos θ = c where θ ≤ π − m, else InsightFace's fallback cos θ − m·sin m.

    cos(θ + m) = c·cos m − sin θ·sin m with sin θ = √(1 − c²) through a guarded square root, so no arccos
    is taken and the gradient stays finite at c = ±1 (there sin θ = 0 contributes none).
    """
    cos_m, sin_m = jnp.cos(margin), jnp.sin(margin)
    return jnp.where(c >= -cos_m, c * cos_m - safe_sqrt(1.0 - c * c) * sin_m, c - margin * sin_m)


def arcface(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float | jax.Array = 0.5,
    scale: float | jax.Array = 64.0,
    sub_centers: int = 1,
    axis_name: str | None = None,
) -> jax.Array:
    """ArcFace, additive angular margin (Deng et al. 2019, eq. 3), and SubCenter ArcFace (Deng et al. 2020).

    Per embedding x of class y, with θ_c the angle to class c's weight (cos θ_c = s(x, w_c)):
    −log(e^{s·cos(θ_y + m)} / (e^{s·cos(θ_y + m)} + Σ_{c≠y} e^{s·cos θ_c})), mean over the (global) batch.
    Where θ_y > π − m, cos(θ_y + m) would stop decreasing in θ_y; the logit is then cos θ_y − m·sin m instead
    (InsightFace's and pytorch-metric-learning's default, no 'easy margin'). ``sub_centers`` = K takes
    ``sim`` [n, C·K], class-major (column c·K + k = sub-centre k of class c, pytorch-metric-learning's
    ``SubCenterArcFaceLoss`` layout), and uses each class's largest cosine. The margin is in radians:
    pytorch-metric-learning's ``ArcFaceLoss(margin=…)`` takes degrees, and its default 28.6° is
    ``margin=math.radians(28.6)`` (0.49916) here, where the default is the paper's 0.5. With those values
    and ``sim`` the cosine it equals ``ArcFaceLoss`` / ``SubCenterArcFaceLoss``. No arccos is taken: the
    gradient is finite at cos = ±1.

    {proxies}
        margin: m in radians, 0 ≤ m < π.
        scale: s > 0, the logits' scale.
        sub_centers: K ≥ 1 sub-centres per class; ``sim`` has C·K columns.
        {axis}

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, C·K] matrix; ``labels`` is not an integer [n]
            vector in [0, C); ``margin`` is outside [0, π), ``scale`` not positive or ``sub_centers`` not a
            positive integer.

    References:
        Deng, Guo, Xue & Zafeiriou 2019, "ArcFace: Additive Angular Margin Loss for Deep Face Recognition"
        (arXiv 1801.07698), eq. 3; Deng et al. 2020, "Sub-center ArcFace: Boosting Face Recognition by
        Large-scale Noisy Web Faces" (ECCV 2020).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[0.6, 0.3, -0.5], [-0.1, 0.7, 0.4]])
        >>> round(float(losses.arcface(sim, jnp.array([0, 1]), scale=8.0)), 4)
        1.4262
        >>> sub = jnp.array([[0.9, 0.3, 0.1, 0.0], [0.2, -0.1, 0.8, 0.5]])  # C = 2, K = 2
        >>> round(float(losses.arcface(sub, jnp.array([0, 1]), scale=8.0, sub_centers=2)), 4)
        0.0933
    """
    _check_proxies(sim, labels, sub_centers)
    check_nonnegative(margin, "margin")
    if not _checks.is_traced(margin) and not float(margin) < math.pi:
        raise ValueError(f"margin must lie in [0, π) radians, got {margin!r}")
    check_positive(scale, "scale")
    s, labels = as_f32(sim), jnp.asarray(labels)
    bad = nan_where_nonfinite(s)
    if sub_centers > 1:
        s = jnp.max(s.reshape(s.shape[0], -1, sub_centers), axis=2)
    return _cross_entropy(scale * s, scale * _arc_margin(_own(s, labels), margin), labels, bad, axis_name)


def cosface(
    sim: ArrayLike,
    labels: ArrayLike,
    *,
    margin: float | jax.Array = 0.35,
    scale: float | jax.Array = 64.0,
    axis_name: str | None = None,
) -> jax.Array:
    """CosFace, large margin cosine loss (Wang et al. 2018, eq. 4).

    Per embedding x of class y: −log(e^{s(cos θ_y − m)} / (e^{s(cos θ_y − m)} + Σ_{c≠y} e^{s·cos θ_c})), mean
    over the (global) batch. With ``sim`` the cosine to the class weights it equals pytorch-metric-learning's
    ``CosFaceLoss(C, D, margin=m, scale=s)``.

    {proxies}
        margin: m ≥ 0, the cosine margin.
        scale: s > 0, the logits' scale.
        {axis}

    Raises:
        ValueError: ``sim`` is not a non-empty floating [n, C] matrix; ``labels`` is not an integer [n]
            vector in [0, C); ``margin`` is negative or ``scale`` not positive.

    References:
        Wang, Wang, Zhou, Ji, Gong, Zhou, Li & Liu 2018, "CosFace: Large Margin Cosine Loss for Deep Face
        Recognition" (arXiv 1801.09414), eq. 4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import losses
        >>> sim = jnp.array([[0.9, 0.1, -0.2], [0.2, 0.8, 0.1]])
        >>> round(float(losses.cosface(sim, jnp.array([0, 1]), scale=8.0)), 4)
        0.1042
    """
    _check_proxies(sim, labels)
    check_nonnegative(margin, "margin")
    check_positive(scale, "scale")
    s, labels = as_f32(sim), jnp.asarray(labels)
    return _cross_entropy(
        scale * s, scale * (_own(s, labels) - margin), labels, nan_where_nonfinite(s), axis_name
    )


# The five losses share the Args entries of the similarity, the labels and the device axis, written once here
# in place of each docstring's {proxies} and {axis} lines.
_PROXIES_DOC = """Args:
        sim: [n, C] floating similarities of n embeddings to C class proxies (class weights), column c = class
            c (higher = more similar).
        labels: [n] integer classes of the embeddings, in [0, C)."""
_AXIS_DOC = """axis_name: named mapped axis the embeddings are split over: the sums and counts that the loss
            normalises are summed over it, so every device returns the loss of the global batch; None on one
            device.

    Returns:
        Scalar fp32 loss, the same on every device; NaN when ``sim`` holds a NaN or ±Inf anywhere."""
_SECTIONS = {"proxies": _PROXIES_DOC, "axis": _AXIS_DOC}
proxy_anchor.__doc__ = fill_doc(proxy_anchor.__doc__, **_SECTIONS)
proxy_nca.__doc__ = fill_doc(proxy_nca.__doc__, **_SECTIONS)
normalized_softmax.__doc__ = fill_doc(normalized_softmax.__doc__, **_SECTIONS)
arcface.__doc__ = fill_doc(arcface.__doc__, **_SECTIONS)
cosface.__doc__ = fill_doc(cosface.__doc__, **_SECTIONS)
