"""Exact top-k scans over compact codes (Stowell 2026, §4; Jégou et al. 2011, §III-A for PQ), chunked and
jit-able.

Every search returns ``(distances [Q, k], indices [Q, k] int32)`` in faiss's order: ascending distance, ties
to the lower database index. Queries run in blocks of ``query_block`` rows (``lax.map``); the database is
cut into sub-chunks of about ``chunk`` rows, stored column-major once per call, and sub-chunks are gathered
into selection blocks (``lax.scan``), so memory stays bounded.

For each selection block the exact top-k is found in two stages: the minimum distance of each group of
``_GROUP`` consecutive rows, fused with the distance computation into one loop over sub-chunks, then queries,
then rows (each sub-chunk stays in cache while every query of the block reads it, and XLA splits the loop
across the CPU's threads); the k best groups by (minimum, group index), found among the groups of the k best
supergroups of ``_SUPER`` consecutive groups; and the top-k of the k·_GROUP distances of those groups,
recomputed. The k nearest rows always lie in those groups (any group outside them is beaten by k group
minima, each a distinct row), and the k best groups in those supergroups, by the same argument. Candidates
are kept in database order and merged with the running result placed first, so ``lax.top_k``'s
lower-index-first rule carries the tie order across blocks. Integer distances are ranked as float32 keys
(exact below 2^24); above that bound as int32 keys, which on a CPU ``lax.top_k`` gets as float32 bit
patterns that it orders as the integers (:func:`geojax.search.merge.top_k`; ``lax.top_k`` on int32 sorts
the row, 15–100× slower on XLA:CPU). A selection's first top-k ranks one key per 16·32 rows; with single
rows (k too large for groups) it ranks every row's key.

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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks, quantize
from geojax.quantize import PQ
from geojax.search import merge

_F32 = jnp.float32
_GROUP = 32
_SUPER = 16  # groups per supergroup, the first stage of a selection
_EXACT_F32 = 1 << 24
SELECT = 1 << 23  # group minima held per query block between two selections (elements)
# Codes per selection block: its sub-chunks are scanned in one loop whose order XLA picks; above the CPU's
# last-level cache (32 MiB here) each query re-read them from memory (1,000 × 1M 8-bit torus codes: 5.2 s
# with the 62 MB of one block, 1.4 s with 8 MiB blocks).
_BLOCK_BYTES = 8 << 20


# --------------------------------------------------------------------------------------------------------
# Distance kernels: kernel(qdata [b, W, ...], rows, shared) -> [b, n] distances. With shared=True, rows are
# one database chunk stored column-major [W, n] (every query of the block against every row: the loops run
# along contiguous rows, which vectorises); with shared=False, rows are [b, n, W], row i's for query i; with
# shared=BLOCKS, rows are (blocks [B, W, n] of column-major rows, numbers [b, m]): query i against blocks
# numbers[i] → [b, m, n] (inverted lists), each column read straight from the blocks, not copied out first.
# --------------------------------------------------------------------------------------------------------

_H = 0x80808080  # high bit of each byte
_LOW_BITS = 0x01010101
_EVEN_BYTES = 0x00FF00FF
_MAX_UNROLL = 128
BLOCKS = "blocks"  # the kernels' third layout: per-query blocks of column-major rows


def _sum_columns(term, q: jax.Array, rows: jax.Array, shared: bool, acc_dtype) -> jax.Array:
    """Σ_w term(q[:, w], rows' column w), unrolled for narrow codes, a fori_loop for wide ones.

    Shared rows [W, *S] give [b, *S]; per-query rows [b, n, W] give [b, n]; per-query blocks
    (blocks [B, W, n], numbers [b, m]) (shared = BLOCKS) give [b, m, n].
    """
    width = q.shape[1]

    def column(w):
        qw = lax.dynamic_index_in_dim(q, w, axis=1, keepdims=False)
        if shared == BLOCKS:
            blocks, numbers = rows
            return term(qw[:, None, None], blocks[numbers, w]).astype(acc_dtype)
        if shared:
            qw = qw.reshape(qw.shape[0], *([1] * (rows.ndim - 1)))
            return term(qw, lax.dynamic_index_in_dim(rows, w, axis=0, keepdims=True)).astype(acc_dtype)
        return term(qw[:, None], lax.dynamic_index_in_dim(rows, w, axis=2, keepdims=False)).astype(acc_dtype)

    if width <= _MAX_UNROLL:
        total = column(0)
        for w in range(1, width):
            total = total + column(w)
        return total
    return lax.fori_loop(1, width, lambda w, acc: acc + column(w), column(0))


def _wrap_byte_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """Per-byte flat-torus distance min((a−b) mod 256, (b−a) mod 256) on uint8 (overflow is the torus)."""
    return jnp.minimum(a - b, b - a)


def _lane_mask(bits: int, lane_bit: int) -> int:
    """uint32 mask with bit ``lane_bit`` of every ``bits``-bit lane set."""
    return sum(1 << (i + lane_bit) for i in range(0, 32, bits))


def _wrap_word_distance(a: jax.Array, b: jax.Array, bits: int = 8) -> jax.Array:
    """Per-lane flat-torus distance of 32/bits codes packed in a uint32 word (SWAR), summed into two
    16-bit lanes.

    d = a − b per ``bits``-bit lane without borrows between lanes; min(d, 2^b − d) = (d XOR (2^b − 1)·s) + s
    with s = d ≥ 2^(b−1), which never carries out of a lane; then neighbouring lanes are added pairwise
    until bytes 0+1 and 2+3 sit in the low and high 16 bits. One word adds at most 2^(b−1)·16/b to a
    16-bit lane (256 for bytes, 32 for nibbles, 16 for 2-bit lanes).
    """
    hi, low = jnp.uint32(_lane_mask(bits, bits - 1)), jnp.uint32(_lane_mask(bits, 0))
    d = ((a | hi) - (b & ~hi)) ^ ((a ^ ~b) & hi)
    s = (d >> (bits - 1)) & low
    r = (d ^ (s * jnp.uint32((1 << bits) - 1))) + s
    width = bits
    while width < 16:
        keep = jnp.uint32(sum(((1 << width) - 1) << i for i in range(0, 32, 2 * width)))
        r = (r & keep) + ((r >> width) & keep)
        width *= 2
    return r


def _word_limit(bits: int) -> int:
    """Most uint32 words whose lane sums cannot overflow a 16-bit lane (255 bytes, 2,047 for nibbles …)."""
    return 0xFFFF // ((1 << (bits - 1)) * 16 // bits)


def _torus_words_kernel(q: jax.Array, rows: jax.Array, shared: bool, *, bits: int = 8) -> jax.Array:
    """Wraparound L1 on packed b-bit codes viewed as uint32 words (≤ :func:`_word_limit` words)."""
    lanes = _sum_columns(functools.partial(_wrap_word_distance, bits=bits), q, rows, shared, jnp.uint32)
    return ((lanes & jnp.uint32(0xFFFF)) + (lanes >> 16)).astype(jnp.int32)


def _torus_bytes_kernel(q: jax.Array, rows: jax.Array, shared: bool, *, p: int, shift: int = 0) -> jax.Array:
    """Wraparound Lp^p on uint8 codes, one byte column at a time, int32 sums. b-bit codes come shifted left
    by ``shift`` = 8 − b, so that uint8 overflow wraps them at 2^b; the distance is shifted back."""

    def term(a, b):
        d = jnp.right_shift(_wrap_byte_distance(a, b), jnp.uint8(shift)).astype(jnp.int32)
        return d if p == 1 else d * d

    return _sum_columns(term, q, rows, shared, jnp.int32)


# One object per (bits, p), so that jit's static-argument cache hits on repeated calls.
_TORUS_WORDS_KERNELS = {b: functools.partial(_torus_words_kernel, bits=b) for b in (2, 4, 8)}
_TORUS_BYTES_KERNELS = {
    (b, p): functools.partial(_torus_bytes_kernel, p=p, shift=8 - b) for b in (2, 4, 8) for p in (1, 2)
}


def _hamming_kernel(q: jax.Array, rows: jax.Array, shared: bool) -> jax.Array:
    """Hamming distance of uint32 words: Σ popcount(a XOR b), int32."""
    return _sum_columns(lambda a, b: lax.population_count(a ^ b), q, rows, shared, jnp.uint32).astype(
        jnp.int32
    )


def _pq_kernel(tables: jax.Array, rows: jax.Array, shared: bool) -> jax.Array:
    """Asymmetric distance Σ_j T[j, code_j, q] (Jégou et al. 2011 eq. 13), j = 0 … m−1 in order.

    tables: [m, K, b], queries last, so that one code's entries for consecutive queries are contiguous (the
    scan's loop over queries then reads a row of the table); shared rows: codes [m, *S] → [b, *S];
    blocks (shared = BLOCKS): (codes [B, m, n], numbers [b, g]) → [b, g, n]; otherwise [b, n, m] → [b, n].
    """
    codes = rows if shared == BLOCKS else rows.astype(jnp.int32)
    total = None
    for j in range(tables.shape[0]):
        if shared == BLOCKS:
            blocks, numbers = codes
            b, g = numbers.shape
            column = blocks[numbers, j].astype(jnp.int32).reshape(b, -1)
            part = jnp.take_along_axis(tables[j].T, column, axis=1).reshape(b, g, -1)
        elif shared:
            part = jnp.moveaxis(jnp.take(tables[j], codes[j], axis=0), -1, 0)
        else:
            part = jnp.take_along_axis(tables[j].T, codes[:, :, j], axis=1)
        total = part if total is None else total + part
    return total


@jax.jit
def _pq_tables(codebooks: jax.Array, queries: jax.Array) -> jax.Array:
    """Squared distances of each query sub-vector to every centroid (Jégou et al. 2011 eq. 13's tables).

    Summed as Σ_t (q_t − c_t)² in coordinate order, one coordinate per trip of a loop, so a query's table has
    the same bits in any batch of queries and in any search that uses it (a dot product's rounding changes
    with the batch's shape, which would let an inverted-file search, the flat scan and a recomputation rank
    near-equal rows differently). The loop also makes the tables an array written once per query block:
    unrolled, XLA fused the sum into the scan's table reads and recomputed 3·D/m operations for every entry
    read (1,000 × 1M PQ(8×8) codes: 4.6× slower), in a rounding of its own.

    codebooks: [m, K, D/m], queries: [b, D] → [m, K, b] float32.
    """
    m, _, ds = codebooks.shape
    qs = queries.astype(_F32).reshape(queries.shape[0], m, ds).transpose(1, 2, 0)  # [m, D/m, b]
    centroids = codebooks.astype(_F32)

    def term(t):
        q_t = lax.dynamic_index_in_dim(qs, t, axis=1, keepdims=False)[:, None, :]  # [m, 1, b]
        diff = q_t - lax.dynamic_index_in_dim(centroids, t, axis=2, keepdims=True)  # [m, K, b]
        return diff * diff

    zeros = jnp.zeros((m, codebooks.shape[1], queries.shape[0]), _F32)
    return lax.fori_loop(0, ds, lambda t, total: total + term(t), zeros)


# --------------------------------------------------------------------------------------------------------
# The chunked scan.
# --------------------------------------------------------------------------------------------------------


def _group_minima(kernel, qdata, cols, start, n, group):
    """[b, c/group]: the smallest distance in each group of ``group`` consecutive rows of one sub-chunk.

    cols: the sub-chunk as [W, c/group, group] with cols[w, g, j] = row g·group + j's column w, so that the
    kernel gives distances [b, c/group, group] whose minimum over the last axis fuses with the kernel into
    one loop. Rows past the database end count as the dtype's maximum, above any real distance.
    """
    dist = kernel(qdata, cols, True)
    index = start + jnp.arange(cols.shape[1] * group).reshape(cols.shape[1], group)
    if jnp.issubdtype(dist.dtype, jnp.floating):
        # A chain of minimums: XLA's CPU backend hands a float min-reduction here to a library fusion that
        # ran the PQ scan about 3× slower.
        masked = jnp.where(index[None] < n, dist, jnp.finfo(dist.dtype).max)
        return functools.reduce(jnp.minimum, [masked[..., j] for j in range(group)])
    return jnp.min(jnp.where(index[None] < n, dist, jnp.iinfo(dist.dtype).max), axis=-1)


class _Ranking(NamedTuple):
    """How a scan ranks its rows: keys of ``dtype`` (float32, or int32 for integer distances above 2^24),
    ``big`` the largest key magnitude (empty slots), ``platform`` the platform of the devices it runs on."""

    dtype: Any
    big: Any
    platform: str | None

    def top_k(self, keys: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
        """:func:`geojax.search.merge.top_k` on this platform (int32 keys at float32 speed on a CPU)."""
        return merge.top_k(keys, k, platform=self.platform)


def _ranking(exact: bool, platform: str | None) -> _Ranking:
    """float32 keys when integer distances stay below 2^24 (float32 holds them exactly), else int32."""
    if exact:
        return _Ranking(_F32, jnp.finfo(_F32).max, platform)
    return _Ranking(jnp.int32, jnp.iinfo(jnp.int32).max, platform)


def _best(keys, index, k, ranking: _Ranking):
    """The k largest ``keys`` per row and their ``index`` entries (same shape); positions in database order
    make equal keys keep the lower index first."""
    v, j = ranking.top_k(keys, k)
    return v, jnp.take_along_axis(index, j, axis=1)


def _select(kernel, qdata, rows, minima, start, n, k, group, ranking: _Ranking):
    """Top-k (keys = −distance, global indices) of one query block against one selection block.

    rows: the block's rows [s·c, W] (row-major, for gathering candidates); minima: [s, b, c/group], the
    group minima of its s sub-chunks (the distances themselves when group = 1). With group = 1 the k best
    rows are the result. Otherwise the same argument as for rows narrows the groups twice: the k best groups
    lie in the k best supergroups of _SUPER consecutive groups (by minimum, then index), whose k·_SUPER
    group minima are ranked; then the k·group rows of the k best groups are recomputed and ranked.
    """
    s, b, groups = minima.shape
    keys = -minima.astype(ranking.dtype)
    if group == 1:  # the k best of each sub-chunk, then of those, in database order
        v, best = ranking.top_k(keys, k)  # [s, b, k]
        best = best + (jnp.arange(s, dtype=jnp.int32) * groups)[:, None, None]
        v, best = (jnp.transpose(x, (1, 0, 2)).reshape(b, s * k) for x in (v, best))
        v, best = _best(v, best, k, ranking)
        return v, start + best
    supers = jnp.max(keys.reshape(s, b, groups // _SUPER, _SUPER), axis=-1)  # [s, b, groups/_SUPER]
    supers = jnp.transpose(supers, (1, 0, 2)).reshape(b, s * groups // _SUPER)
    _, top = ranking.top_k(supers, k)
    top = jnp.sort(top, axis=-1)  # database order, for the tie rule
    cand = (top[:, :, None] * _SUPER + jnp.arange(_SUPER)).reshape(b, k * _SUPER)  # block-local groups
    cand_keys = keys[cand // groups, jnp.arange(b)[:, None], cand % groups]
    _, best = _best(cand_keys, cand, k, ranking)
    best = jnp.sort(best, axis=-1)
    cand = (best[:, :, None] * group + jnp.arange(group)).reshape(b, k * group)
    dist = kernel(qdata, rows[cand], False)
    v, i = _best(jnp.where(start + cand < n, -dist.astype(ranking.dtype), -ranking.big), cand, k, ranking)
    return v, start + i


def _scan_topk(kernel, qdata, b, rows, cols, n, k, *, group, ranking: _Ranking):
    """Top-k over the whole database for one block of b queries: per selection block, the group minima of its
    sub-chunks, then one selection, merged with the running result in database order."""
    blocks, s, _, groups, _ = cols.shape
    c = groups * group

    def step(carry, xs):
        block_rows, block_cols, start = xs
        # [s, b, c/group] as one loop over sub-chunks, then queries: each sub-chunk stays in cache.
        minima = jax.vmap(lambda a, t: _group_minima(kernel, qdata, a, t, n, group))(
            block_cols, start + jnp.arange(s, dtype=jnp.int32) * c
        )
        v, i = _select(kernel, qdata, block_rows, minima, start, n, k, group, ranking)
        if blocks == 1:
            return (v, i), None
        merged_v = jnp.concatenate([carry[0], v], axis=1)  # earlier blocks first: lower indices win ties
        merged_i = jnp.concatenate([carry[1], i], axis=1)
        mv, mj = ranking.top_k(merged_v, k)
        return (mv, jnp.take_along_axis(merged_i, mj, axis=1)), None

    init = (jnp.full((b, k), -ranking.big, ranking.dtype), jnp.zeros((b, k), jnp.int32))
    starts = jnp.arange(blocks, dtype=jnp.int32) * (s * c)
    (v, i), _ = lax.scan(step, init, (rows, cols, starts))
    return v, i


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def plan(n: int, k: int, chunk: int, qb: int, select: int, row_bytes: int) -> tuple[int, int, int, int]:
    """The scan's layout for n rows: (rows per sub-chunk c, sub-chunks per block s, group, blocks).

    s is the sub-chunks per selection block and blocks the number of selection blocks. Groups of 32 rows when
    k·32 candidates are few against a sub-chunk, else single rows. A selection block holds as many sub-chunks
    as keep its group minima within ``select`` elements per query block and its codes (``row_bytes`` per row)
    within 8 MiB; c is then shrunk (to a multiple of the group) so that the blocks cover n with little
    padding.

    Args:
        n: database rows.
        k: neighbours per query.
        chunk: the wanted rows per sub-chunk.
        qb: queries per block.
        select: group minima held per query block between two selections (elements).
        row_bytes: bytes per database row in the kernel's operand form.

    Returns:
        (c, s, group, blocks), Python ints.

    Example:
        >>> import numpy as np
        >>> from geojax.search import scan
        >>> scan.plan(1000, 5, 16384, 256, scan.SELECT, 4)
        (2560, 1, 32, 1)
    """
    rows = max(min(chunk, n), k)
    group = _GROUP if k * _GROUP * 4 <= rows else 1
    rows = _round_up(rows, group)
    total = -(-n // rows)
    s_max = max(1, min(select // (qb * (rows // group)), _BLOCK_BYTES // (rows * row_bytes)))
    blocks = -(-total // s_max)
    s = -(-total // blocks)
    unit = group * _SUPER if group > 1 else 1
    c = _round_up(max(-(-n // (blocks * s)), k * unit), unit)
    return c, s, group, blocks


@functools.partial(jax.jit, static_argnames="plan")
def layout(db: jax.Array, plan: tuple[int, int, int, int]) -> tuple[jax.Array, jax.Array]:
    """The database padded to whole selection blocks, as rows and as sub-chunk columns.

    A jitted function of its own, so that the column copy is written once: inside the search XLA would fuse
    the transpose into the distance loop and read the rows with a stride.

    Args:
        db: [n, W] database in the kernel's operand form.
        plan: (c, s, group, blocks) of :func:`plan`.

    Returns:
        (rows [blocks, s·c, W], columns [blocks, s, W, c/group, group]).
    """
    c, s, group, blocks = plan
    width = db.shape[1]
    padded = jnp.pad(db, ((0, blocks * s * c - db.shape[0]), (0, 0)))
    cols = padded.reshape(blocks, s, c // group, group, width).transpose(0, 1, 4, 2, 3)
    return padded.reshape(blocks, s * c, width), cols


def blocked(queries, rows, cols, aux, *, kernel, prepare, n, k, group, query_block, exact, platform=None):
    """Keys and indices [q, k] of queries [q, ...] in blocks of ``query_block`` (``lax.map``).

    The exact top-k of each query block over the laid-out database (module docstring): keys are negated
    distances, higher = nearer, ties to the lower database index.

    Args:
        queries: [q, ...] queries in the kernel's operand form.
        rows: [blocks, s·c, W] database rows of :func:`layout`.
        cols: [blocks, s, W, c/group, group] database columns of :func:`layout`.
        aux: the kernel's extra data (PQ: codebooks; else ``NO_AUX``).
        kernel: the distance kernel.
        prepare: ``prepare(aux, query_block)`` → the kernel's per-query data (PQ: lookup tables).
        n: the real database rows (the rest is padding).
        k: neighbours per query.
        group: the group size of the plan.
        query_block: queries per block.
        exact: whether integer keys fit float32 (else int32 keys, ranked as float32 bit patterns on a CPU).
        platform: the platform of the devices the search runs on ("cpu", "gpu", …); None: JAX's default
            backend.

    Returns:
        (keys [q, k], indices [q, k] int32).
    """
    q = queries.shape[0]
    qb = min(query_block, q)
    ranking = _ranking(exact, platform)
    n_blocks = -(-q // qb)
    padded = jnp.pad(queries, ((0, n_blocks * qb - q),) + ((0, 0),) * (queries.ndim - 1))

    def block(qx):
        qdata = prepare(aux, qx)
        return _scan_topk(kernel, qdata, qb, rows, cols, n, k, group=group, ranking=ranking)

    v, i = lax.map(block, padded.reshape(n_blocks, qb, *queries.shape[1:]))
    return v.reshape(n_blocks * qb, k)[:q], i.reshape(n_blocks * qb, k)[:q]


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
        return _hamming_kernel, _as_words(codes)
    if p == 1 and -(-codes.shape[1] // 4) <= _word_limit(bits):
        return _TORUS_WORDS_KERNELS[bits], _as_words(codes)
    if bits < 8:
        codes = jnp.left_shift(quantize.torus_unpack(codes, bits), jnp.uint8(8 - bits))
    return _TORUS_BYTES_KERNELS[bits, p], codes


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
    return Scan(_hamming_kernel, _queries_as_is, _as_words, width * 8 <= _EXACT_F32, True, 16384, 1024)


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


PQ_SCAN = Scan(_pq_kernel, _pq_tables, _as_is, True, False, 4096, 32, -1)


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
    return _hamming_kernel(_as_words(jnp.asarray(a)), _as_words(jnp.asarray(b)).T, True)


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
    return _pq_kernel(_pq_tables(pq.codebooks, jnp.asarray(queries)), jnp.asarray(codes).T, True)


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
        kernel=_hamming_kernel,
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
        kernel=_pq_kernel,
        prepare=_pq_tables,
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
