"""Pairwise similarity matrices: the similarity functions of Feeney & Hughes (2024), the flat-torus distance
of Stowell (2026, §4) and the atlas semi-metric d_M of Korman (2021, eq. 7).

Every function maps a: [N, D], b: [M, D] to an fp32 [N, M] matrix, *higher = more similar*, except
``manifold_distance`` which is a distance (lower = closer), as in Korman (2021). Inner products accumulate in
fp32 (``preferred_element_type``), and every square root / arccos is guarded so that gradients stay finite
at identical points, zero vectors and cos = ±1. Non-finite input is never hidden: entry (i, j) is NaN when
row a_i or row b_j holds a NaN or ±Inf. Formulas and edge conventions: docs/conventions.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, geometries
from geojax._numerics import nan_where_nonfinite, pairwise_sq_diff, safe_normalize, safe_sqrt

# cos is clipped to [-1 + ARC_CLIP, 1 - ARC_CLIP] inside arccos, so its gradient stays finite at cos = ±1.
ARC_CLIP = 1e-7

Similarity = Callable[[jax.Array, jax.Array], jax.Array]
# Similarities of plain vectors (``get`` accepts these); ``torus`` takes angles in turns.
SimilarityName = Literal["cosine", "neg_arc_length", "neg_euclidean", "neg_sq_euclidean", "dot", "torus"]
SIMILARITIES: tuple[str, ...] = get_args(SimilarityName)

# Squared distances: the Gram expansion runs on row tiles of this size; tiles holding a pair the expansion
# cannot resolve are recomputed from the differences.
_TILE = 16
# A squared distance is recomputed from the differences when the expansion's value lies within this factor
# of the expansion's rounding-error bound 2(D + 2)·u·(‖a′‖² + ‖b′‖²) (u = 2⁻²⁴, a′, b′ centred rows).
_REFINE_MARGIN = 16.0
_UNIT_ROUNDOFF = float(jnp.finfo(jnp.float32).eps) / 2


def _check_pair(a, b) -> None:
    _checks.check_matrix(a, "a")
    _checks.check_matrix(b, "b")
    _checks.check_floating(a, "a")
    _checks.check_floating(b, "b")
    _checks.check_same_width(a, b, "a", "b")


def _gram(a: ArrayLike, b: ArrayLike, precision=None) -> jax.Array:
    """a @ bᵀ accumulated in fp32. a: [N, D], b: [M, D] → [N, M]."""
    return jnp.einsum("nd,md->nm", a, b, precision=precision, preferred_element_type=jnp.float32)


def _nonfinite_pairs(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """[N, M]: NaN where row a_i or row b_j holds a NaN or ±Inf, else 0 (no gradient)."""
    return nan_where_nonfinite(a, axis=-1)[:, None] + nan_where_nonfinite(b, axis=-1)[None, :]


def _pad_rows_with_zeros(x: jax.Array, rows: int) -> jax.Array:
    return jnp.pad(x, ((0, rows - x.shape[0]), (0, 0)))


# Σ (a_d − b_d)² of a block of rows against every key, recomputed in the backward pass rather than storing
# the [rows, M, D] differences.
_exact_sq = jax.checkpoint(pairwise_sq_diff)


@jax.jit
def _sq_dist(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """‖a_i − b_j‖² ≥ 0 in fp32, at matrix-multiply speed. a: [N, D], b: [M, D] → [N, M].

    The Gram expansion ‖a′‖² + ‖b′‖² − 2a′·b′ runs on rows centred on the mean of the finite rows of both
    sets (a′ = a − μ, b′ = b − μ; the shift cancels exactly in the distance and shrinks the expansion's
    rounding error, which scales with ‖a′‖² + ‖b′‖² rather than ‖a − b‖²). Pairs whose expanded value lies
    within ``_REFINE_MARGIN`` times that error bound (identical and near-identical rows) are recomputed as
    Σ (a_d − b_d)², tile by tile: identical rows give exactly 0 and close pairs carry only the round-off of
    their differences. At most (number of row tiles + number of column tiles) tiles are recomputed this way;
    beyond that (many near-duplicates) every flagged pair is recomputed from the differences in one pass.
    """
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    (n, d), m = a.shape, b.shape[0]
    finite_a = jnp.all(jnp.isfinite(a), axis=1, keepdims=True)
    finite_b = jnp.all(jnp.isfinite(b), axis=1, keepdims=True)
    total = jnp.sum(jnp.where(finite_a, a, 0.0), axis=0) + jnp.sum(jnp.where(finite_b, b, 0.0), axis=0)
    mu = lax.stop_gradient(total / jnp.maximum(jnp.sum(finite_a) + jnp.sum(finite_b), 1))

    tn, tm = min(_TILE, n), min(_TILE, m)
    nb, nk = -(-n // tn), -(-m // tm)
    a, b = _pad_rows_with_zeros(a, nb * tn), _pad_rows_with_zeros(b, nk * tm)
    ac, bc = a - mu, b - mu
    a2, b2 = jnp.sum(jnp.square(ac), axis=1), jnp.sum(jnp.square(bc), axis=1)
    sq = jnp.maximum(a2[:, None] + b2[None, :] - 2.0 * _gram(ac, bc, lax.Precision.HIGHEST), 0.0)
    bound = (2.0 * (d + 2) * _UNIT_ROUNDOFF * _REFINE_MARGIN) * (a2[:, None] + b2[None, :])
    real = (jnp.arange(nb * tn) < n)[:, None] & (jnp.arange(nk * tm) < m)[None, :]
    refine = (sq <= bound) & real
    flagged = jnp.any(refine.reshape(nb, tn, nk, tm), axis=(1, 3))
    cap = nb + nk

    # Both branches return the flagged pairs recomputed, other entries arbitrary; gradients reach the
    # expansion only through the entries it keeps (the ``where`` below), so no [N, M] scatter is
    # transposed in the backward pass.
    def some_tiles(sq):
        ti, tk = jnp.nonzero(flagged, size=cap, fill_value=(nb, nk))  # unused slots point past the end
        ci, ck = jnp.minimum(ti, nb - 1), jnp.minimum(tk, nk - 1)
        exact = pairwise_sq_diff(a.reshape(nb, tn, d)[ci], b.reshape(nk, tm, d)[ck])  # [cap, tn, tm]
        return sq.reshape(nb, tn, nk, tm).at[ti, :, tk, :].set(exact, mode="drop").reshape(sq.shape)

    def all_rows(sq):
        return lax.map(lambda rows: _exact_sq(rows, b), a.reshape(nb, tn, d)).reshape(sq.shape)

    exact = lax.cond(jnp.sum(flagged) > cap, all_rows, some_tiles, lax.stop_gradient(sq))
    return jnp.where(refine, exact, sq)[:n, :m]


def dot(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Dot-product similarity a_i · b_j (Feeney & Hughes 2024).

    The inner products accumulate in fp32 (``preferred_element_type``).

    Args:
        a: [N, D] floating rows.
        b: [M, D] floating rows, the same width D.

    Returns:
        [N, M] fp32 similarities; entry (i, j) is NaN when row a_i or row b_j holds a NaN or ±Inf.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty floating matrix, or their widths differ.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import similarity
        >>> a = jnp.array([[1.0, 0.0], [3.0, 4.0]])
        >>> b = jnp.array([[0.0, 2.0], [1.0, 0.0]])
        >>> print(similarity.dot(a, b))
        [[0. 1.]
         [8. 3.]]
    """
    _check_pair(a, b)
    return _gram(a, b) + _nonfinite_pairs(a, b)


def cosine(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Cosine similarity a_i · b_j / (‖a_i‖ ‖b_j‖) (Feeney & Hughes 2024).

    Both sets are normalised (norms in fp32) before an fp32 inner product; a zero row gives 0, with a finite
    gradient.

    Args:
        a: [N, D] floating rows.
        b: [M, D] floating rows, the same width D.

    Returns:
        [N, M] fp32 similarities in [−1, 1]; entry (i, j) is NaN when row a_i or row b_j holds a NaN or ±Inf.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty floating matrix, or their widths differ.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import similarity
        >>> a = jnp.array([[1.0, 0.0], [3.0, 4.0]])
        >>> b = jnp.array([[0.0, 2.0], [1.0, 0.0]])
        >>> print(np.asarray(similarity.cosine(a, b), np.float64).round(4))
        [[0.  1. ]
         [0.8 0.6]]
    """
    _check_pair(a, b)
    return _gram(safe_normalize(a), safe_normalize(b)) + _nonfinite_pairs(a, b)


def neg_arc_length(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Negative arc length 1 − arccos(cos)/π on the unit sphere (Feeney & Hughes 2024).

    cos is the cosine similarity, clipped to ±(1 − 1e-7) inside arccos so the gradient stays finite at
    cos = ±1.

    Args:
        a: [N, D] floating rows.
        b: [M, D] floating rows, the same width D.

    Returns:
        [N, M] fp32 similarities in [0, 1]; entry (i, j) is NaN when row a_i or row b_j holds a NaN or ±Inf.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty floating matrix, or their widths differ.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import similarity
        >>> a = jnp.array([[1.0, 0.0], [3.0, 4.0]])
        >>> b = jnp.array([[0.0, 2.0], [1.0, 0.0]])
        >>> print(np.asarray(similarity.neg_arc_length(a, b), np.float64).round(4))
        [[0.5    0.9998]
         [0.7952 0.7048]]
    """
    _check_pair(a, b)
    cos = _gram(safe_normalize(a), safe_normalize(b))
    arc = jnp.arccos(jnp.clip(cos, -1.0 + ARC_CLIP, 1.0 - ARC_CLIP)) / math.pi
    return 1.0 - arc + _nonfinite_pairs(a, b)


def neg_euclidean(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Negative Euclidean distance −‖a_i − b_j‖₂ (Feeney & Hughes 2024).

    Value 0 and gradient 0 (finite) at a_i = b_j. Identical rows give exactly 0 and near neighbours keep the
    accuracy of their coordinate differences, at matrix-multiply speed: the Gram expansion on rows centred on
    their mean, in full fp32, with the pairs it cannot resolve recomputed from the differences (see
    docs/conventions.md, "Squared distances").

    Args:
        a: [N, D] floating rows.
        b: [M, D] floating rows, the same width D.

    Returns:
        [N, M] fp32 similarities ≤ 0; entry (i, j) is NaN when row a_i or row b_j holds a NaN or ±Inf.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty floating matrix, or their widths differ.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import similarity
        >>> a = jnp.array([[1.0, 0.0], [3.0, 4.0]])
        >>> b = jnp.array([[0.0, 2.0], [1.0, 0.0]])
        >>> print(np.asarray(similarity.neg_euclidean(a, b), np.float64).round(4))
        [[-2.2361  0.    ]
         [-3.6056 -4.4721]]
    """
    _check_pair(a, b)
    return -safe_sqrt(_sq_dist(a, b)) + _nonfinite_pairs(a, b)


def neg_sq_euclidean(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Negative squared Euclidean distance −‖a_i − b_j‖², computed as in ``neg_euclidean``.

    Identical rows give exactly 0; near neighbours carry only the round-off of their coordinate differences
    (docs/conventions.md, "Squared distances").

    Args:
        a: [N, D] floating rows.
        b: [M, D] floating rows, the same width D.

    Returns:
        [N, M] fp32 similarities ≤ 0; entry (i, j) is NaN when row a_i or row b_j holds a NaN or ±Inf.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty floating matrix, or their widths differ.

    References:
        Feeney & Hughes 2024, similarity functions × contrastive losses.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import similarity
        >>> a = jnp.array([[1.0, 0.0], [3.0, 4.0]])
        >>> b = jnp.array([[0.0, 2.0], [1.0, 0.0]])
        >>> print(similarity.neg_sq_euclidean(a, b))
        [[ -5.   0.]
         [-13. -20.]]
    """
    _check_pair(a, b)
    return -_sq_dist(a, b) + _nonfinite_pairs(a, b)


def torus(a: ArrayLike, b: ArrayLike, *, p: int = 1) -> jax.Array:
    """Negative flat-torus distance −Σ_k δ_k^p, angles in turns (Stowell 2026, §4).

    ``δ_k = min(|a_k − b_k| mod 1, 1 − |a_k − b_k| mod 1)`` ∈ [0, ½], computed as ``|Δ − round(Δ)|`` with
    Δ = a_k − b_k; p = 1 is the L1 distance, p = 2 the *squared* L2 distance.

    Args:
        a: [N, D] floating angles in turns (any real values; they are read mod 1).
        b: [M, D] floating angles in turns, the same width D.
        p: 1 or 2, the exponent of each coordinate's distance.

    Returns:
        [N, M] fp32 similarities in [−D/2^p, 0]; entry (i, j) is NaN when row a_i or row b_j holds a NaN or
        ±Inf.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty floating matrix, their widths differ, or ``p`` is not 1
            or 2.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import similarity
        >>> t = jnp.array([[0.1, 0.9], [0.5, 0.25]])
        >>> u = jnp.array([[0.9, 0.1]])
        >>> print(np.asarray(similarity.torus(t, u), np.float64).round(4))
        [[-0.4 ]
         [-0.55]]
        >>> print(np.asarray(similarity.torus(t, u, p=2), np.float64).round(4))
        [[-0.08  ]
         [-0.1825]]
    """
    _check_pair(a, b)
    _checks.check_choice(p, "p", (1, 2))
    diff = jnp.asarray(a, jnp.float32)[:, None, :] - jnp.asarray(b, jnp.float32)[None, :, :]
    per_dim = jnp.abs(diff - jnp.round(diff))
    return -jnp.sum(per_dim if p == 1 else jnp.square(per_dim), axis=-1) + _nonfinite_pairs(a, b)


ChartDistance = Literal["euclidean", "mean_squared"]
CHART_DISTANCES: tuple[str, ...] = get_args(ChartDistance)


def manifold_distance(
    coords_a: ArrayLike,
    q_a: ArrayLike,
    coords_b: ArrayLike,
    q_b: ArrayLike,
    *,
    no_overlap: float = math.inf,
    chart_distance: ChartDistance = "euclidean",
) -> jax.Array:
    """Atlas semi-metric d_M of Korman (2021, eq. 7) on pre-sigmoid chart coordinates.

    d_M(x, y) = Σ_i q_i(x) q_i(y) d0(φ_i(x), φ_i(y)) / Σ_i q_i(x) q_i(y), and ``no_overlap`` where the
    denominator is 0. ``chart_distance='euclidean'`` is the paper's MTriplet choice (§3.2),
    d0 = ‖σ⁻¹(x) − σ⁻¹(y)‖; ``'mean_squared'`` is the public neurve code's ‖σ⁻¹(x) − σ⁻¹(y)‖² / d (pass
    ``no_overlap=1.0`` too for its value on charts that do not overlap). Per-chart distances come from the
    coordinate differences (chart dimensions are small). The result is a *distance*: lower = closer; pass its
    negation where a similarity is expected. The sum over charts is a loop (``lax.scan``), so memory is
    O(N·M), not O(N·M·n) (3× faster at 1,024 × 60,000 × 16 charts on a CPU).

    Args:
        coords_a: [N, n, d] floating pre-sigmoid coordinates of N points in n charts of dimension d.
        q_a: [N, n] chart memberships of those points.
        coords_b: [M, n, d] floating pre-sigmoid coordinates, the same n and d.
        q_b: [M, n] chart memberships.
        no_overlap: the value where two points share no chart (default +∞; training passes a finite 10³ so
            losses stay finite).
        chart_distance: 'euclidean' (Korman 2021 §3.2) or 'mean_squared' (the neurve code's).

    Returns:
        [N, M] fp32 distances; entry (i, j) is NaN when row i's or row j's coordinates or memberships are not
        all finite.

    Raises:
        ValueError: a coordinate array is not a floating rank-3 array, a membership array is not [N, n] for
            its coordinates, the two sets differ in charts or dimension, or ``chart_distance`` is unknown.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), eq. 7 and §3.2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import similarity
        >>> coords_a = jnp.array([[[0.0, 0.0], [1.0, 1.0]]])  # one point, two charts of dimension 2
        >>> coords_b = jnp.array([[[3.0, 4.0], [1.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]]])
        >>> q_b = jnp.array([[1.0, 0.0], [0.0, 1.0]])
        >>> print(similarity.manifold_distance(coords_a, jnp.array([[1.0, 0.0]]), coords_b, q_b))
        [[ 5. inf]]
    """
    for c, q, tag in ((coords_a, q_a, "a"), (coords_b, q_b, "b")):
        _checks.check_rank(c, f"coords_{tag}", 3)
        _checks.check_floating(c, f"coords_{tag}")
        _checks.check_rank(q, f"q_{tag}", 2)
        if jnp.shape(q) != jnp.shape(c)[:2]:
            raise ValueError(
                f"q_{tag} must have shape {jnp.shape(c)[:2]} (coords_{tag}' [N, n]), got {jnp.shape(q)}"
            )
    if jnp.shape(coords_a)[1:] != jnp.shape(coords_b)[1:]:
        raise ValueError(
            f"coords_a and coords_b must agree in charts and dim, got {jnp.shape(coords_a)} and "
            f"{jnp.shape(coords_b)}"
        )
    _checks.check_choice(chart_distance, "chart_distance", CHART_DISTANCES)
    ca, cb = jnp.asarray(coords_a, jnp.float32), jnp.asarray(coords_b, jnp.float32)
    qa, qb = jnp.asarray(q_a, jnp.float32), jnp.asarray(q_b, jnp.float32)

    def add_chart(num: jax.Array, chart: tuple[jax.Array, ...]) -> tuple[jax.Array, None]:
        """num + q_c(x) q_c(y) d0(φ_c(x), φ_c(y)) for one chart c: [N, M] stays the only large array."""
        a, b, q_x, q_y = chart
        sq = pairwise_sq_diff(a, b)
        d0 = safe_sqrt(sq) if chart_distance == "euclidean" else sq / ca.shape[-1]
        return num + q_x[:, None] * q_y[None, :] * d0, None

    charts = (jnp.swapaxes(ca, 0, 1), jnp.swapaxes(cb, 0, 1), qa.T, qb.T)  # chart-major
    num, _ = lax.scan(add_chart, jnp.zeros((ca.shape[0], cb.shape[0]), jnp.float32), charts)
    den = _gram(qa, qb)
    overlap = den > 0.0
    d_m = jnp.where(overlap, num / jnp.where(overlap, den, 1.0), jnp.float32(no_overlap))
    rows_a = jnp.concatenate([ca.reshape(ca.shape[0], -1), qa], axis=1)
    rows_b = jnp.concatenate([cb.reshape(cb.shape[0], -1), qb], axis=1)
    return d_m + _nonfinite_pairs(rows_a, rows_b)


def compressed_manifold_distance(
    coords_a: ArrayLike, q_a: ArrayLike, coords_b: ArrayLike, q_b: ArrayLike
) -> jax.Array:
    """d_M between compressed atlas codes (Korman 2021, eq. 3 and §2.4).

    Each point lies in its most probable chart alone, so two points are d0(φ_i(x), φ_i(y)) =
    ‖σ⁻¹(x) − σ⁻¹(y)‖ apart when their most probable charts agree on i, and +∞ apart when they do not.

    The paper evaluates the compressed code (φ_i*(x), i*) because the full representation (φ_1(x), …,
    φ_n(x)) would be "cheating" into an nd-dimensional space (§2.4); this is eq. 7 with one-hot memberships
    (ties to the lower chart, as :func:`geojax.manifolds.atlas_code`).

    Args:
        coords_a: [N, n, d] floating pre-sigmoid coordinates of N points in n charts of dimension d.
        q_a: [N, n] chart memberships of those points.
        coords_b: [M, n, d] floating pre-sigmoid coordinates, the same n and d.
        q_b: [M, n] chart memberships.

    Returns:
        [N, M] fp32 distances, lower = closer; NaN where a row's coordinates or memberships are not all
        finite.

    Raises:
        ValueError: as :func:`manifold_distance`.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), eq. 3, eq. 7, §2.4 and §3.2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import similarity
        >>> coords = jnp.array([[[0.0, 0.0], [1.0, 1.0]], [[3.0, 4.0], [9.0, 9.0]], [[0.0, 0.0], [1.0, 1.0]]])
        >>> q = jnp.array([[0.6, 0.4], [0.9, 0.1], [0.4, 0.6]])  # most probable charts 0, 0, 1
        >>> print(similarity.compressed_manifold_distance(coords[:1], q[:1], coords, q))
        [[ 0.  5. inf]]
    """
    _checks.check_rank(q_a, "q_a", 2)
    _checks.check_rank(q_b, "q_b", 2)
    hard = [jax.nn.one_hot(jnp.argmax(jnp.asarray(q), axis=-1), jnp.shape(q)[-1]) for q in (q_a, q_b)]
    d_m = manifold_distance(coords_a, hard[0], coords_b, hard[1])
    return d_m + _nonfinite_pairs(jnp.asarray(q_a, jnp.float32), jnp.asarray(q_b, jnp.float32))


_BY_NAME: dict[str, Similarity] = {
    "cosine": cosine,
    "neg_arc_length": neg_arc_length,
    "neg_euclidean": neg_euclidean,
    "neg_sq_euclidean": neg_sq_euclidean,
    "dot": dot,
    "torus": torus,
}


def get(name: str | Similarity) -> Similarity:
    """The similarity function for ``name``; a callable is returned unchanged.

    Args:
        name: one of ``names()`` or a callable (a [N, D], b [M, D]) → [N, M].

    Returns:
        The similarity function.

    Raises:
        ValueError: ``name`` is a string that is not one of ``names()``.

    Example:
        >>> from geojax import similarity
        >>> similarity.get("cosine") is similarity.cosine
        True
    """
    if callable(name):
        return name
    _checks.check_choice(name, "similarity", tuple(_BY_NAME))
    return _BY_NAME[name]


def names() -> tuple[str, ...]:
    """Names accepted by ``get``.

    Returns:
        The names, ``geojax.similarity.SIMILARITIES``.

    Example:
        >>> from geojax import similarity
        >>> similarity.names()
        ('cosine', 'neg_arc_length', 'neg_euclidean', 'neg_sq_euclidean', 'dot', 'torus')
    """
    return SIMILARITIES


def retrieval_similarity(geometry: str, trained_with: str) -> str:
    """The similarity that ranks embeddings of ``geometry`` at evaluation time, as a name.

    Read from the geometry's record (:mod:`geojax.geometries`). Unit-norm geometries (``sphere``, ``torus_c``,
    ``torus_n``) rank by ``cosine``: on unit vectors the negative arc length and the (squared) Euclidean
    distance give the same order. Other vector geometries (``euclidean``) rank by the vector similarity they
    were trained with (``neg_euclidean`` when that was not one, e.g. SimO); an atlas ranks by ``manifold``
    (−d_M, Korman 2021 eq. 7, on chart coordinates and memberships).

    Args:
        geometry: a registered geometry's name (:func:`geojax.geometries.names`).
        trained_with: the name of the similarity (or loss) the embeddings were trained with.

    Returns:
        A name of ``names()``, or ``'manifold'`` for an atlas.

    Raises:
        ValueError: ``geometry`` is unknown.

    Example:
        >>> from geojax import similarity
        >>> similarity.retrieval_similarity("sphere", "neg_euclidean")
        'cosine'
        >>> similarity.retrieval_similarity("euclidean", "simo")
        'neg_euclidean'
    """
    record = geometries.get(geometry)
    if record.is_atlas:
        return "manifold"
    if record.unit_norm:
        return "cosine"
    return trained_with if trained_with in SIMILARITIES and trained_with != "torus" else "neg_euclidean"
