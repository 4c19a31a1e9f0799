"""Pairwise similarity matrices (seed 003 §"similarity functions"; seed 000 flat torus; seed 001 eq. 7).

Every function maps a: [N, D], b: [M, D] to an fp32 [N, M] matrix, *higher = more similar*, except
``manifold_distance`` which is a distance (lower = closer) as in seed 001. Inner products accumulate in fp32
(``preferred_element_type``), and every square root / arccos is guarded so that gradients stay finite at
identical points, zero vectors and cos = ±1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, get_args

import jax
import jax.numpy as jnp

from geojax import _checks
from geojax.manifolds import GEOMETRIES, _safe_normalize

# cos is clipped to [-1 + ARC_CLIP, 1 - ARC_CLIP] inside arccos (DESIGN §4).
ARC_CLIP = 1e-7
# Squared distances at or below this are treated as zero by the guarded square root.
_SQ_FLOOR = 1e-20

Similarity = Callable[[jax.Array, jax.Array], jax.Array]
# Similarities of plain vectors (``get`` accepts these); ``torus`` takes angles in turns.
SimilarityName = Literal["cosine", "neg_arc_length", "neg_euclidean", "neg_sq_euclidean", "dot", "torus"]
SIMILARITIES: tuple[str, ...] = get_args(SimilarityName)


def _check_pair(a, b) -> None:
    _checks.check_matrix(a, "a")
    _checks.check_matrix(b, "b")
    _checks.check_floating(a, "a")
    _checks.check_floating(b, "b")
    _checks.check_same_width(a, b, "a", "b")


def _gram(a: jax.Array, b: jax.Array) -> jax.Array:
    """a @ bᵀ accumulated in fp32. a: [N, D], b: [M, D] → [N, M]."""
    return jnp.einsum("nd,md->nm", a, b, preferred_element_type=jnp.float32)


def _safe_sqrt(sq: jax.Array) -> jax.Array:
    """√sq with value 0 and gradient 0 where sq ≤ floor (double-where guard)."""
    ok = sq > _SQ_FLOOR
    return jnp.where(ok, jnp.sqrt(jnp.where(ok, sq, 1.0)), 0.0)


def _sq_dist(a: jax.Array, b: jax.Array) -> jax.Array:
    """‖a_i − b_j‖² ≥ 0 via the Gram expansion, fp32. a: [N, D], b: [M, D] → [N, M]."""
    a2 = jnp.sum(jnp.square(a.astype(jnp.float32)), axis=-1)
    b2 = jnp.sum(jnp.square(b.astype(jnp.float32)), axis=-1)
    return jnp.maximum(a2[:, None] + b2[None, :] - 2.0 * _gram(a, b), 0.0)


def dot(a: jax.Array, b: jax.Array) -> jax.Array:
    """Dot product a_i · b_j (seed 003). a: [N, D], b: [M, D] → [N, M] fp32."""
    _check_pair(a, b)
    return _gram(a, b)


def cosine(a: jax.Array, b: jax.Array) -> jax.Array:
    """Cosine similarity a_i · b_j / (‖a_i‖ ‖b_j‖) (seed 003); zero rows give 0.

    a: [N, D], b: [M, D] → [N, M].
    """
    _check_pair(a, b)
    return _gram(_safe_normalize(a), _safe_normalize(b))


def neg_arc_length(a: jax.Array, b: jax.Array) -> jax.Array:
    """Negative arc length 1 − arccos(cos)/π on the sphere (seed 003), cos clipped to ±(1 − 1e-7).

    a: [N, D], b: [M, D] → [N, M] in [0, 1].
    """
    _check_pair(a, b)
    cos = _gram(_safe_normalize(a), _safe_normalize(b))
    return 1.0 - jnp.arccos(jnp.clip(cos, -1.0 + ARC_CLIP, 1.0 - ARC_CLIP)) / math.pi


def neg_euclidean(a: jax.Array, b: jax.Array) -> jax.Array:
    """Negative Euclidean distance −‖a_i − b_j‖₂ (seed 003); gradient finite (zero) at a = b.

    a: [N, D], b: [M, D] → [N, M].
    """
    _check_pair(a, b)
    return -_safe_sqrt(_sq_dist(a, b))


def neg_sq_euclidean(a: jax.Array, b: jax.Array) -> jax.Array:
    """Negative squared Euclidean distance −‖a_i − b_j‖². a: [N, D], b: [M, D] → [N, M]."""
    _check_pair(a, b)
    return -_sq_dist(a, b)


def torus(a: jax.Array, b: jax.Array, *, p: int = 1) -> jax.Array:
    """Negative flat-torus distance −Σ_k min(|a_k − b_k|, 1 − |a_k − b_k|)^p, angles in turns (seed 000 §3.3).

    a: [N, D], b: [M, D] turns (any real values; they are read mod 1) → [N, M]; p=1 is L1, p=2 squared L2.
    """
    _check_pair(a, b)
    _checks.check_choice(p, "p", (1, 2))
    diff = a.astype(jnp.float32)[:, None, :] - b.astype(jnp.float32)[None, :, :]
    per_dim = jnp.abs(diff - jnp.round(diff))
    return -jnp.sum(per_dim if p == 1 else jnp.square(per_dim), axis=-1)


def manifold_distance(
    coords_a: jax.Array,
    q_a: jax.Array,
    coords_b: jax.Array,
    q_b: jax.Array,
    *,
    no_overlap: float = math.inf,
) -> jax.Array:
    """Atlas semi-metric d_M of seed 001 eq. (7), d0 = Euclidean on pre-sigmoid coordinates (MTriplet, §3.2).

    d_M(x, y) = Σ_i q_i(x) q_i(y) d0(φ_i(x), φ_i(y)) / Σ_i q_i(x) q_i(y), and ``no_overlap`` where the
    denominator is 0. coords_a: [N, n, d], q_a: [N, n], coords_b: [M, n, d], q_b: [M, n] → [N, M] (a
    *distance*: lower = closer; pass its negation where a similarity is expected).
    """
    for c, q, tag in ((coords_a, q_a, "a"), (coords_b, q_b, "b")):
        _checks.check_rank(c, f"coords_{tag}", 3)
        _checks.check_floating(c, f"coords_{tag}")
        _checks.check_rank(q, f"q_{tag}", 2)
        if q.shape != c.shape[:2]:
            raise ValueError(f"q_{tag} must have shape {c.shape[:2]} (coords_{tag}' [N, n]), got {q.shape}")
    if coords_a.shape[1:] != coords_b.shape[1:]:
        raise ValueError(
            f"coords_a and coords_b must agree in charts and dim, got {coords_a.shape} and {coords_b.shape}"
        )
    ca = coords_a.astype(jnp.float32)
    cb = coords_b.astype(jnp.float32)
    sq = (
        jnp.sum(jnp.square(ca), -1)[:, None, :]
        + jnp.sum(jnp.square(cb), -1)[None, :, :]
        - 2.0 * jnp.einsum("ncd,mcd->nmc", ca, cb, preferred_element_type=jnp.float32)
    )
    d0 = _safe_sqrt(jnp.maximum(sq, 0.0))
    qa = q_a.astype(jnp.float32)
    qb = q_b.astype(jnp.float32)
    num = jnp.einsum("nc,mc,nmc->nm", qa, qb, d0)
    den = _gram(qa, qb)
    ok = den > 0.0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.float32(no_overlap))


_BY_NAME: dict[str, Similarity] = {
    "cosine": cosine,
    "neg_arc_length": neg_arc_length,
    "neg_euclidean": neg_euclidean,
    "neg_sq_euclidean": neg_sq_euclidean,
    "dot": dot,
    "torus": torus,
}


def get(name: str | Similarity) -> Similarity:
    """The similarity function for ``name`` (one of ``names()``); a callable is returned unchanged."""
    if callable(name):
        return name
    _checks.check_choice(name, "similarity", tuple(_BY_NAME))
    return _BY_NAME[name]


def names() -> tuple[str, ...]:
    """Names accepted by ``get``."""
    return SIMILARITIES


def retrieval_similarity(geometry: str, trained_with: str) -> str:
    """The similarity that ranks embeddings of ``geometry`` at evaluation time, as a name.

    Unit-norm geometries (``sphere``, ``torus_c``, ``torus_n``) rank by ``cosine``: on unit vectors the
    negative arc length and the (squared) Euclidean distance give the same order. ``euclidean`` embeddings
    rank by the vector similarity they were trained with (``neg_euclidean`` when that was not one, e.g. SimO);
    an ``atlas`` ranks by ``manifold`` (−d_M, Korman 2021 eq. 7, on chart coordinates and memberships).
    """
    _checks.check_choice(geometry, "geometry", GEOMETRIES)
    if geometry == "atlas":
        return "manifold"
    if geometry == "euclidean":
        return trained_with if trained_with in SIMILARITIES and trained_with != "torus" else "neg_euclidean"
    return "cosine"
