"""The inverted-file index's lists on the devices and its list-major search program (:mod:`geojax.search.ivf`,
whose module docstring gives the method): the lists cut into segments of a bounded size dealt over the devices
(:func:`~geojax.search.ivf_scan.segment_rows`, :func:`~geojax.search.ivf_scan.build_layout`), each search's
schedule of (tile of queries, segment) units made on the host (:func:`~geojax.search.ivf_scan.schedule`), and
the per-device scan with its selection by groups (:func:`~geojax.search.ivf_scan.shard_search`).
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
from geojax.search.filters import is_allowed
from geojax.search.merge import merge_over_axis, merge_topk, order_bits, select_topk
from geojax.search.placement import NO_ID

_MAX_SEGMENT = 1024  # the most rows per segment chosen from the lists' sizes
_SLACK = 0.08  # the padding a chosen segment size may add, as a share of the rows
_MAX_GROUP = 32  # rows per group of a search's selection
_MAX_TILE = 32  # queries per tile
_MAX_SPAN = 256  # the most rows a unit scans, its masked tail included (consecutive segments of one list)
_CHUNK_CODES = 4 << 20  # segment bytes read per chunk of units of a search
_CHUNK_DISTANCES = 512 << 10  # distance bytes per chunk (with PQ's lookup tables, within the L2 cache)
_EMPTY = np.int32(np.iinfo(np.int32).max)  # the order key of no row (above every distance's)


def _round_up(n: int) -> int:
    """n rounded up to 4, 5, 6 or 7 times a power of two (within 25 %, so that few shapes compile)."""
    if n <= 4:
        return max(1, int(n))
    step = 1 << (int(n).bit_length() - 3)
    return -(-int(n) // step) * step


def _slots(sizes: np.ndarray, shards: int, segment: int) -> int:
    """Row slots the devices hold for lists of ``sizes`` cut into segments of ``segment`` rows."""
    segments = int((-(-sizes // segment)).sum())
    return shards * max(1, -(-segments // shards)) * segment


def segment_rows(sizes: np.ndarray, shards: int) -> int:
    """Rows per segment for lists of ``sizes`` dealt over ``shards`` devices.

    The largest power of two up to 1,024 whose padding (each list's last segment, and the devices' segment
    counts evened out) adds at most 8 % to the rows; 1 when none does (then at most ``shards`` − 1 rows of
    padding in all).

    Args:
        sizes: [nlist] rows per list.
        shards: the devices the segments are dealt over.

    Returns:
        The segment size, a power of two in [1, 1024].

    Example:
        >>> import numpy as np
        >>> from geojax.search import ivf_scan
        >>> ivf_scan.segment_rows(np.array([1000, 1000, 10]), 1), ivf_scan.segment_rows(np.array([3]), 1)
        (64, 1)
    """
    rows = int(np.sum(sizes))
    for shift in range(int(math.log2(_MAX_SEGMENT)), 0, -1):
        if _slots(sizes, shards, 1 << shift) <= (1 + _SLACK) * rows:
            return 1 << shift
    return 1


class Layout(NamedTuple):
    """The lists' segments dealt over the devices (:func:`build_layout`).

    Segment g of all lists in (list, place in list) order lies on device g mod shards, as its device's segment
    g // shards; so each list's segments on a device are consecutive there, and the devices' segment counts
    differ by at most one.

    Attributes:
        codes: [shards·S·segment, width] device array: the rows' codes, segment after segment, row-major.
        ids: [shards·S·segment] int32 device array: the rows' ids, ``NO_ID`` in empty slots.
        starts: [shards, nlist + 1] int64 NumPy array: list l's segments on device s are its local segments
            starts[s, l] … starts[s, l + 1] − 1.
        segment: rows per segment.
    """

    codes: jax.Array
    ids: jax.Array
    starts: np.ndarray
    segment: int

    @property
    def nbytes(self) -> int:
        """The bytes held by the devices' codes and ids and by the host's segment table."""
        return self.codes.nbytes + self.ids.nbytes + self.starts.nbytes


def build_layout(
    lists: np.ndarray,
    ids: np.ndarray,
    codes: np.ndarray,
    nlist: int,
    segment: int,
    put: Callable[[Callable[[int], np.ndarray], tuple[int, ...]], jax.Array],
    shards: int,
) -> Layout:
    """The rows as segments of ``segment`` rows dealt over ``shards`` devices (:class:`Layout`).

    Args:
        lists: [n] int32 list of each row, ascending.
        ids: [n] int32 ids, ascending within each list.
        codes: [n, width] codes.
        nlist: the number of lists.
        segment: rows per segment.
        put: ``put(shard → NumPy rows, global shape)`` → a device array sharded over the shards
            (:func:`geojax.search.placement.put_shards` with the index's mesh).
        shards: the devices the segments are dealt over.

    Returns:
        The :class:`Layout`.
    """
    sizes = np.bincount(lists, minlength=nlist)
    first = np.concatenate([[0], np.cumsum(sizes)])  # each list's first row
    counts = -(-sizes // segment)
    seg_first = np.concatenate([[0], np.cumsum(counts)])  # each list's first global segment
    per_shard = max(1, -(-int(seg_first[-1]) // shards))
    place = np.arange(len(ids)) - first[lists]  # each row's place in its list
    g = seg_first[lists] + place // segment  # each row's global segment
    slot = (g // shards) * segment + place % segment  # its row on its device
    shard = g % shards
    s = np.arange(shards)[:, None]
    starts = np.maximum(0, (seg_first[None, :] - s + shards - 1) // shards)  # [shards, nlist + 1]
    rows = per_shard * segment
    width = codes.shape[1]

    def held_codes(d: int) -> np.ndarray:
        out = np.zeros((rows, width), codes.dtype)
        out[slot[shard == d]] = codes[shard == d]
        return out

    def held_ids(d: int) -> np.ndarray:
        out = np.full(rows, NO_ID, np.int32)
        out[slot[shard == d]] = ids[shard == d]
        return out

    return Layout(
        put(held_codes, (shards * rows, width)),
        put(held_ids, (shards * rows,)),
        starts.astype(np.int64),
        segment,
    )


def layout_rows(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows a :class:`Layout` holds, back on the host: (lists [n], ids [n], codes [n, width]).

    Args:
        layout: the layout (every shard on this process's devices).

    Returns:
        (lists int32, ids int32, codes), in device order (not sorted).
    """
    shards = layout.starts.shape[0]
    ids = np.asarray(layout.ids).reshape(shards, -1)
    codes = np.asarray(layout.codes).reshape(shards, ids.shape[1], -1)
    local = np.arange(ids.shape[1]) // layout.segment
    lists = np.stack([np.searchsorted(layout.starts[s], local, side="right") - 1 for s in range(shards)])
    held = ids < NO_ID
    return lists[held].astype(np.int32), ids[held], codes[held]


def group_rows(segment: int, per_query: int, k: int) -> int:
    """Rows per group of a search's selection: a power of two near √(segment·per_query/k).

    Nearest on a log scale, in [1, 32] and at most ``segment``: about as many groups per query as rows
    recomputed for its k best groups.

    Args:
        segment: rows per segment.
        per_query: the most segments a query scans on a device.
        k: neighbours per query.

    Returns:
        A power of two dividing ``segment``.

    Example:
        >>> from geojax.search import ivf_scan
        >>> ivf_scan.group_rows(1024, 1, 10), ivf_scan.group_rows(1024, 8, 100), ivf_scan.group_rows(32, 4, 1)
        (8, 8, 16)
    """
    target = math.sqrt(segment * per_query / k)
    return int(min(segment, _MAX_GROUP, 1 << max(0, round(math.log2(max(target, 1.0))))))


class Schedule(NamedTuple):
    """One search's work, made on the host from its probes (:func:`schedule`).

    Tiles are the (query, list) pairs grouped by list, ``tile`` queries of one list each; a unit is a tile
    and up to ``span`` consecutive segments of its list on a device, scanned as one dense [tile, span·segment]
    block.

    Attributes:
        tiles: [n_tiles + 1, tile] int32: each tile's queries (−1 for none; the last tile is empty).
        unit_tile: [shards, U] int32: each unit's tile (the empty tile past a device's units).
        unit_segment: [shards, U] int32: each unit's first local segment.
        unit_count: [shards, U] int32: each unit's segments (0 past a device's units).
        unit_slot: [shards, U, tile] int32: the place of the unit's first segment among each tile query's
            segments.
        units: [shards] int32: each device's units.
        query_segments: [shards, Q, per_query] int32: each query's local segments, −1 past them.
    """

    tiles: np.ndarray
    unit_tile: np.ndarray
    unit_segment: np.ndarray
    unit_count: np.ndarray
    unit_slot: np.ndarray
    units: np.ndarray
    query_segments: np.ndarray


def _tiles(probe: np.ndarray, tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (query, probe place) pairs grouped by list in tiles of ``tile``: (queries [n_tiles, tile], −1
    padded; probe places [n_tiles, tile]; list [n_tiles])."""
    q, p = np.divmod(np.arange(probe.size), probe.shape[1])
    lst = probe.reshape(-1)
    order = np.lexsort((q, lst))
    lst, q, p = lst[order], q[order], p[order]
    run_start = np.concatenate([[0], np.flatnonzero(np.diff(lst)) + 1])
    run_len = np.diff(np.concatenate([run_start, [len(lst)]]))
    place = np.arange(len(lst)) - np.repeat(run_start, run_len)  # place in its list's run
    tiles_per_run = -(-run_len // tile)
    tile_first = np.concatenate([[0], np.cumsum(tiles_per_run)])
    which = tile_first[:-1].repeat(run_len) + place // tile
    n_tiles = int(tile_first[-1])
    queries = np.full((n_tiles, tile), -1, np.int32)
    places = np.zeros((n_tiles, tile), np.int32)
    queries[which, place % tile] = q
    places[which, place % tile] = p
    return queries, places, lst[run_start].repeat(tiles_per_run)


def schedule(
    probe: np.ndarray, starts: np.ndarray, segment: int, row_bytes: int
) -> tuple[Schedule, int, int, int]:
    """The units of one search over a layout's devices, grouped by list (list-major).

    Each probed list's queries are cut into tiles (queries per tile: the power of two at or below the mean
    queries per probed list, at most 32), and each tile meets each of the list's segments on a device once,
    ``span`` consecutive segments at a time (span: the power of two at or below the mean segments of a probed
    list on a device, at most 256 rows or one segment; the segments past the list's are masked, not scanned
    into results).

    Args:
        probe: [Q, nprobe] int32 probed lists (distinct within a row).
        starts: [shards, nlist + 1] the layout's segment table (:class:`Layout`).
        segment: the layout's rows per segment.
        row_bytes: bytes of a row in the scan's operand form.

    Returns:
        (the :class:`Schedule`; per_query, the most segments a query scans on a device; span; chunk, the
        units scanned per step: at most 4 MiB of codes and 512 KiB of distances). The tile count and
        per_query are rounded up within 25 % and the units to a multiple of chunk, so that few shapes
        compile.
    """
    shards = starts.shape[0]
    nq = probe.shape[0]
    mean = probe.size / max(1, len(np.unique(probe)))
    tile = int(min(_MAX_TILE, 1 << int(math.floor(math.log2(max(mean, 1.0))))))
    queries, places, tile_list = _tiles(probe, tile)
    n_tiles = len(queries)
    padded_tiles = _round_up(n_tiles + 1)
    tiles = np.full((padded_tiles, tile), -1, np.int32)
    tiles[:n_tiles] = queries
    counts = np.diff(starts, axis=1)  # [shards, nlist] segments of each list on each device
    probe_counts = counts[:, probe]  # [shards, Q, nprobe]
    offsets = np.cumsum(probe_counts, axis=2) - probe_counts  # each probed list's first slot
    per_query = _round_up(int(probe_counts.sum(2).max()))
    present = probe_counts[probe_counts > 0]
    mean_segments = float(present.mean()) if present.size else 1.0
    span = int(min(max(1, _MAX_SPAN // segment), 1 << int(math.floor(math.log2(mean_segments)))))
    list_segments = counts[:, tile_list]  # [shards, n_tiles]
    unit_counts = -(-list_segments // span)
    units = unit_counts.sum(1)
    rows = span * segment
    chunk = int(max(1, min(_CHUNK_CODES // (rows * row_bytes), _CHUNK_DISTANCES // (4 * tile * rows))))
    chunk = min(chunk, _round_up(int(units.max())))
    width = -(-_round_up(int(units.max())) // chunk) * chunk
    unit_tile = np.full((shards, width), padded_tiles - 1, np.int32)
    unit_segment = np.zeros((shards, width), np.int32)
    unit_count = np.zeros((shards, width), np.int32)
    unit_slot = np.zeros((shards, width, tile), np.int32)
    query_segments = np.full((shards, nq, per_query), -1, np.int32)
    safe_q = np.maximum(queries, 0)
    for s in range(shards):
        n = int(units[s])
        which = np.repeat(np.arange(n_tiles), unit_counts[s])
        within = span * (np.arange(n) - np.repeat(np.cumsum(unit_counts[s]) - unit_counts[s], unit_counts[s]))
        unit_tile[s, :n] = which
        unit_segment[s, :n] = starts[s, tile_list[which]] + within
        unit_count[s, :n] = np.minimum(span, list_segments[s, which] - within)
        unit_slot[s, :n] = offsets[s][safe_q[which], places[which]] + within[:, None]
        c = probe_counts[s].reshape(-1)
        pair_q = np.repeat(np.arange(probe.size) // probe.shape[1], c)
        pair_within = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
        query_segments[s, pair_q, np.repeat(offsets[s].reshape(-1), c) + pair_within] = (
            np.repeat(starts[s, probe.reshape(-1)], c) + pair_within
        )
    plan = Schedule(
        tiles, unit_tile, unit_segment, unit_count, unit_slot, units.astype(np.int32), query_segments
    )
    return plan, per_query, span, chunk


def _group_leaders(dist: jax.Array, ids: jax.Array, m: int, packed: bool) -> tuple[jax.Array, jax.Array]:
    """Each group of m consecutive rows' leader: its smallest distance (as an order key) and the id of its
    first row at that distance, over the filled rows (id < NO_ID).

    Unlike the flat scan's ``_select._group_minima`` (minima only: there a row's position is its id), the
    leader's id is kept, since groups of different segments are ranked against each other by (minimum, id).

    dist [b, n] distances, ids [n] or per query [b, n] (ascending over the filled rows) → (keys [b, n/m]
    int32, the empty key where a group has no row; ids [b, n/m]). ``packed``: integer distances below
    2^31/m, ranked with their place in the group as one int32 (one reduction instead of two).
    """
    b, n = dist.shape
    filled = ids < NO_ID
    if packed:
        key = jnp.where(filled, dist * m + jnp.arange(n, dtype=jnp.int32) % m, _EMPTY)
        least = jnp.min(key.reshape(b, n // m, m), axis=2)
        minima, first = jnp.where(least == _EMPTY, _EMPTY, least // m), least % m
    else:
        grouped = jnp.where(filled, order_bits(dist), _EMPTY).reshape(b, n // m, m)
        minima = jnp.min(grouped, axis=2)
        first = jnp.min(jnp.where(grouped == minima[:, :, None], jnp.arange(m), m), axis=2)
    return minima, jnp.take_along_axis(jnp.broadcast_to(ids, dist.shape), jnp.arange(0, n, m) + first, axis=1)


def _by_query(spec: scan.Scan, prepared: jax.Array) -> jax.Array:
    """The scan's prepared query data with the queries first: as it is for torus and Hamming codes; PQ's
    lookup tables [m, K, Q] as [Q, m, K], each query's tables contiguous (made once per search)."""
    return prepared if spec.query_axis == 0 else jnp.moveaxis(prepared, -1, 0)


def _unit_distances(spec: scan.Scan, by_query: jax.Array, tq: jax.Array, operand: jax.Array) -> jax.Array:
    """[c, tile, rows] distances of c units' tile queries tq [c, tile] to their rows (operand form
    [c, rows, W']); ``by_query``: :func:`_by_query`.

    Torus and Hamming codes: each tile's queries gathered, then the flat kernel's dense form against the rows'
    columns. PQ: the lookup tables are as large as the distances a segment gives (m·2^nbits per query), so
    they are not gathered per unit; each distance is Σ_j T[query, j, code_j], read where it lies in its
    query's contiguous tables and added in j order as the flat kernel adds them (the same float32 sums, so the
    inverted file still ranks as the flat index does).
    """
    if spec.query_axis == 0:
        return jax.vmap(lambda q, r: spec.kernel(q, r.T, True))(by_query[tq], operand)
    m, k = by_query.shape[1], by_query.shape[2]
    flat = by_query.reshape(-1)
    base = tq[:, :, None] * (m * k)  # [c, tile, 1]
    codes = operand.astype(jnp.int32)[:, None]  # [c, 1, rows, m]
    total = flat[base + codes[..., 0]]
    for j in range(1, m):
        total = total + flat[base + j * k + codes[..., j]]
    return total


def shard_search(
    queries: jax.Array,
    codes: jax.Array,
    ids: jax.Array,
    tiles: jax.Array,
    unit_tile: jax.Array,
    unit_segment: jax.Array,
    unit_count: jax.Array,
    unit_slot: jax.Array,
    units: jax.Array,
    query_segments: jax.Array,
    aux: jax.Array,
    bits: jax.Array,
    *,
    spec: scan.Scan,
    axis: str,
    k: int,
    segment: int,
    span: int,
    chunk: int,
    group: int,
    filtered: bool,
    platform: str,
) -> tuple[jax.Array, jax.Array]:
    """One device's top-k of every query over its segments of the probed lists, then over all devices.

    Merged over the devices of ``axis`` by (distance, id), ranked as suits ``platform`` (the mesh's;
    :func:`geojax.search.merge.select_topk`).

    List-major: each unit is a tile of queries of one list against up to ``span`` consecutive segments of
    that list, scanned densely by the codec's flat-scan kernel ([tile, W'] queries against the segments'
    [W', span·segment] columns, read once for all the tile's queries), ``chunk`` units at a time, only the
    chunks that hold this device's units. Each unit gives, for every group of ``group`` consecutive rows of
    its segments, the group's smallest distance and the id of its first row at it, into each tile query's row
    of a group table at the segment's slot (segments past the unit's count are dropped). Each query's k best
    groups by (minimum, id) hold its k nearest rows: a row outside them is beaten by the k group minima,
    distinct rows, each ahead of it by distance or, at equal distance, by id (rows ascend by id in a segment,
    so a group's first row at its minimum has the group's lowest id there). Those k·group rows are recomputed
    and ranked by (distance, id) (:func:`geojax.search.merge.merge_topk`). Run under ``jax.shard_map`` over
    ``axis`` (:class:`geojax.search.IndexIVF` does).

    Args:
        queries: [Q, ...] the codec's scan queries.
        codes: [S·segment, width] this device's rows (:class:`Layout`).
        ids: [S·segment] int32 their ids (``NO_ID`` empty).
        tiles: [T_n, tile] int32 each tile's queries (−1 none) (:class:`Schedule`).
        unit_tile: [U] int32 each unit's tile.
        unit_segment: [U] int32 each unit's first segment.
        unit_count: [U] int32 each unit's segments.
        unit_slot: [U, tile] int32 the unit's slot for each tile query.
        units: [1] int32 this device's units (the first ones).
        query_segments: [Q, per_query] int32 each query's segments, −1 past them.
        aux: the scan's ``aux`` (PQ: codebooks).
        bits: [1 or Q, B] uint8 allowed ids (:func:`geojax.search.filters.allowed_bits`); read only when
            ``filtered``.
        spec: the codec's scan.
        axis: the mesh axis the segments are dealt over.
        k: neighbours per query.
        segment: rows per segment.
        span: the most segments of a unit.
        chunk: units scanned per step (U is a multiple of it).
        group: rows per group of the selection (:func:`group_rows`).
        filtered: whether only the ids ``bits`` allows may enter a query's top-k (masked rows count as empty
            slots, before the groups' minima are taken and again where the rows are recomputed).
        platform: the devices' platform.

    Returns:
        (distances [Q, k] ascending, the largest value where empty; ids [Q, k] int32, −1 where empty).
    """
    nq, per_query = query_segments.shape
    groups = segment // group
    last = codes.shape[0] // segment - 1
    prepared = spec.prepare(aux, spec.operand(queries))  # once per query (PQ: its lookup tables)
    by_query = _by_query(spec, prepared)
    big = jnp.iinfo(jnp.int32).max if spec.integer else jnp.inf
    packed = spec.integer and spec.exact  # below 2^24: room for the place in a group (≤ 2^5 = _MAX_GROUP)
    within = jnp.arange(segment, dtype=jnp.int32)
    spans = jnp.arange(span, dtype=jnp.int32)

    def one_chunk(c, tables):
        keys, first_ids = tables
        seg = lax.dynamic_slice_in_dim(unit_segment, c * chunk, chunk)
        valid = spans < lax.dynamic_slice_in_dim(unit_count, c * chunk, chunk)[:, None]  # [chunk, span]
        tq = tiles[lax.dynamic_slice_in_dim(unit_tile, c * chunk, chunk)]  # [chunk, tile]
        slot = lax.dynamic_slice_in_dim(unit_slot, c * chunk, chunk)
        segs = jnp.minimum(seg[:, None] + spans, last)  # [chunk, span]
        rows = (segs[:, :, None] * segment + within).reshape(chunk, span * segment)
        row_ids = jnp.where(jnp.repeat(valid, segment, axis=1), ids[rows], NO_ID)
        operand = spec.operand(codes[rows.reshape(-1)]).reshape(chunk, span * segment, -1)
        dist = _unit_distances(spec, by_query, jnp.maximum(tq, 0), operand)
        row_ids = row_ids[:, None, :]  # [chunk, 1, rows]: the same for every tile query
        if filtered:
            row_ids = jnp.where(is_allowed(bits, tq[:, :, None], row_ids), row_ids, NO_ID)
        minima, leaders = jax.vmap(lambda d, i: _group_leaders(d, i, group, packed))(dist, row_ids)
        row = jnp.where(tq >= 0, tq, nq)[:, :, None]  # padded tile places fall outside (dropped)
        col = (slot[:, :, None] + spans)[:, :, :, None] * groups + jnp.arange(
            groups
        )  # [chunk, tile, span, groups]
        col = jnp.where(valid[:, None, :, None], col, per_query * groups).reshape(chunk, -1, span * groups)
        keys = keys.at[row, col].set(minima, mode="drop")
        return keys, first_ids.at[row, col].set(leaders, mode="drop")

    empty = (
        jnp.full((nq, per_query * groups), _EMPTY, jnp.int32),
        jnp.full((nq, per_query * groups), NO_ID, jnp.int32),
    )
    keys, first_ids = lax.fori_loop(0, (units[0] + chunk - 1) // chunk, one_chunk, empty)

    # The k best groups of each query, their rows recomputed.
    kg = min(k, per_query * groups)
    best = select_topk(keys, first_ids, kg, ordered=False, platform=platform)  # [Q, kg] group slots
    seg_of = jnp.take_along_axis(query_segments, best // groups, axis=1)  # −1: no segment there
    rows = (jnp.maximum(seg_of, 0) * segment + (best % groups) * group)[:, :, None] + jnp.arange(group)
    rows = rows.reshape(nq, kg * group)
    there = jnp.repeat(seg_of >= 0, group, axis=1) & (ids[rows] < NO_ID)
    if filtered:
        there = there & is_allowed(bits, jnp.arange(nq)[:, None], ids[rows])
    operand = spec.operand(codes[rows.reshape(-1)]).reshape(nq, kg * group, -1)
    dist = spec.kernel(prepared, operand, False)  # [Q, kg·group]
    d = jnp.where(there, dist, big)
    i = jnp.where(there, ids[rows], NO_ID)
    keep = min(k, kg * group)
    d, i = merge_topk(d, i, keep, platform=platform)
    if keep < k:  # fewer candidates than k on this device
        d = jnp.pad(d, ((0, 0), (0, k - keep)), constant_values=big)
        i = jnp.pad(i, ((0, 0), (0, k - keep)), constant_values=NO_ID)
    return merge_over_axis(d, i, k, axis, empty=big, platform=platform)
