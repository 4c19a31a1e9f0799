"""Compact codes for embeddings (Stowell 2026, §4 and Experiment 2, Table 3): uint8 flat-torus codes and
their packed 1/2/4-bit versions (with the straight-through rounding of quantisation-aware training), a
fitted n-bit grid, packed sign bits, and product quantisation (Jégou et al. 2011) with k-means in jnp.

Conventions (docs/conventions.md): torus angles are in turns, uint8 code = round(256·t) mod 256 so that
integer overflow *is* the torus; sign(0) = +1; bits are packed little-endian into uint8
(``numpy.packbits(..., bitorder='little')``: bit j of a byte is coordinate 8·byte + j).

Non-finite input: fitting and encoding reject NaN or ±inf in concrete arrays (``ValueError`` naming the
argument and counting its bad rows), and decoding rejects codes outside [0, 2^nbits). The encoders and
decoders are plain jnp and may be traced; a traced argument cannot be read, so under ``jit`` or ``vmap``
the checks are skipped: a decoder then returns NaN for an out-of-range code, while an encoder has no NaN
code to give and maps a NaN or ±inf input to an unspecified code (check finiteness before tracing).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, tt

_F32 = jnp.float32
# Elements of the largest [rows, centroids] distance block held at once by the chunked PQ steps (64 MiB).
_BLOCK_ELEMENTS = 1 << 24
_MAX_PQ_BITS = 16


# --------------------------------------------------------------------------------------------------------
# Flat-torus uint8 codes.
# --------------------------------------------------------------------------------------------------------


def torus_uint8(t: ArrayLike) -> jax.Array:
    """uint8 code of flat-torus angles, round(256·t) mod 256 (Stowell 2026, §4; no fitted range).

    Round half to even; integer overflow *is* the torus: on codes c, c′ the per-byte distance is
    min((c − c′) mod 256, (c′ − c) mod 256).

    Args:
        t: [...] floating angles in turns (any finite real value; wrapped).

    Returns:
        [...] uint8 codes.

    Raises:
        ValueError: ``t`` has a non-floating dtype, or a concrete ``t`` holds NaN or ±inf (a traced one is not
            checked: module docstring).

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> print(quantize.torus_uint8(jnp.array([0.0, 0.25, 0.999, -0.5])))
        [  0  64   0 128]
    """
    _checks.check_floating(t, "t")
    _checks.check_finite(t, "t")
    return jnp.mod(jnp.round(jnp.asarray(t, _F32) * 256.0), 256.0).astype(jnp.uint8)


def torus_from_uint8(codes: ArrayLike) -> jax.Array:
    """Angles in turns of uint8 torus codes, codes / 256 (inverse of :func:`torus_uint8` on the grid).

    Args:
        codes: [...] uint8 torus codes.

    Returns:
        [...] float32 turns in [0, 1).

    Raises:
        ValueError: ``codes`` is not uint8.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> print(quantize.torus_from_uint8(jnp.array([0, 64, 128], jnp.uint8)))
        [0.   0.25 0.5 ]
    """
    _checks.check_dtype(codes, "codes", jnp.uint8)
    return jnp.asarray(codes, _F32) / 256.0


TORUS_BITS: tuple[int, ...] = (1, 2, 4, 8)


def _check_torus_bits(bits) -> int:
    _checks.check_choice(bits, "bits", TORUS_BITS)
    return int(bits)


def torus_codes(t: ArrayLike, bits: int = 8) -> jax.Array:
    """Packed b-bit flat-torus codes, code = round(2^b·t) mod 2^b (Stowell 2026, §4).

    Integers with overflow are a torus, at any word width. The 8/bits codes of a byte are little-endian:
    coordinate (8/bits)·j + i sits in bits i·b … i·b + b − 1 of byte j (bits = 8 is :func:`torus_uint8`;
    bits = 1 packs as :func:`pack_bits`). ``jnp.round`` rounds half to even.

    Args:
        t: [..., D] floating angles in turns (any finite real value; wrapped), D·bits a multiple of 8.
        bits: b, one of 1, 2, 4, 8.

    Returns:
        [..., D·bits/8] uint8 packed codes.

    Raises:
        ValueError: ``bits`` is not 1, 2, 4 or 8; ``t`` has rank 0 or a non-floating dtype; D·bits is not a
            multiple of 8; a concrete ``t`` holds NaN or ±inf (a traced one is not checked).

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> packed = quantize.torus_codes(jnp.array([[0.0, 0.25, 0.5, 0.75]]), bits=2)
        >>> print(packed, quantize.torus_unpack(packed, bits=2))
        [[228]] [[0 1 2 3]]
    """
    bits = _check_torus_bits(bits)
    _checks.check_floating(t, "t")
    _checks.check_min_rank(t, "t", 1)
    _checks.check_multiple_of(jnp.shape(t)[-1] * bits, "t.shape[-1]·bits", 8)
    _checks.check_finite(t, "t")
    levels = float(1 << bits)
    codes = jnp.mod(jnp.round(jnp.asarray(t, _F32) * levels), levels).astype(jnp.uint8)
    return _pack_lanes(codes, bits)


def _pack_lanes(codes: jax.Array, bits: int) -> jax.Array:
    """[..., D] uint8 values < 2^bits → [..., D·bits/8] uint8, little-endian lanes of ``bits`` bits."""
    if bits == 8:
        return codes
    per = 8 // bits
    lanes = codes.reshape(*codes.shape[:-1], codes.shape[-1] // per, per)
    shifts = jnp.arange(0, 8, bits, dtype=jnp.uint8)
    return jnp.sum(jnp.left_shift(lanes, shifts), axis=-1, dtype=jnp.uint8)


def torus_unpack(packed: ArrayLike, bits: int = 8) -> jax.Array:
    """Inverse of the packing of :func:`torus_codes`: the b-bit codes, one uint8 per coordinate.

    The angles in turns are codes / 2^bits.

    Args:
        packed: [..., B] uint8 packed codes.
        bits: b, one of 1, 2, 4, 8.

    Returns:
        [..., 8B/bits] uint8 codes in [0, 2^bits).

    Raises:
        ValueError: ``bits`` is not 1, 2, 4 or 8, or ``packed`` is not uint8 of rank ≥ 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> print(quantize.torus_unpack(jnp.array([[228]], jnp.uint8), bits=2))
        [[0 1 2 3]]
    """
    bits = _check_torus_bits(bits)
    _checks.check_dtype(packed, "packed", jnp.uint8)
    _checks.check_min_rank(packed, "packed", 1)
    packed = jnp.asarray(packed)
    if bits == 8:
        return packed
    shifts = jnp.arange(0, 8, bits, dtype=jnp.uint8)
    lanes = jnp.right_shift(packed[..., None], shifts) & jnp.uint8((1 << bits) - 1)
    return lanes.reshape(*packed.shape[:-1], packed.shape[-1] * (8 // bits))


def torus_fake_quantize(t: ArrayLike, bits: int, *, noise: bool = False) -> jax.Array:
    """Angles on the b-bit torus grid for quantisation-aware training, with a straight-through gradient.

    Forward round(2^b·t)/2^b, backward the straight-through estimator (the identity: Bengio, Léonard &
    Courville 2013); equal to ``torus_unpack(torus_codes(t, bits), bits) / 2^bits`` modulo 1 (the angle is not
    wrapped, so the gradient stays continuous across the seam). ``noise=True`` replaces the rounding by
    additive uniform noise of one grid step, t + u/2^b with u ∈ [−½, ½) (the training-time proxy of Ballé,
    Laparra & Simoncelli 2017), with gradient 1. The noise is a hash of the float32 bits of each angle
    (murmur3's finaliser) rather than a PRNG stream, so it needs no key and runs unchanged inside any jit,
    vmap or shard_map step; angles that move between steps get fresh noise. Jit-able.

    Args:
        t: [...] floating angles in turns.
        bits: b, one of 1, 2, 4, 8.
        noise: replace the rounding by uniform noise of one grid step.

    Returns:
        [...] float32 angles in turns.

    Raises:
        ValueError: ``bits`` is not 1, 2, 4 or 8, or ``t`` has a non-floating dtype.

    References:
        Bengio, Léonard & Courville 2013, "Estimating or Propagating Gradients Through Stochastic Neurons"
        (arXiv 1308.3432); Ballé, Laparra & Simoncelli 2017, "End-to-end Optimized Image Compression" (arXiv
        1611.01704).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> import jax
        >>> print(quantize.torus_fake_quantize(jnp.array([0.1, 0.3]), 2))
        [0.   0.25]
        >>> print(jax.grad(lambda t: quantize.torus_fake_quantize(t, 2).sum())(jnp.array([0.1, 0.3])))
        [1. 1.]
    """
    bits = _check_torus_bits(bits)
    _checks.check_floating(t, "t")
    t = jnp.asarray(t, _F32)
    levels = float(1 << bits)
    if noise:
        step = (_hash_uniform(t) - 0.5) / levels
    else:
        step = jnp.round(t * levels) / levels - t
    return t + lax.stop_gradient(step)


def _hash_uniform(x: jax.Array) -> jax.Array:
    """Uniform [0, 1) float32 of each float32 element, from murmur3's 32-bit finaliser of its bits."""
    h = lax.bitcast_convert_type(x, jnp.uint32)
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    h = h ^ (h >> 16)
    return (h >> 8).astype(_F32) * (1.0 / (1 << 24))


# --------------------------------------------------------------------------------------------------------
# n-bit grid with a per-dimension range fitted on the reference set.
# --------------------------------------------------------------------------------------------------------


@functools.partial(jax.tree_util.register_dataclass, data_fields=["lo", "hi"], meta_fields=["nbits"])
@dataclasses.dataclass(frozen=True)
class Grid:
    """A fitted n-bit grid (Stowell 2026, Experiment 2), made by :func:`grid_fit`.

    A JAX pytree (``lo`` and ``hi`` are leaves, ``nbits`` static).

    Attributes:
        lo: [D] float32 lower end of each dimension's range.
        hi: [D] float32 upper end (> lo).
        nbits: bits per dimension.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Experiment 2.
    """

    lo: jax.Array
    hi: jax.Array
    nbits: int


def _code_dtype(nbits: int):
    return jnp.uint8 if nbits <= 8 else jnp.uint16


def grid_fit(x: ArrayLike, *, nbits: int = 8) -> Grid:
    """Fit the n-bit grid of Stowell 2026, Experiment 2: per-dimension [min, max] of the reference set.

    A collapsed range (max = min) is widened to one unit width so that encoding stays finite.

    Args:
        x: [N, D] finite floating reference set.
        nbits: bits per dimension, 1 to 16.

    Returns:
        Grid(lo [D], hi [D], nbits).

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix or holds NaN or ±inf; ``nbits`` is not an integer
            in [1, 16].

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Experiment 2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> x = jnp.array([[0.0, 1.0], [1.0, 3.0], [0.5, 2.0]])
        >>> grid = quantize.grid_fit(x, nbits=2)
        >>> print(grid.lo, grid.hi)
        [0. 1.] [1. 3.]
    """
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    _checks.check_positive_int(nbits, "nbits")
    if nbits > _MAX_PQ_BITS:
        raise ValueError(f"nbits must be at most {_MAX_PQ_BITS}, got {nbits}")
    _checks.check_finite(x, "x")
    x = jnp.asarray(x, _F32)
    lo, hi = jnp.min(x, axis=0), jnp.max(x, axis=0)
    return Grid(lo=lo, hi=jnp.where(hi > lo, hi, lo + 1.0), nbits=int(nbits))


def _check_grid(grid: Grid, width: int, what: str) -> None:
    for v, name in ((grid.lo, "grid.lo"), (grid.hi, "grid.hi")):
        _checks.check_length(jnp.asarray(v), name, width, what)
        _checks.check_finite(v, name)


def grid_encode(grid: Grid, x: ArrayLike) -> jax.Array:
    """Grid cell index floor((x − lo)/(hi − lo)·2^nbits), clipped to [0, 2^nbits − 1].

    Args:
        grid: a fitted :class:`Grid` of width D.
        x: [N, D] finite floating vectors.

    Returns:
        [N, D] uint8 (nbits ≤ 8) or uint16 cell indices.

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix or holds NaN or ±inf, or ``grid.lo`` /
            ``grid.hi`` is not one finite value per column of ``x``.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> x = jnp.array([[0.0, 1.0], [1.0, 3.0], [0.5, 2.0]])
        >>> print(quantize.grid_encode(quantize.grid_fit(x, nbits=2), x))
        [[0 0]
         [3 3]
         [2 2]]
    """
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    _check_grid(grid, jnp.shape(x)[1], "one per column of x")
    _checks.check_finite(x, "x")
    levels = 1 << grid.nbits
    cell = jnp.floor((jnp.asarray(x, _F32) - grid.lo) / (grid.hi - grid.lo) * levels)
    return jnp.clip(cell, 0, levels - 1).astype(_code_dtype(grid.nbits))


def grid_decode(grid: Grid, codes: ArrayLike) -> jax.Array:
    """Centre of each grid cell, lo + (code + ½)·(hi − lo)/2^nbits.

    Args:
        grid: a fitted :class:`Grid` of width D.
        codes: [N, D] unsigned integer cell indices in [0, 2^nbits), uint8 (nbits ≤ 8) or uint16.

    Returns:
        [N, D] float32 cell centres (NaN for an out-of-range traced code).

    Raises:
        ValueError: ``codes`` is not a matrix of the grid's code dtype, a concrete code lies outside
            [0, 2^nbits), or the grid does not have one finite range per column.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> x = jnp.array([[0.0, 1.0], [1.0, 3.0], [0.5, 2.0]])
        >>> grid = quantize.grid_fit(x, nbits=2)
        >>> print(quantize.grid_decode(grid, quantize.grid_encode(grid, x)))
        [[0.125 1.25 ]
         [0.875 2.75 ]
         [0.625 2.25 ]]
    """
    _checks.check_matrix(codes, "codes")
    _checks.check_dtype(codes, "codes", _code_dtype(grid.nbits))
    _check_grid(grid, jnp.shape(codes)[1], "one per column of codes")
    levels = 1 << grid.nbits
    _checks.check_index_range(codes, "codes", levels, f"{grid.nbits}-bit grid cells")
    codes = jnp.asarray(codes, jnp.int32)
    centre = grid.lo + (codes.astype(_F32) + 0.5) * (grid.hi - grid.lo) / levels
    return jnp.where(codes < levels, centre, jnp.nan)


# --------------------------------------------------------------------------------------------------------
# Sign bits.
# --------------------------------------------------------------------------------------------------------


def pack_bits(bits: ArrayLike) -> jax.Array:
    """Pack 0/1 values little-endian into bytes, as ``numpy.packbits(bits, axis=-1, bitorder='little')``.

    Bit j of a byte is coordinate 8·byte + j; any non-zero value counts as 1.

    Args:
        bits: [..., B] bool or integer 0/1 values, B a multiple of 8.

    Returns:
        [..., B/8] uint8.

    Raises:
        ValueError: ``bits`` has a non-integer dtype, rank 0, or a last dimension that is not a multiple of 8.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> print(quantize.pack_bits(jnp.array([1, 0, 0, 0, 0, 0, 0, 1])))
        [129]
    """
    _checks.check_integer(bits, "bits")
    if jnp.ndim(bits) < 1:
        raise ValueError(f"bits must have rank ≥ 1, got shape {tuple(jnp.shape(bits))}")
    _checks.check_multiple_of(jnp.shape(bits)[-1], "bits.shape[-1]", 8)
    b = (jnp.asarray(bits) != 0).astype(jnp.uint8)
    b = b.reshape(*b.shape[:-1], b.shape[-1] // 8, 8)
    weights = jnp.left_shift(jnp.uint8(1), jnp.arange(8, dtype=jnp.uint8))
    return jnp.sum(b * weights, axis=-1, dtype=jnp.uint8)


def unpack_bits(packed: ArrayLike) -> jax.Array:
    """Inverse of :func:`pack_bits`: little-endian bits of each byte.

    Args:
        packed: [..., n] uint8.

    Returns:
        [..., 8n] uint8 in {0, 1}.

    Raises:
        ValueError: ``packed`` is not uint8 or has rank 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> print(quantize.unpack_bits(jnp.array([129], jnp.uint8)))
        [1 0 0 0 0 0 0 1]
    """
    _checks.check_dtype(packed, "packed", jnp.uint8)
    if jnp.ndim(packed) < 1:
        raise ValueError(f"packed must have rank ≥ 1, got shape {tuple(jnp.shape(packed))}")
    packed = jnp.asarray(packed)
    bits = jnp.right_shift(packed[..., None], jnp.arange(8, dtype=jnp.uint8)) & jnp.uint8(1)
    return bits.reshape(*packed.shape[:-1], packed.shape[-1] * 8)


def one_bit(x: ArrayLike) -> jax.Array:
    """1-bit grid of Stowell 2026, Experiment 2: sign bits, packed little-endian.

    sign(0) = +1 → bit 1.

    Args:
        x: [N, D] finite floating vectors, D a multiple of 8.

    Returns:
        [N, D/8] uint8 packed sign bits.

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix, D is not a multiple of 8, or a concrete ``x``
            holds NaN or ±inf (a traced one is not checked: module docstring).

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Experiment 2.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> print(quantize.one_bit(jnp.array([[0.5, -1.0, 0.0, 2.0, -3.0, 1.0, 1.0, -0.1]])))
        [[109]]
    """
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    _checks.check_multiple_of(jnp.shape(x)[1], "x.shape[1]", 8)
    _checks.check_finite(x, "x")
    return pack_bits(jnp.asarray(x) >= 0)


# --------------------------------------------------------------------------------------------------------
# Product quantisation.
# --------------------------------------------------------------------------------------------------------


@functools.partial(jax.tree_util.register_dataclass, data_fields=["codebooks", "objective"], meta_fields=[])
@dataclasses.dataclass(frozen=True)
class PQ:
    """A fitted product quantiser (Jégou et al. 2011), made by :func:`pq_fit`.

    A JAX pytree of two arrays.

    Attributes:
        codebooks: [m, 2^nbits, D/m] float32 centroids of each sub-space.
        objective: [m, iters] k-means objective history: the mean squared distance of the training rows to
            their centroid, per sub-space, measured at each assignment step.

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)),
        §III.
    """

    codebooks: jax.Array
    objective: jax.Array

    @property
    def m(self) -> int:
        """The number of sub-spaces m."""
        return self.codebooks.shape[0]

    @property
    def nbits(self) -> int:
        """The bits per sub-space code, log2 of the centroids per sub-space."""
        return int(self.codebooks.shape[1]).bit_length() - 1


def _subspaces(x: jax.Array, m: int) -> jax.Array:
    """[N, D] → [m, N, D/m] (sub-vector j is columns j·D/m … (j+1)·D/m − 1)."""
    n, d = x.shape
    return jnp.transpose(x.reshape(n, m, d // m), (1, 0, 2))


def _rows_per_block(m: int, k: int) -> int:
    return max(1, _BLOCK_ELEMENTS // (m * k))


def _nearest(xs: jax.Array, codebooks: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Nearest centroid per sub-space, in row blocks that bound memory.

    xs: [m, N, ds], codebooks: [m, K, ds] → (index [m, N] int32, squared distance [m, N] float32).
    """
    half_sq = 0.5 * jnp.sum(jnp.square(codebooks), axis=-1)  # [m, K]

    def block(xb):  # [b, m, ds] → ([b, m], [b, m])
        score = jnp.einsum("bmd,mkd->bmk", xb, codebooks, preferred_element_type=_F32) - half_sq
        idx = jnp.argmax(score, axis=-1).astype(jnp.int32)
        best = jnp.take_along_axis(score, idx[..., None], axis=-1)[..., 0]
        return idx, jnp.maximum(jnp.sum(jnp.square(xb), axis=-1) - 2.0 * best, 0.0)

    out = tt.map_rows(block, jnp.transpose(xs, (1, 0, 2)), _rows_per_block(*codebooks.shape[:2]))
    return jax.tree_util.tree_map(jnp.transpose, out)


def _kmeans_pp(key: jax.Array, x: jax.Array, k: int) -> jax.Array:
    """k-means++ seeding (Arthur & Vassilvitskii 2007) of one sub-space. x: [N, ds] → [k, ds]."""
    n = x.shape[0]
    k0, key = jax.random.split(key)
    first = x[jax.random.randint(k0, (), 0, n)]
    centroids = jnp.zeros((k, x.shape[1]), x.dtype).at[0].set(first)
    d2 = jnp.sum(jnp.square(x - first), axis=-1)

    def step(i, carry):
        centroids, d2 = carry
        # Sample a row with probability ∝ D²; all-zero D² (fewer distinct rows than k) picks the last row.
        cum = jnp.cumsum(d2)
        u = jax.random.uniform(jax.random.fold_in(key, i)) * cum[-1]
        pick = jnp.minimum(jnp.searchsorted(cum, u, side="right"), n - 1)
        c = x[pick]
        return centroids.at[i].set(c), jnp.minimum(d2, jnp.sum(jnp.square(x - c), axis=-1))

    return lax.fori_loop(1, k, step, (centroids, d2))[0]


def _kmeans_random(key: jax.Array, x: jax.Array, k: int) -> jax.Array:
    """k distinct training rows drawn uniformly. x: [N, ds] → [k, ds]."""
    return x[jax.random.permutation(key, x.shape[0])[:k]]


def _lloyd_step(xs: jax.Array, codebooks: jax.Array):
    """One Lloyd iteration on every sub-space; empty clusters re-seeded at the worst-fitted rows.

    xs: [m, N, ds], codebooks: [m, K, ds] → (new codebooks, objective [m] before the update).
    """
    m, k = codebooks.shape[:2]
    idx, dist = _nearest(xs, codebooks)

    def update(x, a, d, c):  # one sub-space: x [N, ds], a [N], d [N], c [K, ds]
        sums = jax.ops.segment_sum(x, a, num_segments=k)
        counts = jax.ops.segment_sum(jnp.ones_like(d), a, num_segments=k)
        empty = counts == 0
        # The j-th empty cluster moves onto the j-th farthest row from its centroid (a row's move cannot
        # raise the objective: that cluster held no row, and the next assignment only lowers distances).
        far = lax.top_k(d, k)[1]
        rank = jnp.cumsum(empty) - 1
        reseed = x[far[jnp.clip(rank, 0, k - 1)]]
        means = sums / jnp.maximum(counts, 1.0)[:, None]
        return jnp.where(empty[:, None], reseed, means)

    new = jax.vmap(update)(xs, idx, dist, codebooks)
    return new, jnp.mean(dist, axis=1)


@functools.partial(jax.jit, static_argnames=("m", "nbits", "iters", "init"))
def _pq_fit(x, key, *, m, nbits, iters, init):
    xs = _subspaces(jnp.asarray(x, _F32), m)
    k = 1 << nbits
    seed = _kmeans_pp if init == "kmeans++" else _kmeans_random
    codebooks = jax.vmap(seed, in_axes=(0, 0, None))(jax.random.split(key, m), xs, k)

    def body(c, _):
        new, objective = _lloyd_step(xs, c)
        return new, objective

    codebooks, objective = lax.scan(body, codebooks, None, length=iters)
    return PQ(codebooks=codebooks, objective=objective.T)


def pq_fit(
    x: ArrayLike, *, m: int, nbits: int, key: jax.Array, iters: int = 25, init: str = "kmeans++"
) -> PQ:
    """Product quantiser of Jégou et al. (2011) §III (Stowell 2026, Table 3), fitted by k-means.

    k-means with 2^nbits centroids on each of m sub-vectors, all sub-spaces at once (vmapped), ``iters`` Lloyd
    iterations, empty clusters re-seeded at the worst-fitted rows. Distances are computed in row blocks, so
    nbits = 16 (65,536 centroids) fits in memory. Sub-vector j is columns j·D/m … (j+1)·D/m − 1.

    Args:
        x: [N, D] finite floating training set, D divisible by m, N ≥ 2^nbits.
        m: the number of sub-vectors (a positive int).
        nbits: bits per sub-vector code, 1 to 16.
        key: a JAX PRNG key for the seeding.
        iters: Lloyd iterations (a positive int).
        init: 'kmeans++' (Arthur & Vassilvitskii 2007) or 'random' (distinct training rows).

    Returns:
        PQ(codebooks [m, 2^nbits, D/m], objective [m, iters]).

    Raises:
        ValueError: ``x`` is not a non-empty floating matrix or holds NaN or ±inf; ``m``, ``nbits`` or
            ``iters`` is not a positive int; ``m`` does not divide D; ``nbits`` > 16; N < 2^nbits; ``init`` is
            unknown.

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)),
        §III; Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 3.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> import jax
        >>> x = jax.random.normal(jax.random.key(0), (64, 4))
        >>> pq = quantize.pq_fit(x, m=2, nbits=2, key=jax.random.key(1), iters=5)
        >>> pq.codebooks.shape, pq.objective.shape, pq.m, pq.nbits
        ((2, 4, 2), (2, 5), 2, 2)
    """
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    _checks.check_positive_int(m, "m")
    _checks.check_positive_int(nbits, "nbits")
    _checks.check_positive_int(iters, "iters")
    _checks.check_choice(init, "init", ("kmeans++", "random"))
    n, d = jnp.shape(x)
    if d % m:
        raise ValueError(f"m must divide x.shape[1] = {d}, got m = {m}")
    if nbits > _MAX_PQ_BITS:
        raise ValueError(f"nbits must be at most {_MAX_PQ_BITS}, got {nbits}")
    if n < (1 << nbits):
        raise ValueError(
            f"nbits = {nbits} needs at least 2^nbits = {1 << nbits} training rows for k-means, x has {n}"
        )
    _checks.check_finite(x, "x")
    return _pq_fit(x, key, m=int(m), nbits=int(nbits), iters=int(iters), init=init)


def _check_pq(pq: PQ) -> None:
    _checks.check_rank(pq.codebooks, "pq.codebooks", 3)
    k = pq.codebooks.shape[1]
    if k & (k - 1) or k > (1 << _MAX_PQ_BITS):
        raise ValueError(f"pq.codebooks must have 2^nbits (≤ 2^16) centroids per sub-space, got {k}")
    _checks.check_finite(pq.codebooks, "pq.codebooks")


def pq_encode(pq: PQ, x: ArrayLike) -> jax.Array:
    """PQ codes: index of the nearest centroid of each sub-vector (Jégou et al. 2011 eq. 9).

    Args:
        pq: a fitted :class:`PQ`.
        x: [N, D] finite floating vectors, D = m · D/m of ``pq``.

    Returns:
        [N, m] uint8 (nbits ≤ 8) or uint16 codes.

    Raises:
        ValueError: ``pq`` is malformed (not 2^nbits ≤ 2^16 finite centroids per sub-space), ``x`` is not a
            non-empty floating matrix of D columns, or ``x`` holds NaN or ±inf.

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)), eq.
        9.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> import jax
        >>> x = jax.random.normal(jax.random.key(0), (64, 4))
        >>> pq = quantize.pq_fit(x, m=2, nbits=2, key=jax.random.key(1), iters=5)
        >>> codes = quantize.pq_encode(pq, x)
        >>> codes.shape, codes.dtype
        ((64, 2), dtype('uint8'))
    """
    _check_pq(pq)
    _checks.check_matrix(x, "x")
    _checks.check_floating(x, "x")
    m, _, ds = pq.codebooks.shape
    if jnp.shape(x)[1] != m * ds:
        raise ValueError(f"x must have {m * ds} columns (pq's m·D/m), got shape {tuple(jnp.shape(x))}")
    _checks.check_finite(x, "x")
    return _pq_encode(pq, x)


@jax.jit
def _pq_encode(pq: PQ, x: jax.Array) -> jax.Array:
    idx, _ = _nearest(_subspaces(jnp.asarray(x, _F32), pq.m), pq.codebooks)
    return idx.T.astype(_code_dtype(pq.nbits))


def pq_decode(pq: PQ, codes: ArrayLike) -> jax.Array:
    """Reconstruction from PQ codes: the concatenated centroids.

    Args:
        pq: a fitted :class:`PQ`.
        codes: [N, m] uint8/uint16 codes in [0, 2^nbits).

    Returns:
        [N, D] float32 reconstructions (NaN sub-vectors for out-of-range traced codes).

    Raises:
        ValueError: ``pq`` is malformed, ``codes`` is not a matrix of m columns with the code dtype, or a
            concrete code lies outside [0, 2^nbits).

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)),
        §III.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import quantize
        >>> import jax
        >>> x = jax.random.normal(jax.random.key(0), (64, 4))
        >>> pq = quantize.pq_fit(x, m=2, nbits=2, key=jax.random.key(1), iters=5)
        >>> quantize.pq_decode(pq, quantize.pq_encode(pq, x)).shape
        (64, 4)
    """
    _check_pq(pq)
    _checks.check_matrix(codes, "codes")
    _checks.check_dtype(codes, "codes", _code_dtype(pq.nbits))
    n, m = jnp.shape(codes)
    if m != pq.m:
        raise ValueError(f"codes must have {pq.m} columns (one per PQ sub-space), got {(n, m)}")
    k = pq.codebooks.shape[1]
    _checks.check_index_range(codes, "codes", k, f"{k} centroids per sub-space")
    centroid = functools.partial(jnp.take, axis=0, mode="fill")  # out of range: NaN, not a clamped centroid
    parts = jax.vmap(centroid, in_axes=(0, 1), out_axes=1)(pq.codebooks, jnp.asarray(codes, jnp.int32))
    return parts.reshape(n, -1)
