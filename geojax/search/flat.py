"""The exact index: every row scanned, the codec inside, rows sharded across devices and processes.

The codes live on a device mesh axis (``jax.sharding.NamedSharding``, ``db_axis``): each shard holds its rows
in one buffer, in ascending id order, beside each row's id. A search runs the scans of
:mod:`geojax.search.scan` on every shard at once (``jax.shard_map``), each device over its own rows only, then
gathers the per-shard top-k over ``db_axis`` and ranks them by (distance, id)
(:func:`geojax.search.merge.merge_topk`): the exact global top-k with ties to the lower id, equal to one
device scanning everything, since every row of the global top-k is in its own shard's top-k by the same
order (a shard's scan breaks ties by position, which is id order). Queries can be split over a second mesh
axis (``query_axis``) at the same time.

Several processes (``jax.distributed``) form one index: every process calls
:meth:`~geojax.search.index.Index.add`, :meth:`~geojax.search.index.Index.search`,
:meth:`~geojax.search.index.Index.remove_ids`, ``write_index`` and ``read_index`` together, each with its own
part of the vectors (its own file or range). A process's rows go to the shards on its own devices and take the
ids after those of the processes before it, so that the index equals one process holding all rows in process
order. A shard may span several devices only along ``query_axis``, all of one process.

Memory per device is proportional to its shard: ``width + 4`` bytes per row (code and int32 id) in a buffer
that grows by doubling (an add writes its rows in place; the buffer is copied only when it grows, so it
holds at most twice the rows), and a search lays the buffer out once more for its scan (``2·width`` bytes
per buffer row for that call, the unpacked width for b-bit L2): at most 1e9 / (3·width + 4) rows per GB.
Ids are int32: at most 2^31 − 1 rows in all.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from geojax.search import placement, scan
from geojax.search.codecs import Codec
from geojax.search.filters import is_allowed
from geojax.search.index import Index, check_parts
from geojax.search.merge import merge_over_axis, merge_topk
from geojax.search.placement import NO_ID

_MIN_CAPACITY = 1024
_FILTER_ROWS = 2048  # rows per chunk of a filtered scan


class IndexFlat(Index):
    """Exact top-k search over a codec's codes (:mod:`geojax.search.codecs`), sharded over a mesh axis.

    Rows are sharded over ``mesh``'s ``db_axis`` (default: every device of every process on one axis); faiss's
    ``IndexFlat`` shape. ``train(x)`` fits the codec (codecs without parameters are trained already),
    ``add(x, ids=None)`` encodes and appends vectors, ``add_codes`` appends codes made elsewhere,
    ``search(q, k)`` encodes the queries and returns ``(distances [Q, k], ids [Q, k] int32)`` as
    arrays, ascending, ties to the lower id: int32 for torus and binary codes, float32 for PQ. The
    distances are those of :func:`geojax.search.torus_topk`, :func:`geojax.search.hamming_topk` and
    :func:`geojax.search.pq_topk`. Memory and multi-process rules: the module docstring. Every search is
    exact over every row; a filtered one (``allowed=``) scans each shard in chunks and merges each chunk by
    (distance, id), without the unfiltered scan's selection by groups.

    Args:
        codec: a :class:`geojax.search.codecs.Codec`.
        mesh: the device mesh; None: every device of every process on one axis named ``db_axis``.
        db_axis: the mesh axis the rows are sharded over.
        query_axis: a second mesh axis the queries are split over, or None.

    Raises:
        ValueError: ``codec`` is not a codec, or the axes are not axes of the mesh.

    Example:
        >>> import numpy as np
        >>> from geojax.search import IndexFlat, TorusCodec
        >>> t = np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]], np.float32)
        >>> index = IndexFlat(TorusCodec(4))
        >>> index.add(t)
        >>> distances, ids = index.search(t[:1], 2)
        >>> print(distances, ids)
        [[  0 180]] [[0 1]]
    """

    kind = "flat"

    def __init__(
        self,
        codec: Codec,
        *,
        mesh: jax.sharding.Mesh | None = None,
        db_axis: str = "db",
        query_axis: str | None = None,
    ) -> None:
        super().__init__(codec)
        self.mesh = mesh if mesh is not None else placement.default_mesh(db_axis)
        placement.check_axes(self.mesh, db_axis, query_axis)
        self.db_axis, self.query_axis = db_axis, query_axis
        self._spec = codec.scan
        operand = jax.eval_shape(self._spec.operand, jax.ShapeDtypeStruct((1, codec.width), codec.code_dtype))
        self._row_bytes = operand.shape[1] * operand.dtype.itemsize
        self._shard_of, self._owners = placement.shard_owners(self.mesh, db_axis)
        self.shards = len(self._owners)
        self._fns = _functions(self.mesh, db_axis, query_axis, self._spec)
        self.reset()

    @property
    def shard_sizes(self) -> np.ndarray:
        """Rows held by each shard, in mesh order along ``db_axis`` [shards]."""
        return self._sizes.copy()

    def reset(self) -> None:
        """Remove every row (the codec stays trained)."""
        self._sizes = np.zeros(self.shards, np.int64)
        self._capacity = 0
        self._codes = self._ids = None
        self.ntotal = 0
        self._next_id = 0

    def train(self, x: ArrayLike, *, key: jax.Array | None = None) -> None:
        """Fit the codec to training vectors x [N, dim].

        Args:
            x: [N, dim] finite floating training vectors.
            key: the codec's random initialisation (a JAX PRNG key), or None.

        Raises:
            ValueError: ``x`` is not a finite floating [N, dim] matrix (the codec's checks).
        """
        self.codec.train(x, key=key)

    # ------------------------------------------------------------------------------------------------ add
    def add_codes(self, codes: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Append this process's codes [n, width] made by the codec elsewhere (see ``add``).

        Args:
            codes: [n, width] codes of the codec's dtype.
            ids: [n] distinct new integer ids (one process only), or None for the ids after the largest so
                far.

        Raises:
            ValueError: ``codes`` or ``ids`` is malformed, an id is in the index already, ids are given with
                several processes, a process adds rows but holds no shard, or the index would pass 2^31 − 1
                rows.
        """
        codes = self.codec.check_codes(codes)
        given = ids is not None
        ids, counts = self._new_ids(ids, len(codes))
        held_codes, held = self._held() if given and len(ids) else (codes[:0], ids[:0])
        if len(ids) and (np.any(np.diff(ids) < 0) or (len(held) and ids.min() <= held.max())):
            # given ids out of order, or below held ones: the rows are stored by ascending id
            self._rebuild(np.concatenate([held_codes, codes]), np.concatenate([held, ids]))
        else:
            self._append(codes, ids, counts)
        self.ntotal += int(counts.sum())

    def _rebuild(self, codes: np.ndarray, ids: np.ndarray) -> None:
        """Replace this process's rows by ``codes`` and ``ids`` (any order; stored by ascending id)."""
        order = np.argsort(ids, kind="stable")
        counts = placement.process_counts([len(ids)])[:, 0]
        self._sizes[:] = 0
        self._append(codes[order], ids[order], counts)

    def _append(self, codes: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> None:
        """Write this process's rows (ids ascending, above its shards' ids) to its shards; ``counts``: every
        process's row count."""
        pieces = np.zeros(self.shards, np.int64)
        for proc, count in enumerate(counts):
            owned = [s for s in range(self.shards) if self._owners[s] == proc]
            if count and not owned:
                raise ValueError(
                    f"process {proc} adds rows but holds no shard of the mesh's {self.db_axis!r}"
                )
            pieces[owned] = placement.split(int(count), len(owned))
        most = int(pieces.max())
        if most == 0:
            return
        need = int((self._sizes + most).max())
        if need > self._capacity:
            self._grow(max(need, 2 * self._capacity, _MIN_CAPACITY))
        mine = [s for s in range(self.shards) if self._owners[s] == jax.process_index()]
        ends = np.cumsum(pieces[mine])
        local = {s: slice(int(e - pieces[s]), int(e)) for s, e in zip(mine, ends, strict=True)}
        new_codes = self._put(
            lambda s: placement.pad_rows(codes[local[s]], most), (self.shards * most, codes.shape[1])
        )
        new_ids = self._put(
            lambda s: placement.pad_rows(ids[local[s]].astype(np.int32), most, NO_ID), (self.shards * most,)
        )
        starts = self._put(lambda s: self._sizes[s : s + 1].astype(np.int32), (self.shards,))
        self._codes, self._ids = self._fns.write(self._codes, self._ids, new_codes, new_ids, starts)
        self._sizes += pieces

    def _put(self, shard_data, shape: tuple[int, ...]) -> jax.Array:
        return placement.put_shards(self.mesh, self.db_axis, self._shard_of, shard_data, shape)

    def _grow(self, capacity: int) -> None:
        """Reallocate every shard's buffer to ``capacity`` rows, keeping its rows (the one copy an add makes,
        and only when the buffer is full)."""
        if self._codes is None:
            self._codes, self._ids = self._fns.empty(
                self.shards * capacity, self.codec.width, self.codec.code_dtype
            )
        else:
            self._codes, self._ids = self._fns.grow(self._codes, self._ids, capacity - self._capacity)
        self._capacity = capacity

    def _keep(self, keep: np.ndarray) -> None:
        codes, held = self._held()
        self._rebuild(codes[keep], held[keep])

    # --------------------------------------------------------------------------------------------- search
    def _search(
        self, q: np.ndarray, queries: np.ndarray, k: int, bits: np.ndarray | None
    ) -> tuple[jax.Array, jax.Array]:
        parts = self.mesh.shape[self.query_axis] if self.query_axis else 1
        nq = len(queries)
        padded = placement.pad_rows(queries, -(-nq // parts) * parts)
        qarr = jax.make_array_from_callback(
            padded.shape, NamedSharding(self.mesh, P(self.query_axis)), lambda idx: padded[idx]
        )
        per = len(padded) // parts
        plan = scan.plan(
            self._capacity,
            k,
            self._spec.chunk,
            min(self._spec.query_block, per),
            scan.SELECT,
            self._row_bytes,
        )
        rows, cols = self._fns.layout(self._codes, plan)
        sizes = self._put(lambda s: self._sizes[s : s + 1].astype(np.int32), (self.shards,))
        if bits is not None:
            per_query = len(bits) > 1
            bits = placement.pad_rows(bits, len(padded)) if per_query else bits
            spec = P(self.query_axis) if per_query else P()
            barr = jax.make_array_from_callback(
                bits.shape, NamedSharding(self.mesh, spec), lambda idx: bits[idx]
            )
            d, i = self._fns.filtered(
                qarr, rows, self._ids, sizes, self.codec.aux, barr, k=k, per_query=per_query
            )
        else:
            d, i = self._fns.search(
                qarr,
                rows,
                cols,
                self._ids,
                sizes,
                self.codec.aux,
                k=k,
                group=plan[2],
                capacity=self._capacity,
            )
        if d.is_fully_addressable:
            return d[:nq], i[:nq]
        return jnp.asarray(placement.host(d)[:nq]), jnp.asarray(placement.host(i)[:nq])

    # ----------------------------------------------------------------------------------------------- files
    def _held(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes, ids int64) of the shards on this process's devices, ascending ids."""
        codes, ids, seen = [], [], set()
        if self._codes is not None:
            for c, i in zip(self._codes.addressable_shards, self._ids.addressable_shards, strict=True):
                shard = self._shard_of[c.device]
                if shard in seen:
                    continue
                seen.add(shard)
                size = int(self._sizes[shard])
                codes.append(np.asarray(c.data)[:size])
                ids.append(np.asarray(i.data)[:size])
        if not ids:
            return np.zeros((0, self.codec.width), self.codec.code_dtype), np.zeros(0, np.int64)
        ids_all = np.concatenate(ids).astype(np.int64)
        order = np.argsort(ids_all, kind="stable")
        return np.concatenate(codes)[order], ids_all[order]

    def state(self) -> tuple[dict, dict]:
        """(description, arrays) of this process's part, for ``write_index``.

        Returns:
            ({"ntotal", "next_id", "rows"}, {"ids": int32 [rows], "codes": [rows, width]}), ascending ids.
        """
        codes, ids = self._held()
        meta = {"ntotal": self.ntotal, "next_id": self._next_id, "rows": len(ids)}
        return meta, {"ids": ids.astype(np.int32), "codes": codes}

    @classmethod
    def from_state(cls, codec: Codec, meta: dict, arrays: dict, **placement_args) -> IndexFlat:
        """The index that :meth:`state` described, placed on ``placement_args``.

        Args:
            codec: the index's codec (:func:`geojax.search.codecs.codec_from_state`).
            meta: the description of :meth:`state`.
            arrays: the arrays of :meth:`state`.
            **placement_args: ``mesh``, ``db_axis``, ``query_axis`` of the constructor.

        Returns:
            The :class:`IndexFlat`.

        Raises:
            ValueError: the files read hold rows of indexes of different sizes, or codes the codec rejects.

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexFlat, TorusCodec
            >>> t = np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]], np.float32)
            >>> index = IndexFlat(TorusCodec(4))
            >>> index.add(t)
            >>> again = IndexFlat.from_state(index.codec, *index.state())
            >>> again.ntotal
            3
        """
        index = cls(codec, **placement_args)
        index._load_rows(arrays["codes"], arrays["ids"].astype(np.int64), meta)
        return index

    def _load_rows(self, codes: np.ndarray, ids: np.ndarray, meta: dict) -> None:
        counts = check_parts(len(ids), meta["ntotal"])
        self._append(self.codec.check_codes(codes, "codes in the file"), ids, counts)
        self.ntotal = int(meta["ntotal"])
        self._next_id = int(meta["next_id"])


class _Functions:
    """The compiled steps over one mesh for one scan, shared by every index with both (:func:`_functions`)."""

    def __init__(self, mesh, db_axis: str, query_axis: str | None, spec: scan.Scan) -> None:
        self.mesh, self.db_axis, self.query_axis, self.spec = mesh, db_axis, query_axis, spec
        self.platform = placement.platform(mesh)
        db = P(db_axis)
        self._db = NamedSharding(mesh, db)
        shard = functools.partial(jax.shard_map, mesh=mesh, check_vma=False)
        self.write = jax.jit(
            shard(_write_rows, in_specs=(db,) * 5, out_specs=(db, db)), donate_argnums=(0, 1)
        )

    def empty(self, rows: int, width: int, dtype) -> tuple[jax.Array, jax.Array]:
        make = jax.jit(
            lambda: (jnp.zeros((rows, width), dtype), jnp.full((rows,), NO_ID, jnp.int32)),
            out_shardings=(self._db, self._db),
        )
        return make()

    @functools.partial(jax.jit, static_argnums=(0, 3))
    def grow(self, codes, ids, extra: int):
        return jax.shard_map(
            functools.partial(_grow_rows, extra=extra),
            mesh=self.mesh,
            in_specs=(P(self.db_axis),) * 2,
            out_specs=(P(self.db_axis),) * 2,
            check_vma=False,
        )(codes, ids)

    @functools.partial(jax.jit, static_argnums=(0, 2))
    def layout(self, codes, plan):
        db = P(self.db_axis)
        return jax.shard_map(
            lambda c: scan.layout(self.spec.operand(c), plan),
            mesh=self.mesh,
            in_specs=(db,),
            out_specs=(db, db),
            check_vma=False,
        )(codes)

    @functools.partial(jax.jit, static_argnums=0, static_argnames=("k", "group", "capacity"))
    def search(self, queries, rows, cols, ids, sizes, aux, *, k: int, group: int, capacity: int):
        db, qs = P(self.db_axis), P(self.query_axis)
        local = functools.partial(
            _shard_topk,
            spec=self.spec,
            axis=self.db_axis,
            k=k,
            group=group,
            capacity=capacity,
            platform=self.platform,
        )
        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(qs, db, db, db, db, P()),
            out_specs=(qs, qs),
            check_vma=False,
        )(queries, rows, cols, ids, sizes, aux)

    @functools.partial(jax.jit, static_argnums=0, static_argnames=("k", "per_query"))
    def filtered(self, queries, rows, ids, sizes, aux, bits, *, k: int, per_query: bool):
        db, qs = P(self.db_axis), P(self.query_axis)
        local = functools.partial(
            filtered_topk, spec=self.spec, axis=self.db_axis, k=k, platform=self.platform
        )
        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(qs, db, db, db, P(), qs if per_query else P()),
            out_specs=(qs, qs),
            check_vma=False,
        )(queries, rows, ids, sizes, aux, bits)


def _write_rows(codes, ids, new_codes, new_ids, start):
    """One shard: ``new_codes`` [m, W] and ``new_ids`` [m] written at row ``start[0]`` of its buffers."""
    return (
        lax.dynamic_update_slice(codes, new_codes, (start[0], 0)),
        lax.dynamic_update_slice(ids, new_ids, (start[0],)),
    )


def _grow_rows(codes, ids, *, extra: int):
    """One shard's buffers with ``extra`` empty rows appended."""
    return jnp.pad(codes, ((0, extra), (0, 0))), jnp.pad(ids, (0, extra), constant_values=NO_ID)


def _shard_topk(
    queries,
    rows,
    cols,
    ids,
    size,
    aux,
    *,
    spec: scan.Scan,
    axis: str,
    k: int,
    group: int,
    capacity: int,
    platform: str,
):
    """One device: the top-k of its queries over its shard's ``size[0]`` rows, then the exact top-k over all
    shards of ``axis`` by (distance, id) → (distances [q, k], ids [q, k]); ``platform``: the mesh's."""
    v, i = scan.blocked(
        spec.operand(queries),
        rows,
        cols,
        aux,
        kernel=spec.kernel,
        prepare=spec.prepare,
        n=size[0],
        k=k,
        group=group,
        query_block=spec.query_block,
        exact=spec.exact,
        platform=platform,
    )
    lowest = jnp.finfo(jnp.float32).max if spec.exact else jnp.iinfo(jnp.int32).max
    gid = jnp.where(v > -lowest, ids[jnp.minimum(i, capacity - 1)], NO_ID)
    keys = lax.all_gather(-v, axis, axis=1, tiled=True)  # [q, shards·k] distances, shard order
    gid = lax.all_gather(gid, axis, axis=1, tiled=True)
    d, g = merge_topk(keys, gid, k, platform=platform)
    return (d.astype(jnp.int32) if spec.integer else d), g


def filtered_topk(
    queries: jax.Array,
    rows: jax.Array,
    ids: jax.Array,
    size: jax.Array,
    aux: jax.Array,
    bits: jax.Array,
    *,
    spec: scan.Scan,
    axis: str,
    k: int,
    platform: str,
) -> tuple[jax.Array, jax.Array]:
    """One device: the top-k of its queries over the allowed rows of its shard, then over all shards.

    The laid-out shard (:func:`geojax.search.scan.layout`) is scanned densely by the codec's kernel, 2,048
    rows at a time for a block of queries (distances held: query block × 2,048), rows the bitset masks (or
    past the shard's ``size[0]`` rows) become empty slots, and each chunk's candidates are merged into the
    running top-k by (distance, id) (:func:`geojax.search.merge.merge_topk`); then the shards' top-k are
    gathered over ``axis`` and merged.
    Run under ``jax.shard_map`` (:class:`IndexFlat` does).

    Args:
        queries: [q, ...] this device's queries (the codec's scan queries).
        rows: [blocks, n, W'] the shard's rows in the scan's operand form (:func:`geojax.search.scan.layout`).
        ids: [capacity] int32 the shard's ids (``NO_ID`` empty).
        size: [1] int32 the shard's rows.
        aux: the scan's ``aux`` (PQ: codebooks).
        bits: [1 or q, B] uint8 allowed ids (:func:`geojax.search.filters.allowed_bits`; a row per query of
            this device when per query).
        spec: the codec's scan.
        axis: the mesh axis the rows are sharded over.
        k: neighbours per query.
        platform: the devices' platform.

    Returns:
        (distances [q, k] ascending, the largest value where empty; ids [q, k] int32, −1 where empty).
    """
    nq = queries.shape[0]
    qb = min(spec.query_block, nq)
    blocks = -(-nq // qb)
    padded = jnp.pad(queries, ((0, blocks * qb - nq),) + ((0, 0),) * (queries.ndim - 1))
    big = jnp.iinfo(jnp.int32).max if spec.integer else jnp.inf
    flat_rows = rows.reshape(-1, rows.shape[2])
    total = flat_rows.shape[0]
    n = min(_FILTER_ROWS, total)

    def one_block(args):
        qx, first = args
        qdata = spec.prepare(aux, spec.operand(qx))
        query = jnp.minimum(first + jnp.arange(qb, dtype=jnp.int32)[:, None], bits.shape[0] - 1)

        def step(carry, c):
            # The last chunk is moved back to end at the last row; the rows it repeats are masked.
            start = jnp.minimum(c * n, total - n)
            dist = spec.kernel(qdata, lax.dynamic_slice_in_dim(flat_rows, start, n).T, True)  # [qb, n]
            pos = start + jnp.arange(n, dtype=jnp.int32)
            new = (pos >= c * n) & (pos < size[0])
            rid = jnp.where(new, ids[jnp.minimum(pos, ids.shape[0] - 1)], NO_ID)[None]
            ok = is_allowed(bits, query, rid)
            d = jnp.concatenate([carry[0], jnp.where(ok, dist, big).astype(carry[0].dtype)], axis=1)
            i = jnp.concatenate([carry[1], jnp.where(ok, rid, NO_ID)], axis=1)
            return merge_topk(d, i, k, platform=platform), None

        dtype = jnp.int32 if spec.integer else jnp.float32
        init = (jnp.full((qb, k), big, dtype), jnp.full((qb, k), NO_ID, jnp.int32))
        return lax.scan(step, init, jnp.arange(-(-total // n), dtype=jnp.int32))[0]

    firsts = jnp.arange(blocks, dtype=jnp.int32) * qb
    d, i = lax.map(one_block, (padded.reshape(blocks, qb, *queries.shape[1:]), firsts))
    d, i = d.reshape(blocks * qb, k)[:nq], i.reshape(blocks * qb, k)[:nq]
    return merge_over_axis(d, i, k, axis, empty=big, platform=platform)


@functools.lru_cache(maxsize=64)
def _functions(mesh: jax.sharding.Mesh, db_axis: str, query_axis: str | None, spec: scan.Scan) -> _Functions:
    """The one :class:`_Functions` of a mesh, its axes and a scan: a rebuilt or read-back index compiles
    nothing new."""
    return _Functions(mesh, db_axis, query_axis, spec)
