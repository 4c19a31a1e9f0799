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
# (torusC) or by pairwise-normalised vectors (torusN), or an atlas of charts. These are the built-in names;
# what each geometry is, and any geometry registered later, is its record in geojax.geometries.
Geometry = Literal["euclidean", "sphere", "torus_c", "torus_n", "atlas"]
GEOMETRIES: tuple[str, ...] = get_args(Geometry)
TORUS_GEOMETRIES: tuple[str, ...] = ("torus_c", "torus_n")  # the flat-torus heads (Stowell 2026 eqs. 2, 3)
VECTOR_GEOMETRIES: tuple[str, ...] = tuple(g for g in GEOMETRIES if g != "atlas")  # one vector per input


def sphere(x: ArrayLike) -> jax.Array:
    """L2 normalisation onto the unit hypersphere S^{D-1} (Stowell 2026, Table 1).

    x / ‖x‖ along the last axis, the norm taken in fp32; a zero row stays zero with a finite gradient, and a
    row holding a NaN or ±Inf comes out all NaN.

    Args:
        x: [..., D] floating vectors.

    Returns:
        [..., D] unit-norm vectors, the dtype of ``x``.

    Raises:
        ValueError: ``x`` has rank 0 or a non-floating dtype.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> print(manifolds.sphere(jnp.array([[3.0, 4.0], [0.0, 0.0]])))
        [[0.6 0.8]
         [0.  0. ]]
    """
    _checks.check_min_rank(x, "x", 1)
    _checks.check_floating(x, "x")
    return safe_normalize(x)


def wrap(t: ArrayLike) -> jax.Array:
    """Wrap angles in turns onto the flat torus [0, 1).

    t − ⌊t⌋, never returning 1.0 after rounding; a NaN or ±Inf entry gives NaN.

    Args:
        t: [...] floating angles in turns, any real values.

    Returns:
        [...] turns in [0, 1), the dtype of ``t``.

    Raises:
        ValueError: ``t`` has a non-floating dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> print(manifolds.wrap(jnp.array([1.25, -0.25, 0.0, 1.0])))
        [0.25 0.75 0.   0.  ]
    """
    _checks.check_floating(t, "t")
    t = jnp.asarray(t)
    r = t - jnp.floor(t)
    return jnp.where(r >= 1.0, jnp.zeros_like(r), r)


def torus_clifford(t: ArrayLike) -> jax.Array:
    """torusC: the Clifford projection of Stowell (2026, eq. 2), angles in turns.

    Each angle t_k becomes the **adjacent pair** (cos 2πt_k, sin 2πt_k) at positions (2k, 2k+1), all scaled
    by √(1/D) so the vector has unit norm; the dot product of two such vectors is (1/D) Σ_k cos 2π(t_k −
    t′_k). The paper writes each pair as (sin, cos) and its public code puts all cosines before all sines; see
    docs/conventions.md for the conversion (dot products and distances are the same in every layout).
    ``angles_to_clifford`` is another name for this function.

    Args:
        t: [..., D] floating angles in turns.

    Returns:
        [..., 2D] points on the Clifford torus (unit norm).

    Raises:
        ValueError: ``t`` has rank 0 or a non-floating dtype.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), eq. 2.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> z = manifolds.torus_clifford(jnp.array([[0.0, 0.25]]))
        >>> print(np.asarray(z, np.float64).round(4) + 0.0)
        [[0.7071 0.     0.     0.7071]]
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

    Each adjacent pair (x_{2k}, x_{2k+1}) is normalised to norm √(2/D), so the vector has unit norm and lies
    on the Clifford torus. The identity on Clifford vectors. A zero pair stays zero (finite gradient).

    Args:
        x: [..., D] floating raw vectors, D even.

    Returns:
        [..., D] points on the Clifford torus.

    Raises:
        ValueError: ``x`` has rank 0, a non-floating dtype or an odd last dimension.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), eq. 3.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> print(np.asarray(manifolds.torus_l2p(jnp.array([[3.0, 4.0, 0.0, 2.0]])), np.float64).round(4))
        [[0.4243 0.5657 0.     0.7071]]
    """
    _checks.check_min_rank(x, "x", 1)
    _checks.check_floating(x, "x")
    x = jnp.asarray(x)
    d = x.shape[-1]
    _checks.check_even(d, "x.shape[-1]")
    pairs = safe_normalize(x.reshape(*x.shape[:-1], d // 2, 2))
    return pairs.reshape(x.shape) * math.sqrt(2.0 / d)


def clifford_to_angles(z: ArrayLike) -> jax.Array:
    """Flat-torus angles of a Clifford vector: atan2(z_{2k+1}, z_{2k}) / 2π mod 1 (Stowell 2026, §4).

    Inverse of ``torus_clifford``; used on torusN outputs too. A zero pair, whose angle is undefined, gives
    angle 0 with a zero gradient; any other pair, however small, gets atan2's own gradient (the pair is
    rescaled by its larger magnitude first). A pair holding NaN or ±Inf gives NaN.

    Args:
        z: [..., 2K] floating Clifford (or torusN) vectors.

    Returns:
        [..., K] turns in [0, 1).

    Raises:
        ValueError: ``z`` has rank 0, a non-floating dtype or an odd last dimension.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> z = manifolds.torus_clifford(jnp.array([[0.0, 0.25]]))
        >>> print(manifolds.clifford_to_angles(z))
        [[0.   0.25]]
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

    Chart i's coordinate map is φ_i = sigmoid(coords[..., i, :]) ∈ [0, 1]^dim; the memberships are a softmax
    (in fp32) over the last ``charts`` entries. A NaN or ±Inf entry of h gives NaN in its coordinate, or in
    every membership of its row.

    Args:
        h: [..., charts·dim + charts] floating raw head output.
        charts: n, the number of charts (a positive int).
        dim: d, each chart's dimension (a positive int).

    Returns:
        (coords [..., charts, dim] pre-sigmoid coordinates, q [..., charts] fp32 memberships summing to 1).

    Raises:
        ValueError: ``charts`` or ``dim`` is not a positive int, ``h`` has rank 0 or a non-floating dtype, or
            its last dimension is not charts·dim + charts.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §2.1 and §2.4.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> coords, q = manifolds.atlas_split(jnp.arange(6.0), charts=2, dim=2)
        >>> coords.shape, q.shape
        ((2, 2), (2,))
        >>> print(np.asarray(q, np.float64).round(4))
        [0.2689 0.7311]
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

    i* = argmax q (ties to the lower chart); the code is sigmoid(coords[i, i*]). A row whose memberships are
    not all finite gets a NaN code (its index is then meaningless); a non-finite coordinate of the chosen
    chart gives NaN in that entry.

    Args:
        coords: [N, n, d] pre-sigmoid chart coordinates.
        q: [N, n] chart memberships.

    Returns:
        (code [N, d] in [0, 1], i* [N] int32 chart index).

    Raises:
        ValueError: ``coords`` is not rank 3, ``q`` not rank 2, or ``q``'s shape is not coords' [N, n].

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §2.1.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from geojax import manifolds
        >>> coords = jnp.array([[[0.0, 0.0], [0.0, 2.0]]])
        >>> code, chart = manifolds.atlas_code(coords, jnp.array([[0.3, 0.7]]))
        >>> print(np.asarray(code, np.float64).round(4), chart)
        [[0.5    0.8808]] [1]
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
