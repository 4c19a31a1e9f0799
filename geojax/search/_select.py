"""The exact top-k selection of the scans (:mod:`geojax.search.scan`): the database laid out in
sub-chunks and selection blocks (:func:`plan`, :func:`layout`), searched one block of queries at a time
(:func:`blocked`).

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
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax.search import merge

_GROUP = 32
_SUPER = 16  # groups per supergroup, the first stage of a selection
# Codes per selection block: its sub-chunks are scanned in one loop whose order XLA picks; above the CPU's
# last-level cache (32 MiB on the 2-core AMD EPYC where this was set) each query re-read them from memory
# (1,000 × 1M 8-bit torus codes: 5.2 s with the 62 MB of one block, 1.4 s with 8 MiB blocks). On a 2-core
# Intel Xeon (AVX-512) 8 MiB was also the fastest of 8, 32 and 128 MiB (1.47, 1.52 and 2.25 s).
_BLOCK_BYTES = 8 << 20


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
        return _Ranking(jnp.float32, jnp.finfo(jnp.float32).max, platform)
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


def blocked(
    queries: jax.Array,
    rows: jax.Array,
    cols: jax.Array,
    aux: ArrayLike,
    *,
    kernel: Callable,
    prepare: Callable,
    n: int,
    k: int,
    group: int,
    query_block: int,
    exact: bool,
    platform: str | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Keys and indices [q, k] of queries [q, ...] in blocks of ``query_block`` (``lax.map``).

    The exact top-k of each query block over the laid-out database, in the two stages of the docstring of
    ``geojax.search._select``: keys are negated distances, higher = nearer, ties to the lower database index.

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


# Public through geojax.search.scan, the module users import them from: documented (and pickled) by its name.
for _public in (plan, layout, blocked):
    _public.__module__ = "geojax.search.scan"
