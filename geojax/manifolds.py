"""Projections onto the embedding manifolds: hypersphere, Clifford torus, flat torus, atlas of charts.

Conventions (docs/conventions.md): flat-torus angles are in *turns*, t ∈ [0, 1). The Clifford layout stores
adjacent pairs (cos 2πt_k, sin 2πt_k), scaled so that the whole vector has unit norm. An output entry
computed from a NaN or ±Inf input entry is NaN.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks
from geojax._numerics import nan_where_nonfinite, safe_normalize

# Where embeddings live: raw vectors, the unit hypersphere, the Clifford torus parametrised by angles
# (torusC) or by pairwise-normalised vectors (torusN), or an atlas of charts.
Geometry = Literal["euclidean", "sphere", "torus_c", "torus_n", "atlas"]
GEOMETRIES: tuple[str, ...] = get_args(Geometry)
TORUS_GEOMETRIES: tuple[str, ...] = ("torus_c", "torus_n")  # the flat-torus heads (Stowell 2026 eqs. 2, 3)
VECTOR_GEOMETRIES: tuple[str, ...] = tuple(g for g in GEOMETRIES if g != "atlas")  # one vector per input


def sphere(x: ArrayLike) -> jax.Array:
    """L2 normalisation onto the unit hypersphere S^{D-1} (Stowell 2026, Table 1).

    x: [..., D] → [..., D] with unit norm (zero rows stay zero, gradient finite).
    """
    _checks.check_min_rank(x, "x", 1)
    _checks.check_floating(x, "x")
    return safe_normalize(x)


def wrap(t: ArrayLike) -> jax.Array:
    """Wrap angles in turns onto the flat torus [0, 1) (t mod 1, never returning 1.0 after rounding).

    t: [...] → [...].
    """
    _checks.check_floating(t, "t")
    t = jnp.asarray(t)
    r = t - jnp.floor(t)
    return jnp.where(r >= 1.0, jnp.zeros_like(r), r)


def torus_clifford(t: ArrayLike) -> jax.Array:
    """torusC: the Clifford projection of Stowell (2026, eq. 2), angles in turns, pairs (cos, sin), scale
    √(1/D). The paper writes each pair as (sin, cos) and its public code puts all cosines before all sines;
    see docs/conventions.md for the conversion (dot products and distances are the same in every layout).

    t: [..., D] turns → [..., 2D] on the Clifford torus (unit norm).
    """
    _checks.check_min_rank(t, "t", 1)
    _checks.check_floating(t, "t")
    t = jnp.asarray(t)
    d = t.shape[-1]
    angle = (2.0 * math.pi) * t
    pairs = jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=-1)
    return pairs.reshape(*t.shape[:-1], 2 * d) * math.sqrt(1.0 / d)


angles_to_clifford = torus_clifford


def torus_l2p(x: ArrayLike) -> jax.Array:
    """torusN: pairwise L2 normalisation of Stowell (2026, eq. 3), each adjacent pair to norm √(2/D).

    x: [..., D] (D even) → [..., D] on the Clifford torus. The identity on Clifford vectors. A zero pair
    stays zero (finite gradient).
    """
    _checks.check_min_rank(x, "x", 1)
    _checks.check_floating(x, "x")
    x = jnp.asarray(x)
    d = x.shape[-1]
    _checks.check_even(d, "x.shape[-1]")
    pairs = safe_normalize(x.reshape(*x.shape[:-1], d // 2, 2))
    return pairs.reshape(x.shape) * math.sqrt(2.0 / d)


def clifford_to_angles(z: ArrayLike) -> jax.Array:
    """Flat-torus angles of a Clifford vector: atan2(z[2k+1], z[2k]) / 2π mod 1 (Stowell 2026, §4).

    z: [..., 2K] → [..., K] turns in [0, 1). Inverse of ``torus_clifford``; used on torusN outputs too.
    A zero pair, whose angle is undefined, gives angle 0 with a zero gradient; any other pair, however
    small, gets atan2's own gradient (the pair is rescaled by its larger magnitude first). A pair holding
    NaN or ±Inf gives NaN.
    """
    _checks.check_min_rank(z, "z", 1)
    _checks.check_floating(z, "z")
    z = jnp.asarray(z)
    _checks.check_even(z.shape[-1], "z.shape[-1]")
    pairs = z.reshape(*z.shape[:-1], z.shape[-1] // 2, 2)
    # atan2 is scale-invariant, so its gradient is orthogonal to the pair and holding the scale constant is
    # exact; on the rescaled pair (largest magnitude 1) the gradient is finite. A zero pair reads (1, 0).
    scale = lax.stop_gradient(jnp.max(jnp.abs(pairs), axis=-1, keepdims=True))
    zero = scale == 0
    unit = jnp.where(zero, jnp.array([1.0, 0.0], pairs.dtype), pairs / jnp.where(zero, 1.0, scale))
    turns = jnp.where(zero[..., 0], 0.0, jnp.arctan2(unit[..., 1], unit[..., 0]) / (2.0 * math.pi))
    return wrap(turns + nan_where_nonfinite(pairs, axis=-1, dtype=turns.dtype))


def atlas_split(h: ArrayLike, *, charts: int, dim: int) -> tuple[jax.Array, jax.Array]:
    """Split an atlas head's raw output into chart coordinates and memberships (Korman 2021, §2.1, §2.4).

    h: [..., charts·dim + charts] → (coords [..., charts, dim] pre-sigmoid, q [..., charts] softmax).
    Chart i's coordinate map is φ_i = sigmoid(coords[..., i, :]) ∈ [0, 1]^dim. A NaN or ±Inf entry of h
    gives NaN in its coordinate, or in every membership of its row.
    """
    _checks.check_positive_int(charts, "charts")
    _checks.check_positive_int(dim, "dim")
    _checks.check_min_rank(h, "h", 1)
    _checks.check_floating(h, "h")
    h = jnp.asarray(h)
    want = charts * dim + charts
    if h.shape[-1] != want:
        raise ValueError(f"h.shape[-1] must be charts*dim + charts = {want}, got {h.shape[-1]}")
    coords = h[..., : charts * dim].reshape(*h.shape[:-1], charts, dim)
    coords = coords + nan_where_nonfinite(coords, axis=(), dtype=coords.dtype)  # ±Inf → NaN
    q = jax.nn.softmax(h[..., charts * dim :].astype(jnp.float32), axis=-1)
    return coords, q


def atlas_code(coords: ArrayLike, q: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Compressed atlas code (Korman 2021, §2.1): coordinates in the most probable chart and its index.

    coords: [N, n, d] pre-sigmoid, q: [N, n] → (sigmoid(coords[i, i*]) [N, d], i* [N] int32), i* = argmax q
    (ties to the lower chart). A row whose memberships are not all finite gets a NaN code (its index is
    then meaningless); a non-finite coordinate of the chosen chart gives NaN in that entry.
    """
    _checks.check_rank(coords, "coords", 3)
    _checks.check_rank(q, "q", 2)
    coords, q = jnp.asarray(coords), jnp.asarray(q)
    if q.shape != coords.shape[:2]:
        raise ValueError(f"q must have shape {coords.shape[:2]} (coords' [N, n]), got {q.shape}")
    chart = jnp.argmax(q, axis=-1).astype(jnp.int32)
    chosen = jnp.take_along_axis(coords, chart[:, None, None], axis=1)[:, 0]
    code = jax.nn.sigmoid(chosen)
    bad = nan_where_nonfinite(q, axis=-1, dtype=code.dtype)[:, None] + nan_where_nonfinite(chosen, axis=())
    return code + bad.astype(code.dtype), chart
