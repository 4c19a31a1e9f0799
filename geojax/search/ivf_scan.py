"""The inverted-file index's lists on the devices and its search program (:mod:`geojax.search.ivf`, whose
module docstring gives the method): the lists' blocks dealt over the devices, the block and group sizes, and
the per-device scan of the probed blocks with its selection by groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from geojax.search import scan
from geojax.search.merge import merge_topk, order_bits, select_topk
from geojax.search.placement import NO_ID

_MIN_BLOCK, _MAX_BLOCK = 32, 1024  # the range of block sizes chosen from the lists' sizes
_MAX_GROUP = 32  # rows per group of a search's selection
_EMPTY = np.int32(np.iinfo(np.int32).max)  # the order key of no row (above every distance's)


class Layout(NamedTuple):
    """The lists' blocks dealt over the devices (:func:`build_layout`), the arrays a search reads.

    Attributes:
        table: [shards·nlist, most blocks] int32 device array: each list's local block numbers, −1 for none.
        blocks: [shards·B_max, W', block] device array: the scan's operand, column-major per block.
        ids: [shards·B_max, block] int32 device array: the rows' ids, ``NO_ID`` in empty slots.
        fill: [shards·B_max] int32 device array: each block's rows (the first ones of the block).
        counts: [shards, nlist] NumPy array: blocks of each list on each shard.
    """

    table: jax.Array
    blocks: jax.Array
    ids: jax.Array
    fill: jax.Array
    counts: np.ndarray


def auto_block(sizes: np.ndarray, shards: int) -> int:
    """Rows per block for lists dealt over devices: a list then mostly fills one block.

    The power of two at or above the mean rows per non-empty list on a device, within [32, 1024] (fewer,
    fuller blocks scan faster; smaller ones waste less on short lists).

    Args:
        sizes: [nlist] rows per list.
        shards: the devices the lists' blocks are dealt over.

    Returns:
        The block size, a power of two in [32, 1024].

    Example:
        >>> import numpy as np
        >>> from geojax.search import ivf_scan
        >>> ivf_scan.auto_block(np.array([300, 0, 500]), 2)  # 200 rows per list on a device
        256
    """
    filled = sizes[sizes > 0]
    mean = float(filled.mean()) / shards if len(filled) else 1.0
    return int(min(_MAX_BLOCK, max(_MIN_BLOCK, 1 << max(0, math.ceil(math.log2(max(mean, 1.0)))))))


def build_layout(
    codes: list[np.ndarray],
    ids: list[np.ndarray],
    block: int,
    spec: scan.Scan,
    put: Callable[[Callable[[int], np.ndarray], tuple[int, ...]], jax.Array],
    shards: int,
) -> Layout:
    """The lists as blocks of ``block`` rows dealt round-robin over ``shards`` devices.

    Block j of a list goes to shard j mod shards, as that shard's next block.

    Args:
        codes: per list, its rows' codes [n_l, width] in ascending id order.
        ids: per list, its rows' int32 ids [n_l], ascending.
        block: rows per block.
        spec: the codec's scan (its ``operand`` form is what the devices hold).
        put: ``put(shard → NumPy rows, global shape)`` → a device array sharded over the shards
            (:func:`geojax.search.placement.put_shards` with the index's mesh).
        shards: the devices along the mesh's rows axis.

    Returns:
        The :class:`Layout`.
    """
    nlist = len(codes)
    sizes = np.array([len(i) for i in ids], np.int64)
    b = block
    nblocks = -(-sizes // b)  # blocks per list
    # Block j of list l goes to shard j mod shards, as that shard's next block.
    counts = np.stack([(nblocks - s + shards - 1) // shards for s in range(shards)])  # [shards, nlist]
    most_blocks = max(1, int(counts.sum(1).max()))
    most_per_list = max(1, int(counts.max()))
    width = codes[0].shape[1]
    held = np.zeros((shards, most_blocks, b, width), codes[0].dtype)
    held_ids = np.full((shards, most_blocks, b), NO_ID, np.int32)
    table = np.full((shards, nlist, most_per_list), -1, np.int32)
    first = np.concatenate([np.zeros((shards, 1), np.int64), np.cumsum(counts, 1)], 1)  # [shards, nlist + 1]
    for lst in np.flatnonzero(sizes):
        n = int(sizes[lst])
        pos = np.arange(n)
        j = pos // b
        shard = j % shards
        local = first[shard, lst] + j // shards
        held[shard, local, pos % b] = codes[lst]
        held_ids[shard, local, pos % b] = ids[lst]
        for s in range(shards):
            table[s, lst, : counts[s, lst]] = first[s, lst] + np.arange(counts[s, lst])

    operand = [
        np.asarray(spec.operand(jnp.asarray(held[s].reshape(most_blocks * b, width))))
        .reshape(most_blocks, b, -1)
        .transpose(0, 2, 1)  # each block column-major: the kernel's loops run along its rows
        for s in range(shards)
    ]
    op_width = operand[0].shape[1]
    return Layout(
        put(lambda s: table[s], (shards * nlist, most_per_list)),
        put(lambda s: np.ascontiguousarray(operand[s]), (shards * most_blocks, op_width, b)),
        put(lambda s: held_ids[s], (shards * most_blocks, b)),
        put(lambda s: np.sum(held_ids[s] < NO_ID, axis=1, dtype=np.int32), (shards * most_blocks,)),
        counts,
    )


def group_rows(block: int, per_query: int, k: int) -> int:
    """Rows per group of a search's selection: a power of two near √(block·per_query/k).

    Nearest on a log scale, in [1, 32] and at most ``block``: about as many groups per query as rows
    recomputed for its k best groups.

    Args:
        block: rows per block.
        per_query: the most blocks a query scans on a device.
        k: neighbours per query.

    Returns:
        A power of two dividing ``block``.

    Example:
        >>> from geojax.search import ivf_scan
        >>> ivf_scan.group_rows(1024, 1, 10), ivf_scan.group_rows(1024, 8, 100), ivf_scan.group_rows(32, 4, 1)
        (8, 8, 16)
    """
    target = math.sqrt(block * per_query / k)
    return int(min(block, _MAX_GROUP, 1 << max(0, round(math.log2(max(target, 1.0))))))


def _group_leaders(
    dist: jax.Array, rows: jax.Array, ids: jax.Array, m: int, packed: bool
) -> tuple[jax.Array, jax.Array]:
    """Each group of m consecutive rows' leader: its smallest distance (as an order key) and the id of its
    first row at that distance, over the first ``rows`` rows.

    Unlike the flat scan's ``_select._group_minima`` (minima only: there a row's position is its id), the
    leader's id is kept, since groups of different blocks are ranked against each other by (minimum, id).

    dist [c, n] distances, rows [c, 1] filled rows, ids [c, n] (ascending within a row) → (keys [c, n/m]
    int32, the empty key where a group has no row; ids [c, n/m]). ``packed``: integer distances below
    2^31/m, ranked with their place in the group as one int32 (one reduction instead of two).
    """
    c, n = dist.shape
    filled = jnp.arange(n) < rows
    if packed:
        key = jnp.where(filled, dist * m + jnp.arange(n, dtype=jnp.int32) % m, _EMPTY)
        least = jnp.min(key.reshape(c, n // m, m), axis=2)
        minima, first = jnp.where(least == _EMPTY, _EMPTY, least // m), least % m
    else:
        grouped = jnp.where(filled, order_bits(dist), _EMPTY).reshape(c, n // m, m)
        minima = jnp.min(grouped, axis=2)
        first = jnp.min(jnp.where(grouped == minima[:, :, None], jnp.arange(m), m), axis=2)
    return minima, jnp.take_along_axis(ids, jnp.arange(0, n, m) + first, axis=1)


def shard_search(
    queries: jax.Array,
    probe: jax.Array,
    table: jax.Array,
    blocks: jax.Array,
    ids: jax.Array,
    fill: jax.Array,
    aux: jax.Array,
    *,
    spec: scan.Scan,
    axis: str,
    k: int,
    pairs: int,
    per_query: int,
    chunk: int,
    group: int,
    platform: str,
) -> tuple[jax.Array, jax.Array]:
    """One device's top-k of every query over its blocks of the probed lists, then over all devices.

    Merged over the devices of ``axis`` by (distance, id), ranked as suits ``platform`` (the mesh's;
    :func:`merge.select_topk`).

    The work is the (query, block) pairs that exist on this device, at most ``pairs`` of them, scanned
    ``chunk`` pairs at a time, whatever the number of blocks each query needs (no query padded to the
    busiest). Each pair gives, for every group of ``group`` consecutive rows of its block, the group's
    smallest distance and the id of its first row at that distance, into its query's row of a group table
    (``per_query`` blocks wide). Each query's k best groups by (minimum, id) hold its k nearest rows: a row
    outside them is beaten by the k group minima, distinct rows, each ahead of it by distance or, at equal
    distance, by id (rows ascend by id in a block, so a group's first row at its minimum has the group's
    lowest id there). Those k·group rows are recomputed and ranked by (distance, id)
    (:func:`geojax.search.merge.merge_topk`).

    Run under ``jax.shard_map`` over ``axis`` (:class:`geojax.search.IndexIVF` does).

    Args:
        queries: [Q, ...] the codec's scan queries.
        probe: [Q, nprobe] int32 probed lists.
        table: [nlist, most] this device's block numbers per list (−1: none).
        blocks: [B_max, W', block] operand rows, column-major per block.
        ids: [B_max, block] int32 ids (``NO_ID`` empty).
        fill: [B_max] int32 rows per block.
        aux: the scan's ``aux`` (PQ: codebooks).
        spec: the codec's scan.
        axis: the mesh axis the blocks are dealt over.
        k: neighbours per query.
        pairs: the most (query, block) pairs on a device (a static size).
        per_query: the most blocks a query scans on a device.
        chunk: pairs scanned per step.
        group: rows per group of the selection (:func:`group_rows`).
        platform: the devices' platform.

    Returns:
        (distances [Q, k] ascending, the largest value where empty; ids [Q, k] int32, −1 where empty).
    """
    nq = queries.shape[0]
    b = blocks.shape[2]
    groups = b // group
    slots = table[probe].reshape(nq, -1)  # [Q, nprobe·most], −1 where a list has no more blocks here
    real = slots >= 0
    rank = jnp.cumsum(real, axis=1) - 1  # each real slot's place among its query's
    # The real pairs in (query, probe) order, then empty ones (index −1) up to a multiple of chunk.
    (flat,) = jnp.nonzero(real.reshape(-1), size=pairs + (-pairs % chunk), fill_value=-1)
    ok = flat >= 0
    safe = jnp.maximum(flat, 0)
    pair_query = safe // slots.shape[1]
    pair_block = jnp.maximum(slots.reshape(-1)[safe], 0)
    pair_rank = rank.reshape(-1)[safe]
    prepared = spec.prepare(aux, spec.operand(queries))  # once per query (PQ: its lookup tables)
    big = jnp.iinfo(jnp.int32).max if spec.integer else jnp.inf
    packed = spec.integer and spec.exact  # below 2^24: room for the place in a group (≤ 2^5 = _MAX_GROUP)

    def one_chunk(args):
        pq, pb, pok = args  # [chunk] each
        rows = jnp.where(pok, fill[pb], 0)[:, None]  # a block's rows are its first ones; none for empty pairs
        qdata = jnp.take(prepared, pq, axis=spec.query_axis)
        dist = spec.kernel(qdata, (blocks, pb[:, None]), scan.BLOCKS)[:, 0]
        return _group_leaders(dist, rows, ids[pb], group, packed)

    minima, first_ids = _over_filled_chunks(
        one_chunk, (pair_query, pair_block, ok), jnp.sum(real), chunk, groups
    )
    # Each pair's groups into its query's row, at its rank's columns; empty pairs fall outside (dropped).
    row = jnp.where(ok, pair_query, nq)
    col = jnp.where(ok, pair_rank, 0)[:, None] * groups + jnp.arange(groups)
    table_keys = jnp.full((nq, per_query * groups), _EMPTY, jnp.int32)
    table_keys = table_keys.at[row[:, None], col].set(minima.reshape(-1, groups), mode="drop")
    table_ids = jnp.full((nq, per_query * groups), NO_ID, jnp.int32)
    table_ids = table_ids.at[row[:, None], col].set(first_ids.reshape(-1, groups), mode="drop")
    query_blocks = jnp.full((nq, per_query), -1, jnp.int32).at[row, pair_rank].set(pair_block, mode="drop")

    # The k best groups of each query, their rows recomputed.
    kg = min(k, per_query * groups)
    best = select_topk(table_keys, table_ids, kg, ordered=False, platform=platform)  # [Q, kg] group slots
    block_of = jnp.take_along_axis(query_blocks, best // groups, axis=1)  # −1: no block there
    block_of = jnp.repeat(block_of, group, axis=1)  # [Q, kg·group]
    at = ((best % groups)[:, :, None] * group + jnp.arange(group)).reshape(nq, kg * group)
    number = jnp.maximum(block_of, 0)
    dist = spec.kernel(prepared, blocks[number, :, at], False)  # [Q, kg·group]
    there = (block_of >= 0) & (at < fill[number])
    d = jnp.where(there, dist, big)
    i = jnp.where(there, ids[number, at], NO_ID)
    keep = min(k, kg * group)
    d, i = merge_topk(d, i, keep, platform=platform)
    if keep < k:  # fewer candidates than k on this device
        d = jnp.pad(d, ((0, 0), (0, k - keep)), constant_values=big)
        i = jnp.pad(i, ((0, 0), (0, k - keep)), constant_values=NO_ID)
    if lax.axis_size(axis) > 1:
        d, i = merge_topk(
            lax.all_gather(d, axis, axis=1, tiled=True),
            lax.all_gather(i, axis, axis=1, tiled=True),
            k,
            platform=platform,
        )
    found = i < NO_ID
    return jnp.where(found, d, big), jnp.where(found, i, -1)


def _over_filled_chunks(
    one_chunk: Callable[[tuple], tuple[jax.Array, jax.Array]],
    pairs: tuple[jax.Array, ...],
    real: jax.Array,
    chunk: int,
    groups: int,
) -> tuple[jax.Array, jax.Array]:
    """``one_chunk`` over only the chunks of ``chunk`` pairs that hold some of the ``real`` pairs (which come
    first): a loop whose trip count is known on the device, so that the empty pairs that pad the search to
    its compiled size (up to a quarter of them, more on a device that holds fewer of the probed blocks) are
    not scanned.

    pairs: arrays [P] (P a multiple of chunk) → (keys, ids) [P/chunk, chunk, groups], the empty key and
    NO_ID in the chunks not scanned.
    """
    split = tuple(x.reshape(-1, chunk) for x in pairs)
    shape = (split[0].shape[0], chunk, groups)

    def body(c, acc):
        keys, ids = one_chunk(tuple(x[c] for x in split))
        return acc[0].at[c].set(keys), acc[1].at[c].set(ids)

    empty = (jnp.full(shape, _EMPTY, jnp.int32), jnp.full(shape, NO_ID, jnp.int32))
    return lax.fori_loop(0, (real + chunk - 1) // chunk, body, empty)
