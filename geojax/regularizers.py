"""Distribution regularisers: KoLeo (Sablayrolles et al. 2019, DINOv2 form) and the atlas MMD and membership
terms of Korman (2021, §2.2).

Every regulariser takes an optional ``axis_name``. Inside ``jax.shard_map`` / ``jax.pmap`` over that named
axis, each device passes its local rows; the keys of the pairwise terms are all-gathered from every device
(:func:`geojax.parallel.gather`) and the numerators and counts are summed with
:func:`geojax.parallel.global_sum`, so the value on every device equals the value of the single-device call
on the concatenated batch (and, with ``check_vma`` on, the gradient w.r.t. the local rows equals that block
of the single-device gradient). A NaN or ±Inf anywhere in an input makes the value NaN. Circular variance
lives in :mod:`geojax.metrics`. Formulas: docs/conventions.md.
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, parallel
from geojax._numerics import nan_where_nonfinite, pairwise_sq_diff, safe_norm

_F32 = jnp.float32
# Full-fp32 products (no TF32/bf16 passes on GPU/TPU) for KoLeo's nearest-neighbour search, so that the
# neighbour does not flip with the backend. These matrices are small (one batch).
_EXACT = lax.Precision.HIGHEST
# Below any cosine of unit (or zero) rows, so a masked self-pair never wins the max.
_SELF_DOT = -3.0
# Distances between unit float32 rows below this are rounding noise (XLA fusions may normalise two equal
# rows to values a few ulp apart); KoLeo counts them as 0 so duplicates give log(eps) under jit too.
_UNIT_RESOLUTION = 2.0 * float(jnp.finfo(jnp.float32).eps)


def _koleo_view(u: jax.Array, eps: float, axis_name: str | None) -> jax.Array:
    """KoLeo of one view: u [n, D] unit (or zero) rows of this device → scalar over all devices' rows."""
    keys = parallel.gather(u, axis_name)
    own = parallel.self_index(u.shape[0], axis_name)
    dots = jnp.matmul(u, keys.T, precision=_EXACT, preferred_element_type=_F32)
    dots = jnp.where(jnp.arange(keys.shape[0])[None, :] == own[:, None], _SELF_DOT, dots)
    nn = jnp.argmax(lax.stop_gradient(dots), axis=1)
    log_d = jnp.log(safe_norm(u - keys[nn], floor=_UNIT_RESOLUTION) + eps)
    return -parallel.global_sum(jnp.sum(log_d), axis_name) / keys.shape[0]


def koleo(x: ArrayLike, *, eps: float = 1e-8, views: int = 1, axis_name: str | None = None) -> jax.Array:
    """KoLeo regulariser (Sablayrolles et al. 2019; DINOv2 form): −mean_i log(‖x̂_i − x̂_nn(i)‖ + eps).

    Rows are L2-normalised (x̂ = x / max(‖x‖, eps)); nn(i) is the row of largest dot product with x̂_i, itself
    excluded, ties to the lower index. Duplicate rows give distance 0 (log eps, zero gradient; distances under
    2.4e-7, float32 rounding of unit rows, count as 0) and zero rows stay zero, so gradients are finite at
    both edges. ``views=V`` splits the rows into V consecutive blocks of equal size (the views of one batch,
    view-major) and sums the KoLeo of each block, so that a row's other views are never its neighbour —
    DINOv2's and Stowell's (2026) public code; ``views=1`` treats all rows as one set. DINOv2 uses eps = 1e-8,
    the torus code 1e-6 (docs/conventions.md).

    Args:
        x: [N, D] floating rows, N = V·n with n ≥ 2 rows per view in total. With ``axis_name``, this device's
            [N_local, D] block (also view-major).
        eps: ε > 0 of the normalisation and the log.
        views: V, the number of view-major blocks (a positive int dividing N).
        axis_name: named mapped axis; each row's neighbour is then searched over the same view's rows of all
            devices. None on one device.

    Returns:
        float32 scalar; NaN when ``x`` holds a NaN or ±Inf.

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix; ``views`` is not a positive int dividing N;
            ``eps`` is not a positive number; fewer than 2 rows per view (without ``axis_name``).

    References:
        Sablayrolles et al. 2019, "Spreading vectors for similarity search" (arXiv 1806.03198), eq. 4; Oquab
        et al. 2023, "DINOv2" (arXiv 2304.07193).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import regularizers
        >>> x = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
        >>> round(float(regularizers.koleo(x)), 4)  # −log √2
        -0.3466
        >>> round(float(regularizers.koleo(x, views=2)), 4)
        -0.6931
    """
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    _checks.check_positive_int(views, "views")
    _check_positive_float(eps, "eps")
    n, d = jnp.shape(x)
    if n % views:
        raise ValueError(f"x must have a multiple of views = {views} rows, got {n}")
    if axis_name is None and n // views < 2:
        raise ValueError(f"x must have at least 2 rows per view (a neighbour besides itself), got {n}")
    x = jnp.asarray(x, _F32)
    u = x / jnp.maximum(safe_norm(x, keepdims=True), eps)
    per_view = jax.vmap(functools.partial(_koleo_view, eps=eps, axis_name=axis_name))(u.reshape(views, -1, d))
    return jnp.sum(per_view) + parallel.global_sum(nan_where_nonfinite(x), axis_name)


def sample_prior(key: jax.Array, m: int, d: int) -> jax.Array:
    """Uniform prior on [0, 1]^d pulled back to pre-sigmoid space (Korman 2021, §2.2): logit(U(0, 1)).

    U is clipped to [ε, 1 − ε] (ε = float32 machine epsilon) so the sample is finite (``|w| ≤ 15.95``).

    Args:
        key: a JAX PRNG key.
        m: the number of prior points (a positive int).
        d: the chart dimension (a positive int).

    Returns:
        [m, d] float32 prior points w.

    Raises:
        ValueError: ``m`` or ``d`` is not a positive int.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §2.2.

    Example:
        >>> import jax
        >>> from geojax import regularizers
        >>> w = regularizers.sample_prior(jax.random.key(0), 4, 2)
        >>> w.shape, w.dtype
        ((4, 2), dtype('float32'))
    """
    _checks.check_positive_int(m, "m")
    _checks.check_positive_int(d, "d")
    tiny = float(jnp.finfo(_F32).eps)
    u = jnp.clip(jax.random.uniform(key, (m, d), _F32), tiny, 1.0 - tiny)
    return jnp.log(u) - jnp.log1p(-u)


def _imq(a: jax.Array, b: jax.Array, c: float) -> jax.Array:
    """Inverse multiquadric kernel C / (C + ‖a − b‖²) on the last axis, from the coordinate differences.
    a: [..., N, d], b: [..., M, d] -> [..., N, M] float32 (chart dimensions d are small)."""
    return c / (c + pairwise_sq_diff(a, b))


def mmd_atlas(
    coords: ArrayLike,
    q: ArrayLike,
    prior: ArrayLike,
    *,
    c: float | None = None,
    axis_name: str | None = None,
) -> jax.Array:
    """Atlas MMD ℓ_Z (Korman 2021, eq. 5): MMD² between the q-weighted chart codes and the uniform prior.

    With k0(x, y) = C / (C + ‖x − y‖²), C = d/6 (IMQ kernel on pre-sigmoid coordinates), n charts, N data
    points x_j and M prior points w_k::

        ℓ_Z = 1/(N(N−1)) Σ_{j≠k} Σ_i q_i(x_j) q_i(x_k) k0(φ_i(x_j), φ_i(x_k))
            − 2/(n N M)   Σ_{j,k} Σ_i q_i(x_j) k0(φ_i(x_j), w_k)
            + 1/(n M(M−1)) Σ_{j≠k} k0(w_j, w_k)

    (U-statistics within, plain mean across, Gretton et al. 2012; eq. 5 has M = N). With one chart and q ≡ 1
    this is the plain MMD of Korman (2021, §3.2.2).

    Args:
        coords: [N, n, d] floating pre-sigmoid chart coordinates φ_i(x_j) (N ≥ 2 without ``axis_name``); with
            ``axis_name``, this device's rows.
        q: [N, n] floating memberships.
        prior: [M, d] floating prior points (M ≥ 2), e.g. ``sample_prior(key, M, d)``; with ``axis_name`` the
            same on every device (draw it from a replicated key).
        c: the kernel constant C > 0; None means d/6.
        axis_name: named mapped axis (``jax.shard_map`` / ``jax.pmap``); each device passes its local rows and
            the value equals the single-device call on the concatenated batch. None on one device.

    Returns:
        float32 scalar; NaN when an input holds a NaN or ±Inf.

    Raises:
        ValueError: ``coords`` is not a floating rank-3 array with non-empty n, d (and ≥ 2 rows without
            ``axis_name``); ``q`` is not floating [N, n]; ``prior`` is not a floating matrix of ≥ 2 rows and
            width d; ``c`` is not a positive number.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), eq. 5 and §3.2.2; Gretton et al. 2012,
        "A Kernel Two-Sample Test" (JMLR 13), the U-statistic.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax import regularizers
        >>> prior = regularizers.sample_prior(jax.random.key(0), 4, 2)
        >>> value = regularizers.mmd_atlas(jnp.zeros((3, 2, 2)), jnp.full((3, 2), 0.5), prior)
        >>> value.shape, value.dtype
        ((), dtype('float32'))
    """
    _checks.check_rank(coords, "coords", 3)
    _checks.check_floating(coords, "coords")
    _checks.check_rank(q, "q", 2)
    _checks.check_floating(q, "q")
    if jnp.shape(q) != jnp.shape(coords)[:2]:
        raise ValueError(f"q must have shape {jnp.shape(coords)[:2]} (coords' [N, n]), got {jnp.shape(q)}")
    _checks.check_matrix(prior, "prior")
    _checks.check_floating(prior, "prior")
    _checks.check_same_width(coords, prior, "coords", "prior")
    if jnp.shape(prior)[0] < 2:
        raise ValueError(f"prior must have at least 2 rows (U-statistic), got {jnp.shape(prior)}")
    if 0 in jnp.shape(coords) or (axis_name is None and jnp.shape(coords)[0] < 2):
        raise ValueError(f"coords must have at least 2 rows and non-empty n, d, got {jnp.shape(coords)}")
    n_local, charts, d = jnp.shape(coords)
    c = d / 6.0 if c is None else c
    _check_positive_float(c, "c")

    coords, q, w = jnp.asarray(coords, _F32), jnp.asarray(q, _F32), jnp.asarray(prior, _F32)
    x, qt = jnp.swapaxes(coords, 0, 1), q.T  # [n, N_local, d], [n, N_local]
    keys_x = jnp.swapaxes(parallel.gather(coords, axis_name), 0, 1)  # [n, N, d]
    keys_q = parallel.gather(q, axis_name).T  # [n, N]
    n_total, m = keys_q.shape[1], w.shape[0]
    own = parallel.self_index(n_local, axis_name)

    not_self = jnp.arange(n_total)[None, :] != own[:, None]
    within = jnp.where(not_self, _imq(x, keys_x, c), 0.0)  # [n, N_local, N]
    local = (
        jnp.einsum("ij,ijk,ik->", qt, within, keys_q) / (n_total * (n_total - 1))
        - 2.0 * jnp.einsum("ij,ijk->", qt, _imq(x, w, c)) / (charts * n_total * m)
        + nan_where_nonfinite(coords)
        + nan_where_nonfinite(q)
    )
    prior_prior = jnp.sum(jnp.where(jnp.eye(m, dtype=bool), 0.0, _imq(w, w, c))) / (charts * m * (m - 1))
    return parallel.global_sum(local, axis_name) + prior_prior + nan_where_nonfinite(w)


def membership(q: ArrayLike, *, axis_name: str | None = None) -> jax.Array:
    """Membership regulariser ℓ_J (Korman 2021, §2.2): −mean_x Σ_i (q_i(x) − 1/n)².

    Minimising it pushes each q(x) away from uniform (towards one chart).

    Args:
        q: [N, n] floating memberships.
        axis_name: named mapped axis; the mean then runs over the rows of all devices. None on one device.

    Returns:
        float32 scalar; NaN when ``q`` holds a NaN or ±Inf.

    Raises:
        ValueError: ``q`` is not a non-empty floating matrix.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §2.2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import regularizers
        >>> float(regularizers.membership(jnp.array([[1.0, 0.0], [0.5, 0.5]])))
        -0.25
    """
    _checks.check_matrix(q, "q")
    _checks.check_floating(q, "q")
    q = jnp.asarray(q, _F32)
    total = jnp.sum(jnp.square(q - 1.0 / q.shape[1])) + nan_where_nonfinite(q)
    return -parallel.global_sum(total, axis_name) / parallel.global_sum(q.shape[0], axis_name)


def _check_positive_float(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not float(v) > 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")
