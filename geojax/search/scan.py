"""Exact top-k scans over compact codes (Stowell 2026, §4; Jégou et al. 2011, §III-A for PQ), chunked and
jit-able.

Every search returns ``(distances [Q, k], indices [Q, k] int32)`` in faiss's order: ascending distance, ties
to the lower database index. Queries run in blocks of ``query_block`` rows (``lax.map``); the database is
cut into sub-chunks of about ``chunk`` rows, stored column-major once per call, and sub-chunks are gathered
into selection blocks (``lax.scan``), so memory stays bounded. For each selection block the exact top-k is
found in two stages: the minimum distance of each group of 32 consecutive rows, fused with the distance
computation, then the distances of the rows of the k best groups, recomputed and ranked (the selection,
:func:`plan`, :func:`layout` and :func:`blocked`, is written in ``geojax.search._select``, the distance
kernels in ``geojax.search._kernels``).

Bad values: ``pq_topk`` rejects concrete queries or codebooks holding NaN or ±inf and codes outside
[0, 2^nbits) (``ValueError`` naming the argument), since a NaN distance would otherwise be ranked like a
real one; traced arguments cannot be read, and bad ones give NaN distances. ``pq_distances`` is a kernel
and propagates: a NaN query row gives a NaN distance row, an out-of-range code a NaN column. Torus and
Hamming codes are uint8 and have no bad values.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, quantize
from geojax.quantize import PQ
from geojax.search._kernels import BLOCKS as BLOCKS
from geojax.search._kernels import (
    TORUS_BYTES_KERNELS,
    TORUS_WORDS_KERNELS,
    hamming_kernel,
    pq_kernel,
    pq_tables,
    word_limit,
)
from geojax.search._select import blocked, layout, plan

_F32 = jnp.float32
_EXACT_F32 = 1 << 24
SELECT = 1 << 23  # group minima held per query block between two selections (elements)


# --------------------------------------------------------------------------------------------------------
# The search: planned for its size, the database laid out once, the queries split over the devices.
# --------------------------------------------------------------------------------------------------------


@functools.partial(
    jax.jit,
    static_argnames=("kernel", "prepare", "n", "k", "group", "query_block", "exact", "integer", "devices"),
)
def _search_layout(
    queries, rows, cols, aux, *, kernel, prepare, n, k, group, query_block, exact, integer, devices
):
    """Blocked search over a database laid out by :func:`layout`; ``prepare(aux, query_block)`` gives the
    kernel's per-query data (PQ: tables).

    With several ``devices`` the queries are split across them (``jax.shard_map``; the database and ``aux``
    are replicated), as faiss splits queries across threads.
    """
    run = functools.partial(
        blocked,
        kernel=kernel,
        prepare=prepare,
        n=n,
        k=k,
        group=group,
        query_block=query_block,
        exact=exact,
        platform=devices[0].platform,
    )
    q = queries.shape[0]
    if len(devices) > 1:
        per = -(-q // len(devices))
        padded = jnp.pad(queries, ((0, per * len(devices) - q),) + ((0, 0),) * (queries.ndim - 1))
        mesh = jax.sharding.Mesh(np.array(devices), ("q",))
        spec, whole = jax.sharding.PartitionSpec("q"), jax.sharding.PartitionSpec()
        v, i = jax.shard_map(
            run, mesh=mesh, in_specs=(spec, whole, whole, whole), out_specs=(spec, spec), check_vma=False
        )(padded, rows, cols, aux)
        v, i = v[:q], i[:q]
    else:
        v, i = run(queries, rows, cols, aux)
    d = -v
    return (d.astype(jnp.int32) if integer else d), i


def _search(queries, db, aux, *, k: int, chunk: int, query_block: int, **static):
    """Exact top-k of ``queries`` against ``db``: plans the scan for this size, lays the database out and
    searches it (``static``: kernel, prepare, exact, integer)."""
    devices = _devices(queries.shape[0])
    per_device = -(-queries.shape[0] // len(devices))
    scan_plan = plan(
        db.shape[0], k, chunk, min(query_block, per_device), SELECT, db.shape[1] * db.dtype.itemsize
    )
    rows, cols = layout(db, scan_plan)
    return _search_layout(
        queries,
        rows,
        cols,
        aux,
        n=db.shape[0],
        k=k,
        group=scan_plan[2],
        query_block=query_block,
        devices=devices,
        **static,
    )


def _devices(q: int) -> tuple:
    """Local devices of the default backend to split ``q`` queries over (one when there are few queries)."""
    devices = tuple(jax.local_devices())
    return devices if len(devices) > 1 and q >= 8 * len(devices) else devices[:1]


def use_cpu_cores(n: int | None = None) -> int:
    """Give JAX's CPU backend one device per core, so the searches split their queries across devices.

    Not needed for speed on JAX's default single CPU device: XLA already splits a search's scan loop across
    the CPU's threads (on 2 cores, ``python -m benchmarks.search --cpu-devices 2`` measured no gain over the
    default). The device count can only be set before JAX runs its first operation: call this right after
    ``import jax`` (a ``RuntimeError`` says so otherwise). It changes the process's device list, which other
    code (e.g. data-parallel training over "all devices") also sees.

    Args:
        n: the number of CPU devices; None: ``os.cpu_count()``.

    Returns:
        The device count asked.

    Raises:
        ValueError: ``n`` is not a positive int.
        RuntimeError: JAX has already started its backends.
    """
    count = int(n) if n is not None else (os.cpu_count() or 1)
    _checks.check_positive_int(count, "n")
    jax.config.update("jax_num_cpu_devices", count)
    return count


# --------------------------------------------------------------------------------------------------------
# Validation shared by the public functions.
# --------------------------------------------------------------------------------------------------------


def _check_codes(queries, db, query_name: str = "queries", db_name: str = "db") -> None:
    for x, name in ((queries, query_name), (db, db_name)):
        _checks.check_matrix(x, name)
        _checks.check_dtype(x, name, jnp.uint8)
    _checks.check_same_width(queries, db, query_name, db_name)


def _check_search(k, n: int, chunk, query_block) -> None:
    _checks.check_k(k, "k", n, "database rows")
    _checks.check_positive_int(chunk, "chunk")
    _checks.check_positive_int(query_block, "query_block")


def _check_p(p) -> None:
    _checks.check_choice(p, "p", (1, 2))


@jax.jit
def _as_words(codes: jax.Array) -> jax.Array:
    """Packed bytes [N, B] → uint32 words [N, ceil(B/4)] (zero bytes appended: they add no distance); one
    XLA call rather than three copies dispatched one by one."""
    n, nbytes = codes.shape
    pad = -nbytes % 4
    codes = jnp.pad(codes, ((0, 0), (0, pad)))
    return lax.bitcast_convert_type(codes.reshape(n, (nbytes + pad) // 4, 4), jnp.uint32)


NO_AUX = np.zeros((), np.float32)  # placeholder ``aux`` of the searches that need none


def _queries_as_is(aux, q):
    return q


def _torus_codes(p: int, bits: int, codes: jax.Array) -> tuple[object, jax.Array]:
    """(kernel, operand) for packed b-bit torus codes [N, B]: 1-bit codes by Hamming distance (min(d, 2 − d)
    = d on one bit, for L1 and squared L2 alike); L1 by SWAR on uint32 words while the 16-bit lanes cannot
    overflow; otherwise one byte per coordinate, shifted to the top of the byte."""
    if bits == 1:
        return hamming_kernel, _as_words(codes)
    if p == 1 and -(-codes.shape[1] // 4) <= word_limit(bits):
        return TORUS_WORDS_KERNELS[bits], _as_words(codes)
    if bits < 8:
        codes = jnp.left_shift(quantize.torus_unpack(codes, bits), jnp.uint8(8 - bits))
    return TORUS_BYTES_KERNELS[bits, p], codes


def _torus_bound(width: int, bits: int, p: int) -> int:
    """Largest wraparound Lp^p distance between packed b-bit codes of ``width`` bytes."""
    return width * (8 // bits) * (1 << (bits - 1)) ** p


class Scan(NamedTuple):
    """How one kind of code is scanned: the arguments of :func:`blocked` and the scan's defaults.

    Attributes:
        kernel: the distance kernel.
        prepare: ``prepare(aux, queries)`` gives a query block's kernel data (PQ: lookup tables from ``aux`` =
            codebooks).
        operand: maps codes (or queries) [n, B] to the kernel's operand (e.g. uint32 words).
        exact: whether integer keys fit float32.
        integer: whether distances are integers.
        chunk: the default rows per sub-chunk.
        query_block: the default queries per block.
        query_axis: the axis of the prepared data that runs over queries (PQ's tables: the last).
    """

    kernel: Callable
    prepare: Callable
    operand: Callable
    exact: bool  # integer keys fit float32
    integer: bool  # distances are integers
    chunk: int
    query_block: int
    query_axis: int = 0


def _as_is(x):
    return x


@functools.cache
def hamming_scan(width: int) -> Scan:
    """The scan of packed bit codes of ``width`` bytes by Hamming distance (cached).

    Args:
        width: the code width in bytes.

    Returns:
        A :class:`Scan`.

    Example:
        >>> import numpy as np
        >>> from geojax.search import scan
        >>> spec = scan.hamming_scan(4)
        >>> spec.chunk, spec.query_block, spec.exact, spec.integer
        (16384, 1024, True, True)
    """
    return Scan(hamming_kernel, _queries_as_is, _as_words, width * 8 <= _EXACT_F32, True, 16384, 1024)


def _torus_operand(p: int, bits: int, codes: jax.Array) -> jax.Array:
    return _torus_codes(p, bits, codes)[1]


@functools.cache
def torus_scan(width: int, bits: int, p: int) -> Scan:
    """The scan of packed b-bit torus codes of ``width`` bytes by wraparound Lp^p (:func:`torus_distances`).

    Cached, so that every index of one shape shares one compiled program.

    Args:
        width: the code width in bytes.
        bits: bits per coordinate, 1, 2, 4 or 8.
        p: 1 (L1) or 2 (squared L2).

    Returns:
        A :class:`Scan`.
    """
    kernel = _torus_codes(p, bits, jnp.zeros((1, width), jnp.uint8))[0]
    exact = _torus_bound(width, bits, p) <= _EXACT_F32
    return Scan(kernel, _queries_as_is, functools.partial(_torus_operand, p, bits), exact, True, 16384, 256)


PQ_SCAN = Scan(pq_kernel, pq_tables, _as_is, True, False, 4096, 32, -1)


# --------------------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------------------


def torus_distances(a: ArrayLike, b: ArrayLike, *, p: int = 1, bits: int = 8) -> jax.Array:
    """Flat-torus Lp^p distance on packed b-bit codes with wraparound (Stowell 2026, §4).

    Σ_k min(d_k, 2^b − d_k)^p with d_k = (a_k − b_k) mod 2^b over the 8B/bits coordinates (8-bit: 250 vs 5 →
    11).

    Args:
        a: [N, B] uint8 codes, packed by ``quantize.torus_codes(·, bits)`` (8/bits codes per byte).
        b: [M, B] uint8 codes, packed alike.
        p: 1 (L1) or 2 (squared L2).
        bits: bits per coordinate, 1, 2, 4 or 8.

    Returns:
        [N, M] int32 distances.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty uint8 matrix, their widths differ, or ``p`` or ``bits``
            is not an allowed value.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import numpy as np
        >>> from geojax.search import scan
        >>> a = np.array([[250, 0]], np.uint8)
        >>> b = np.array([[5, 0], [250, 128]], np.uint8)
        >>> print(scan.torus_distances(a, b), scan.torus_distances(a, b, p=2))
        [[ 11 128]] [[  121 16384]]
    """
    _check_codes(a, b, "a", "b")
    _check_p(p)
    _checks.check_choice(bits, "bits", quantize.TORUS_BITS)
    kernel, qa = _torus_codes(p, bits, jnp.asarray(a))
    return kernel(qa, _torus_codes(p, bits, jnp.asarray(b))[1].T, True)


def hamming_distances(a: ArrayLike, b: ArrayLike) -> jax.Array:
    """Hamming distance of packed bit codes (XOR + popcount on uint32 words).

    Args:
        a: [N, B] uint8 packed bits.
        b: [M, B] uint8 packed bits.

    Returns:
        [N, M] int32 distances.

    Raises:
        ValueError: ``a`` or ``b`` is not a non-empty uint8 matrix, or their widths differ.

    Example:
        >>> import numpy as np
        >>> from geojax.search import scan
        >>> print(scan.hamming_distances(np.array([[0b1011]], np.uint8), np.array([[0], [0b1111]], np.uint8)))
        [[3 1]]
    """
    _check_codes(a, b, "a", "b")
    return hamming_kernel(_as_words(jnp.asarray(a)), _as_words(jnp.asarray(b)).T, True)


def pq_distances(queries: ArrayLike, pq: PQ, codes: ArrayLike) -> jax.Array:
    """Asymmetric PQ distance ‖q − decode(code)‖² via lookup tables (Jégou et al. 2011 eq. 13).

    A kernel: NaN or ±inf in a query row gives a non-finite distance row, a code outside [0, 2^nbits) a NaN
    column (no ValueError).

    Args:
        queries: [Q, D] floating query vectors.
        pq: a fitted :class:`geojax.quantize.PQ`.
        codes: [N, m] uint8/uint16 PQ codes.

    Returns:
        [Q, N] float32 squared distances.

    Raises:
        ValueError: ``pq.codebooks`` is not rank 3, ``queries`` is not a floating matrix of D = m·D/m columns,
            or ``codes`` is not a matrix of m columns of the code dtype.

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)), eq.
        13.

    Example:
        >>> import jax
        >>> from geojax import quantize
        >>> from geojax.search import scan
        >>> x = jax.random.normal(jax.random.key(0), (64, 4))
        >>> pq = quantize.pq_fit(x, m=2, nbits=2, key=jax.random.key(1), iters=5)
        >>> codes = quantize.pq_encode(pq, x)
        >>> scan.pq_distances(x[:2], pq, codes).shape
        (2, 64)
    """
    _check_pq_search(queries, pq, codes)
    return pq_kernel(pq_tables(pq.codebooks, jnp.asarray(queries)), jnp.asarray(codes).T, True)


def torus_topk(
    queries: ArrayLike,
    db: ArrayLike,
    k: int,
    *,
    bits: int = 8,
    p: int = 1,
    chunk: int = 16384,
    query_block: int = 256,
) -> tuple[jax.Array, jax.Array]:
    """Exact k nearest packed b-bit torus codes by wraparound L1 (p=1) or squared L2 (p=2) distance.

    The distance is :func:`torus_distances`'s, bits ∈ {1, 2, 4, 8}; ties to the lower database index. L1 scans
    the packed words directly (SWAR: 32/bits coordinates per uint32 operation); 1-bit codes are ranked by
    Hamming distance, which equals both.

    Args:
        queries: [Q, B] uint8 codes, packed by ``quantize.torus_codes(·, bits)``.
        db: [N, B] uint8 codes, packed alike.
        k: neighbours per query, 1 ≤ k ≤ N.
        bits: bits per coordinate, 1, 2, 4 or 8.
        p: 1 (L1) or 2 (squared L2).
        chunk: database rows per sub-chunk (a positive int).
        query_block: queries per block (a positive int).

    Returns:
        (distances [Q, k] int32 ascending, indices [Q, k] int32).

    Raises:
        ValueError: the codes are not non-empty uint8 matrices of one width, ``p`` or ``bits`` is not an
            allowed value, ``k`` is not in [1, N], or ``chunk`` or ``query_block`` is not a positive int.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), §4.

    Example:
        >>> import numpy as np
        >>> from geojax.search import scan
        >>> db = np.array([[0, 0], [10, 0], [250, 0], [128, 128]], np.uint8)
        >>> print(*scan.torus_topk(np.array([[250, 0]], np.uint8), db, 2))
        [[0 6]] [[2 0]]
    """
    _check_codes(queries, db)
    _check_p(p)
    _checks.check_choice(bits, "bits", quantize.TORUS_BITS)
    _check_search(k, db.shape[0], chunk, query_block)
    bound = _torus_bound(db.shape[1], bits, p)
    kernel, q_op = _torus_codes(p, bits, jnp.asarray(queries))
    return _search(
        q_op,
        _torus_codes(p, bits, jnp.asarray(db))[1],
        NO_AUX,
        kernel=kernel,
        prepare=_queries_as_is,
        k=int(k),
        chunk=int(chunk),
        query_block=int(query_block),
        exact=bound <= _EXACT_F32,
        integer=True,
    )


def hamming_topk(
    queries: ArrayLike, db: ArrayLike, k: int, *, chunk: int = 16384, query_block: int = 1024
) -> tuple[jax.Array, jax.Array]:
    """Exact k nearest packed bit codes by Hamming distance (XOR + popcount on uint32 words).

    Ties to the lower database index.

    Args:
        queries: [Q, B] uint8 packed bits.
        db: [N, B] uint8 packed bits.
        k: neighbours per query, 1 ≤ k ≤ N.
        chunk: database rows per sub-chunk (a positive int).
        query_block: queries per block (a positive int).

    Returns:
        (distances [Q, k] int32 ascending, indices [Q, k] int32).

    Raises:
        ValueError: the codes are not non-empty uint8 matrices of one width, ``k`` is not in [1, N], or
            ``chunk`` or ``query_block`` is not a positive int.

    Example:
        >>> import numpy as np
        >>> from geojax.search import scan
        >>> db = np.array([[0], [0b1111], [0b1011]], np.uint8)
        >>> print(*scan.hamming_topk(np.array([[0b1011]], np.uint8), db, 2))
        [[0 1]] [[2 1]]
    """
    _check_codes(queries, db)
    _check_search(k, db.shape[0], chunk, query_block)
    return _search(
        _as_words(jnp.asarray(queries)),
        _as_words(jnp.asarray(db)),
        NO_AUX,
        kernel=hamming_kernel,
        prepare=_queries_as_is,
        k=int(k),
        chunk=int(chunk),
        query_block=int(query_block),
        exact=db.shape[1] * 8 <= _EXACT_F32,
        integer=True,
    )


def _check_pq_search(queries, pq: PQ, codes) -> None:
    _checks.check_rank(pq.codebooks, "pq.codebooks", 3)
    m, k, ds = pq.codebooks.shape
    _checks.check_matrix(queries, "queries")
    _checks.check_floating(queries, "queries")
    _checks.check_matrix(codes, "codes")
    want = jnp.uint8 if k <= 256 else jnp.uint16
    _checks.check_dtype(codes, "codes", want)
    if queries.shape[1] != m * ds:
        raise ValueError(f"queries must have {m * ds} columns (pq's m·D/m), got {tuple(queries.shape)}")
    if codes.shape[1] != m:
        raise ValueError(f"codes must have {m} columns (one per PQ sub-space), got {tuple(codes.shape)}")


def pq_topk(
    queries: ArrayLike,
    pq: PQ,
    codes: ArrayLike,
    k: int,
    *,
    chunk: int = 4096,
    query_block: int = 32,
) -> tuple[jax.Array, jax.Array]:
    """Exact k nearest PQ codes by asymmetric distance computation (Jégou et al. 2011 §III-A, eq. 13).

    Ties to the lower database index. Concrete arguments with bad values are rejected. Traced ones cannot be
    read: then a non-finite query gets NaN distances, and non-finite centroids or an out-of-range code make
    every distance NaN (the indices of such rows mean nothing).

    Args:
        queries: [Q, D] finite floating query vectors.
        pq: a fitted :class:`geojax.quantize.PQ` with finite codebooks.
        codes: [N, m] uint8/uint16 PQ codes in [0, 2^nbits).
        k: neighbours per query, 1 ≤ k ≤ N.
        chunk: database rows per sub-chunk (a positive int).
        query_block: queries per block (a positive int).

    Returns:
        (distances [Q, k] float32 ascending, indices [Q, k] int32).

    Raises:
        ValueError: the shapes or dtypes do not match ``pq``, ``k`` is not in [1, N], ``chunk`` or
            ``query_block`` is not a positive int, a concrete query or centroid holds NaN or ±inf, or a
            concrete code lies outside [0, 2^nbits).

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)),
        §III-A and eq. 13.

    Example:
        >>> import jax
        >>> from geojax import quantize
        >>> from geojax.search import scan
        >>> x = jax.random.normal(jax.random.key(0), (64, 4))
        >>> pq = quantize.pq_fit(x, m=2, nbits=2, key=jax.random.key(1), iters=5)
        >>> codes = quantize.pq_encode(pq, x)
        >>> distances, indices = scan.pq_topk(x[:2], pq, codes, 3)
        >>> distances.shape, indices.dtype
        ((2, 3), dtype('int32'))
    """
    _check_pq_search(queries, pq, codes)
    _check_search(k, codes.shape[0], chunk, query_block)
    _checks.check_finite(queries, "queries")
    _checks.check_finite(pq.codebooks, "pq.codebooks")
    n_centroids = pq.codebooks.shape[1]
    _checks.check_index_range(codes, "codes", n_centroids, f"{n_centroids} centroids per sub-space")
    queries, codes = jnp.asarray(queries, _F32), jnp.asarray(codes)
    d, i = _search(
        queries,
        codes,
        pq.codebooks,
        kernel=pq_kernel,
        prepare=pq_tables,
        k=int(k),
        chunk=int(chunk),
        query_block=int(query_block),
        exact=True,
        integer=False,
    )
    bad = (
        ~jnp.all(jnp.isfinite(queries), axis=1)
        | ~jnp.all(jnp.isfinite(pq.codebooks))
        | (jnp.max(codes).astype(jnp.int32) >= n_centroids)
    )
    return jnp.where(bad[:, None], jnp.nan, d), i


__all__: list[str] = [
    "use_cpu_cores",
    "hamming_distances",
    "hamming_topk",
    "pq_distances",
    "pq_topk",
    "torus_distances",
    "torus_topk",
]
