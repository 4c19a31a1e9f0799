"""The coarse quantiser of the inverted-file index (:mod:`geojax.search.ivf`): Lloyd's k-means on a codec's
coarse features in the embedding's own geometry, and the nearest list of each row.

On the torus the features are the Clifford pairs (cos 2πt_k, sin 2πt_k) of the code's angles and each
centroid pair is scaled back to unit length after the mean, i.e. circular means of the angles, with
assignment by Σ_k 2 − 2 cos 2πΔ_k, an increasing function of the wraparound distance Δ_k in every coordinate;
on the sphere features and centroids are unit vectors (spherical k-means); otherwise Euclidean k-means.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_ASSIGN_ROWS = 8192  # rows per block of the coarse assignment


@functools.partial(jax.jit, static_argnames=("nprobe",))
def nearest_lists(features: jax.Array, centroids: jax.Array, nprobe: int) -> jax.Array:
    """The ``nprobe`` lists whose centroids are nearest each row, nearest first, ties to the lower list.

    Squared Euclidean on the features (2·f·c − ‖c‖² ranked by ``lax.top_k``); jitted.

    Args:
        features: [n, F] float32 coarse features.
        centroids: [nlist, F] float32 centroids.
        nprobe: lists per row, 1 ≤ nprobe ≤ nlist.

    Returns:
        [n, nprobe] int32 list indices.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import coarse
        >>> centroids = jnp.array([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0]])
        >>> print(coarse.nearest_lists(jnp.array([[0.9, 1.0]]), centroids, 2))
        [[1 0]]
    """
    score = 2.0 * features @ centroids.T - jnp.sum(jnp.square(centroids), axis=1)
    return lax.top_k(score, nprobe)[1]


def assign(features: jax.Array, centroids: jax.Array) -> np.ndarray:
    """The nearest list of each row of ``features``.

    Squared Euclidean on the features, ties to the lower list; computed in blocks of 8,192 rows.

    Args:
        features: [n, F] float32 coarse features.
        centroids: [nlist, F] float32 centroids.

    Returns:
        [n] int32 NumPy array of list indices.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.search import coarse
        >>> centroids = jnp.array([[0.0, 0.0], [1.0, 1.0]])
        >>> coarse.assign(jnp.array([[0.0, 0.0], [1.0, 1.0], [0.9, 1.0]]), centroids)
        array([0, 1, 1], dtype=int32)
    """
    parts = [
        nearest_lists(features[i : i + _ASSIGN_ROWS], centroids, 1)[:, 0]
        for i in range(0, features.shape[0], _ASSIGN_ROWS)
    ]
    return np.asarray(jnp.concatenate(parts)) if parts else np.zeros(0, np.int32)


def _project(centroids: jax.Array, geometry: str) -> jax.Array:
    """Centroids back on the geometry: unit pairs on the torus (circular means), unit rows on the sphere."""
    if geometry == "euclidean":
        return centroids
    shape = centroids.shape
    grouped = centroids.reshape(shape[0], -1, 2) if geometry == "torus" else centroids
    norm = jnp.linalg.norm(grouped, axis=-1, keepdims=True)
    if geometry == "torus":  # an empty direction (all angles cancel) keeps angle 0
        unit = jnp.where(norm > 0, grouped / jnp.where(norm > 0, norm, 1.0), jnp.array([1.0, 0.0]))
    else:
        unit = grouped / jnp.where(norm > 0, norm, 1.0)
    return unit.reshape(shape)


@functools.partial(jax.jit, static_argnames=("nlist", "iters", "geometry"))
def kmeans(features: jax.Array, key: jax.Array, *, nlist: int, iters: int, geometry: str) -> jax.Array:
    """Lloyd's k-means on ``features``, each mean put back on the geometry (module docstring).

    ``nlist`` distinct rows as the start, ``iters`` rounds of assignment and mean (empty lists keep their
    centroid). On the torus each centroid pair is scaled back to unit length (circular means; an empty
    direction keeps angle 0), on the sphere each centroid row (spherical k-means); otherwise Euclidean.
    Jitted.

    Args:
        features: [n, F] float32 coarse features, n ≥ nlist.
        key: a JAX PRNG key for the start.
        nlist: the number of centroids.
        iters: the rounds of assignment and mean.
        geometry: 'euclidean', 'sphere' or 'torus'.

    Returns:
        [nlist, F] float32 centroids.

    References:
        Sivic & Zisserman 2003, "Video Google"; Jégou, Douze & Schmid 2011, "Product Quantization for Nearest
        Neighbor Search" (IEEE TPAMI 33(1)), §IV.

    Example:
        >>> import jax
        >>> import jax.numpy as jnp
        >>> from geojax.search import coarse
        >>> features = jnp.array([[0.0, 0.0], [1.0, 1.0], [0.9, 1.0]])
        >>> print(coarse.kmeans(features, jax.random.key(0), nlist=2, iters=3, geometry="euclidean"))
        [[0.   0.  ]
         [0.95 1.  ]]
    """
    n = features.shape[0]
    start = features[jax.random.choice(key, n, (nlist,), replace=False)]
    rows = -(-n // _ASSIGN_ROWS) * _ASSIGN_ROWS
    padded = jnp.pad(features, ((0, rows - n), (0, 0))).reshape(
        -1, min(rows, _ASSIGN_ROWS), features.shape[1]
    )
    real = (jnp.arange(rows) < n).astype(jnp.float32)

    def step(c, _):
        a = lax.map(lambda f: nearest_lists(f, c, 1)[:, 0], padded).reshape(rows)
        sums = jax.ops.segment_sum(padded.reshape(rows, -1) * real[:, None], a, nlist)
        counts = jax.ops.segment_sum(real, a, nlist)
        mean = jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None], c)
        return _project(mean, geometry), None

    centroids, _ = lax.scan(step, _project(start, geometry), None, length=iters)
    return centroids
