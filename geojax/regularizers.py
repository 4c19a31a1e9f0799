"""Distribution regularisers: KoLeo (DINOv2 form) and the atlas MMD / membership terms of seed 001 §2.2.

Every regulariser takes an optional ``axis_name``. Inside ``jax.shard_map`` / ``jax.pmap`` over that named
axis, each device passes its local rows; the keys of the pairwise terms are all-gathered from every device and
the numerators and counts are summed with ``lax.psum``, so the value on every device equals the value of the
single-device call on the concatenated batch (and, with ``check_vma`` on, the gradient w.r.t. the local rows
equals that block of the single-device gradient). Circular variance lives in :mod:`geojax.metrics`.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Hashable

import jax
import jax.numpy as jnp
from jax import lax

from geojax import _checks

_F32 = jnp.float32
# Full-fp32 products (no TF32/bf16 passes on GPU/TPU): the Gram expansion of ‖a − b‖² cancels, and KoLeo's
# nearest neighbour should not flip with the backend. These matrices are small (one batch).
_EXACT = lax.Precision.HIGHEST
# Below any cosine of unit (or zero) rows, so a masked self-pair never wins the max.
_SELF_DOT = -3.0
# Distances between unit float32 rows below this are rounding noise (XLA fusions may normalise two equal
# rows to values a few ulp apart); KoLeo counts them as 0 so duplicates give log(eps) under jit too.
_UNIT_RESOLUTION = 2.0 * float(jnp.finfo(jnp.float32).eps)


def _safe_norm(v: jax.Array, floor: float = 0.0) -> jax.Array:
    """Euclidean norm over the last axis, 0 with gradient 0 (not NaN) where it is ≤ floor. v: [..., D] ->
    [...]."""
    sq = jnp.sum(v * v, axis=-1)
    pos = sq > floor * floor
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def _keys_and_offset(x: jax.Array, axis_name: Hashable | None) -> tuple[jax.Array, jax.Array | int]:
    """Rows of every device along ``axis_name`` (x itself if None) and this device's first global row.

    x: [n, ...] -> keys [n * devices, ...], offset (scalar).
    """
    if axis_name is None:
        return x, 0
    keys = lax.all_gather(x, axis_name, tiled=True)
    return keys, lax.axis_index(axis_name) * x.shape[0]


def _global_sum(v: jax.Array, axis_name: Hashable | None) -> jax.Array:
    return v if axis_name is None else lax.psum(v, axis_name)


def _global_count(n: int, axis_name: Hashable | None) -> int:
    return n if axis_name is None else n * lax.axis_size(axis_name)


def _not_self(n: int, m: int, offset) -> jax.Array:
    """[n, m] mask, False where column == offset + row (the row's own key)."""
    return jnp.arange(m)[None, :] != (offset + jnp.arange(n))[:, None]


@functools.partial(jax.jit, static_argnames=("eps", "axis_name"))
def koleo(x: jax.Array, *, eps: float = 1e-8, axis_name: Hashable | None = None) -> jax.Array:
    """KoLeo regulariser (Sablayrolles et al. 2019; DINOv2 form): −mean_i log(‖x̂_i − x̂_nn(i)‖ + eps).

    Rows are L2-normalised (x̂ = x / max(‖x‖, eps)); nn(i) is the row of largest dot product with x̂_i,
    itself excluded, ties to the lower index. Duplicate rows give distance 0 (log eps, zero gradient;
    distances under 2.4e-7, float32 rounding of unit rows, count as 0) and zero rows stay zero, so gradients
    are finite at both edges.

    x: [N, D] (N ≥ 2 in total) -> scalar float32. With ``axis_name``, x is this device's [n, D] block and the
    nearest neighbour is searched over the rows of all devices.
    """
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    if axis_name is None and x.shape[0] < 2:
        raise ValueError(f"x must have at least 2 rows (a nearest neighbour besides itself), got {x.shape}")
    _check_positive_float(eps, "eps")
    x = x.astype(_F32)
    u = x / jnp.maximum(_safe_norm(x), eps)[:, None]
    keys, offset = _keys_and_offset(u, axis_name)
    dots = jnp.matmul(u, keys.T, precision=_EXACT, preferred_element_type=_F32)
    dots = jnp.where(_not_self(u.shape[0], keys.shape[0], offset), dots, _SELF_DOT)
    nn = jnp.argmax(lax.stop_gradient(dots), axis=1)
    log_d = jnp.log(_safe_norm(u - keys[nn], _UNIT_RESOLUTION) + eps)
    return -_global_sum(jnp.sum(log_d), axis_name) / _global_count(u.shape[0], axis_name)


@functools.partial(jax.jit, static_argnames=("m", "d"))
def sample_prior(key: jax.Array, m: int, d: int) -> jax.Array:
    """Uniform prior on [0, 1]^d pulled back to pre-sigmoid space (seed 001 §2.2): logit(U(0, 1)).

    U is clipped to [ε, 1 − ε] (ε = float32 machine epsilon) so the sample is finite (|w| ≤ 15.95).
    Returns [m, d] float32.
    """
    _checks.check_positive_int(m, "m")
    _checks.check_positive_int(d, "d")
    tiny = float(jnp.finfo(_F32).eps)
    u = jnp.clip(jax.random.uniform(key, (m, d), _F32), tiny, 1.0 - tiny)
    return jnp.log(u) - jnp.log1p(-u)


def _imq(a: jax.Array, b: jax.Array, c: float) -> jax.Array:
    """Inverse multiquadric kernel C / (C + ‖a − b‖²) on the last axis. a: [..., N, d], b: [..., M, d] ->
    [..., N, M] float32 (full fp32 products; the squared distance is clamped at 0)."""
    sq = (
        jnp.sum(a * a, axis=-1)[..., :, None]
        + jnp.sum(b * b, axis=-1)[..., None, :]
        - 2.0 * jnp.einsum("...nd,...md->...nm", a, b, precision=_EXACT, preferred_element_type=_F32)
    )
    return c / (c + jnp.maximum(sq, 0.0))


@functools.partial(jax.jit, static_argnames=("c", "axis_name"))
def mmd_atlas(
    coords: jax.Array,
    q: jax.Array,
    prior: jax.Array,
    *,
    c: float | None = None,
    axis_name: Hashable | None = None,
) -> jax.Array:
    """Atlas MMD ℓ_Z (seed 001 eq. 5): MMD² between the q-weighted chart codes and the uniform prior.

    With k0(x, y) = C / (C + ‖x − y‖²), C = d/6 (IMQ kernel on pre-sigmoid coordinates), n charts, N data
    points x_j and M prior points w_k::

        ℓ_Z = 1/(N(N−1)) Σ_{j≠k} Σ_i q_i(x_j) q_i(x_k) k0(φ_i(x_j), φ_i(x_k))
            − 2/(n N M)   Σ_{j,k} Σ_i q_i(x_j) k0(φ_i(x_j), w_k)
            + 1/(n M(M−1)) Σ_{j≠k} k0(w_j, w_k)

    (U-statistics within, plain mean across; eq. 5 has M = N). With one chart and q ≡ 1 this is the plain
    MMD of seed 001 §3.2.2.

    coords: [N, n, d] pre-sigmoid chart coordinates φ_i(x_j); q: [N, n] memberships; prior: [M, d] (M ≥ 2),
    e.g. ``sample_prior(key, M, d)``; c: kernel constant C (None means d/6). Returns a float32 scalar.
    With ``axis_name``, coords and q are this device's rows; ``prior`` must be the same on every device (draw
    it from a replicated key); the value equals the single-device call on the concatenated rows.
    """
    _checks.check_rank(coords, "coords", 3)
    _checks.check_floating(coords, "coords")
    _checks.check_rank(q, "q", 2)
    _checks.check_floating(q, "q")
    if q.shape != coords.shape[:2]:
        raise ValueError(f"q must have shape {coords.shape[:2]} (coords' [N, n]), got {q.shape}")
    _checks.check_matrix(prior, "prior")
    _checks.check_floating(prior, "prior")
    _checks.check_same_width(coords, prior, "coords", "prior")
    if prior.shape[0] < 2:
        raise ValueError(f"prior must have at least 2 rows (U-statistic), got {prior.shape}")
    if 0 in coords.shape or (axis_name is None and coords.shape[0] < 2):
        raise ValueError(f"coords must have at least 2 rows and non-empty n, d, got {coords.shape}")
    n_local, charts, d = coords.shape
    c = d / 6.0 if c is None else c
    _check_positive_float(c, "c")

    x = jnp.swapaxes(coords.astype(_F32), 0, 1)  # [n, N_local, d]
    qt = q.astype(_F32).T  # [n, N_local]
    w = prior.astype(_F32)
    keys_x, offset = _keys_and_offset(coords.astype(_F32), axis_name)
    keys_q, _ = _keys_and_offset(q.astype(_F32), axis_name)
    keys_x, keys_q = jnp.swapaxes(keys_x, 0, 1), keys_q.T  # [n, N, d], [n, N]
    n_total = _global_count(n_local, axis_name)
    m = w.shape[0]

    within = jnp.where(_not_self(n_local, n_total, offset), _imq(x, keys_x, c), 0.0)  # [n, N_local, N]
    data_data = _global_sum(jnp.einsum("ij,ijk,ik->", qt, within, keys_q), axis_name)
    data_prior = _global_sum(jnp.einsum("ij,ijk->", qt, _imq(x, w, c)), axis_name)
    prior_prior = jnp.sum(jnp.where(_not_self(m, m, 0), _imq(w, w, c), 0.0))
    return (
        data_data / (n_total * (n_total - 1))
        - 2.0 * data_prior / (charts * n_total * m)
        + prior_prior / (charts * m * (m - 1))
    )


@functools.partial(jax.jit, static_argnames=("axis_name",))
def membership(q: jax.Array, *, axis_name: Hashable | None = None) -> jax.Array:
    """Membership regulariser ℓ_J (seed 001 §2.2): −mean_x Σ_i (q_i(x) − 1/n)².

    Minimising it pushes each q(x) away from uniform (towards one chart). q: [N, n] -> float32 scalar; with
    ``axis_name`` the mean runs over the rows of all devices.
    """
    _checks.check_matrix(q, "q")
    _checks.check_floating(q, "q")
    q = q.astype(_F32)
    total = jnp.sum(jnp.square(q - 1.0 / q.shape[1]))
    return -_global_sum(total, axis_name) / _global_count(q.shape[0], axis_name)


def _check_positive_float(v, name: str) -> None:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not v > 0:
        raise ValueError(f"{name} must be a positive number, got {v!r}")
