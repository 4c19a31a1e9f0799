"""The inverted-file index (Jégou et al. 2011 §IV; Sivic & Zisserman 2003): a coarse quantiser files every
row in one of ``nlist`` lists, and a search scans only the ``nprobe`` lists nearest each query.

Coarse quantiser (:mod:`geojax.search.coarse`). Lloyd's k-means on the codec's coarse features
(:mod:`geojax.search.codecs`), in the embedding's own geometry: on the torus the features are the Clifford
pairs (cos 2πt_k, sin 2πt_k) of the code's angles and each centroid pair is scaled back to unit length after
the mean, i.e. circular means of the angles, with assignment by Σ_k 2 − 2 cos 2πΔ_k, an increasing function of
the wraparound distance Δ_k in every coordinate; on the sphere features and centroids are unit vectors
(spherical k-means); otherwise Euclidean k-means. Rows are filed by their *codes'* features, so ``add(x)`` and
``add_codes(encode(x))`` agree; a trained index grows without retraining.

Lists in segments, scanned list-major (:mod:`geojax.search.ivf_scan`). The rows, by list and then by id,
are cut into segments of ``block`` rows (each list's last segment padded with empty slots); by default the
segment size comes from the lists' sizes: the largest power of two up to 1,024 whose padding adds at most
8 % to the rows (:func:`~geojax.search.ivf_scan.segment_rows`), not the largest list. Segment g, counted over
all lists, lies on device g mod devices of the mesh's ``db_axis``, so the devices hold almost equal shares
and each list's segments on a device are consecutive there. A search first finds each query's ``nprobe``
nearest centroids, then groups its (query, list) pairs by list on the host: each probed list's queries in
tiles of up to 32 (the power of two at or below the mean queries per probed list), and each tile meets each
of its list's segments on a device once, as dense blocks of up to ``span`` consecutive segments (the power of
two at or below the mean segments of a probed list on a device, at most 256 rows or one segment; segments
past the list's are masked): the codec's flat-scan kernel over [tile, width] queries against the block's
[width, rows] columns, the rows read once for all the tile's queries. PQ's lookup tables are read where they
lie, each query's contiguous, not gathered per block.
One jitted program per device scans its units, a chunk at a time (at most 4 MiB of codes and 512 KiB of
distances), only the chunks that hold units (tile and unit counts are static shapes rounded up within 25 %,
so few shapes compile). The selection is in groups (the flat scan's argument, carried to rows of many
segments): each unit gives, per group of :func:`~geojax.search.ivf_scan.group_rows` consecutive rows, the
group's smallest distance and the id of its first row at it, into each tile query's row of groups; each query
takes its k best groups by (minimum, id), whose rows hold its k nearest (a row outside them is beaten by k
group minima, distinct rows each ahead of it by distance or, at equal distance, by id); those rows' distances
are recomputed and ranked by (distance, id), on the device and then over the devices
(:func:`geojax.search.merge.merge_topk`: two ``lax.top_k`` calls on int32 order keys on a CPU, no sort). With
``nprobe = nlist`` every row is a candidate: the result is exactly the flat index's, ties included.

Several processes (``jax.distributed``) form one index as they form one :class:`geojax.search.IndexFlat`:
every process calls ``train`` (with the same vectors, so every process holds the same quantiser), ``add``,
``search``, ``remove_ids``, ``write_index`` and ``read_index`` together, each adding its own part of the rows;
a process's rows take the ids after those of the processes before it, live in its own lists and are dealt
over its own devices. A search runs on every process over its own lists, and the per-process top-k are
gathered and merged by (distance, id): the index equals one process holding all rows in process order.
A query whose probed lists hold fewer than k rows gets id −1 and the largest distance (int32 max, or +inf
for PQ) in the slots left.

Memory (``nbytes``): once laid out, the rows live only on the devices: per row its code (``width`` bytes,
as stored, whatever the scan's operand form) and its int32 id (4 bytes), plus the segments' padding (at most
8 % with the chosen segment size); the host keeps the segment table ((nlist + 1) int64 per device), the list
sizes (nlist int64) and the centroids (nlist × features float32). Rows added since the last search wait on
the host (codes, ids and their lists, ``width + 8`` bytes a row) and move to the devices at the next search
or ``nbytes``; that move, ``remove_ids``, ``state`` and ``add`` with ids read the devices' rows back, holding
a second copy for the call. A search holds, per query, its row of group minima and ids (8 bytes per group of
its probed segments) and, for PQ, its lookup tables (m·2^nbits·4 bytes: 8 KiB for PQ(8×8)).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from geojax import _checks
from geojax.search import codecs, placement
from geojax.search.coarse import assign, kmeans, nearest_lists
from geojax.search.codecs import Codec
from geojax.search.index import Index, check_parts
from geojax.search.ivf_scan import (
    Layout,
    build_layout,
    group_rows,
    layout_rows,
    schedule,
    segment_rows,
    shard_search,
)
from geojax.search.merge import merge_topk
from geojax.search.placement import NO_ID
from geojax.search.scan import Scan

_ADD_ROWS = 1 << 16  # rows encoded and filed per step of an add


class IndexIVF(Index):
    """Inverted lists over a codec's codes (module docstring); faiss's ``IndexIVF`` shape.

    A coarse quantiser files every row in one of ``nlist`` lists, and a search scans only the ``nprobe`` lists
    nearest each query; with ``nprobe = nlist`` the result is exactly the flat index's, ties included. With
    several processes each holds its own rows' lists, dealt over its own devices (module docstring).

    Args:
        codec: a :class:`geojax.search.codecs.Codec`.
        nlist: the number of lists (a positive int).
        nprobe: lists scanned per query, 1 ≤ nprobe ≤ nlist (settable later).
        block: rows per segment of a list (a positive int); None: chosen when the lists are laid out for a
            search, the largest power of two up to 1,024 that pads the rows by at most 8 %
            (:func:`geojax.search.ivf_scan.segment_rows`; larger segments scan faster).
        iters: k-means rounds (a positive int); 10 is faiss's for its IVF quantisers (``cp.niter``).
        train_rows: the most training rows the quantiser uses (a random subset); None: 256 per list, faiss's
            default.
        mesh: this process's devices the segments are dealt over; None: every device of this process on one
            axis named ``db_axis``.
        db_axis: the mesh axis the segments are dealt over.

    Raises:
        ValueError: ``codec`` is not a codec, a size is not a positive int, ``nprobe`` > ``nlist``, the axis
            is not the mesh's, or the mesh holds another process's devices.

    References:
        Jégou, Douze & Schmid 2011, "Product Quantization for Nearest Neighbor Search" (IEEE TPAMI 33(1)),
        §IV; Sivic & Zisserman 2003, "Video Google".

    Example:
        >>> import numpy as np
        >>> from geojax.search import IndexIVF, TorusCodec
        >>> t = np.random.default_rng(0).random((64, 4), dtype=np.float32)
        >>> index = IndexIVF(TorusCodec(4), nlist=4, nprobe=4, iters=5)
        >>> index.train(t)
        >>> index.add(t)
        >>> distances, ids = index.search(t[:2], 1)
        >>> print(ids.ravel())
        [0 1]
    """

    kind = "ivf"

    def __init__(
        self,
        codec: Codec,
        nlist: int,
        *,
        nprobe: int = 1,
        block: int | None = None,
        iters: int = 10,
        train_rows: int | None = None,
        mesh: jax.sharding.Mesh | None = None,
        db_axis: str = "db",
    ) -> None:
        super().__init__(codec)
        for value, name in ((nlist, "nlist"), (iters, "iters")):
            _checks.check_positive_int(value, name)
        if block is not None:
            _checks.check_positive_int(block, "block")
        if train_rows is not None:
            _checks.check_positive_int(train_rows, "train_rows")
        self.nlist, self.iters = int(nlist), int(iters)
        self.block = None if block is None else int(block)
        self.train_rows = 256 * self.nlist if train_rows is None else int(train_rows)
        self.mesh = mesh if mesh is not None else jax.sharding.Mesh(np.array(jax.local_devices()), (db_axis,))
        placement.check_axes(self.mesh, db_axis, None)
        if any(d.process_index != jax.process_index() for d in self.mesh.devices.flat):
            raise ValueError("mesh must hold only this process's devices (each process deals its own lists)")
        self.db_axis = db_axis
        self._shard_of, _ = placement.shard_owners(self.mesh, db_axis)
        self.shards = self.mesh.shape[db_axis]
        self.nprobe = nprobe
        self.centroids: jax.Array | None = None
        self.reset()

    @property
    def nprobe(self) -> int:
        """Lists scanned per query; setting it checks 1 ≤ nprobe ≤ nlist (``ValueError`` otherwise)."""
        return self._nprobe

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        """Lists scanned per query; setting it checks 1 ≤ nprobe ≤ nlist (``ValueError`` otherwise)."""
        _checks.check_positive_int(value, "nprobe")
        if value > self.nlist:
            raise ValueError(f"nprobe must be at most nlist = {self.nlist}, got {value}")
        self._nprobe = int(value)

    @property
    def is_trained(self) -> bool:
        """Whether the codec and the coarse quantiser are trained."""
        return self.codec.is_trained and self.centroids is not None

    @property
    def list_sizes(self) -> np.ndarray:
        """Rows in each list [nlist] (this process's rows)."""
        return self._sizes.copy()

    @property
    def nbytes(self) -> int:
        """The bytes this process holds for its index (rows, ids, quantiser and tables).

        The devices' segments of codes and ids (laid out now if a change is pending: ``(width + 4)`` bytes
        per row plus the padding of :func:`~geojax.search.ivf_scan.segment_rows`, at most 8 %), the host's
        segment table and list sizes, and the centroids.
        """
        layout = self._layout()
        centroids = 0 if self.centroids is None else self.centroids.nbytes
        return layout.nbytes + self._sizes.nbytes + centroids

    def reset(self) -> None:
        """Remove every row (the codec and the quantiser stay trained)."""
        self._sizes = np.zeros(self.nlist, np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._device: Layout | None = None
        self.ntotal = 0
        self._next_id = 0

    # ---------------------------------------------------------------------------------------------- train
    def train(self, x: ArrayLike, *, key: jax.Array | None = None) -> None:
        """Fit the codec (unless it is trained already) and the coarse quantiser to x [N ≥ nlist, dim].

        The quantiser runs on the coarse features of at most ``train_rows`` rows (a random subset).

        Args:
            x: [N, dim] finite floating training vectors, N ≥ nlist; the same on every process.
            key: a JAX PRNG key, split for the codec, the subset and k-means; None: ``jax.random.key(0)``.

        Raises:
            ValueError: ``x`` is not a finite floating [N, dim] matrix, has fewer than ``nlist`` rows, or is
                not the same on every process.
        """
        x = codecs.check_vectors(x, "x", self.codec.dim)
        if len(x) < self.nlist:
            raise ValueError(
                f"x must have at least nlist = {self.nlist} rows to train the quantiser, got {len(x)}"
            )
        if jax.process_count() > 1:  # one CRC of x per process (no copy), compared across them
            digest = zlib.crc32(np.ascontiguousarray(x), zlib.crc32(str(x.shape).encode()))
            if len(set(placement.process_counts([digest])[:, 0].tolist())) > 1:
                raise ValueError("x must be the same on every process (each trains the same quantiser)")
        key = jax.random.key(0) if key is None else key
        codec_key, sample_key, kmeans_key = jax.random.split(key, 3)
        if not self.codec.is_trained:
            self.codec.train(x, key=codec_key)
        if len(x) > self.train_rows:
            pick = np.sort(
                np.asarray(jax.random.choice(sample_key, len(x), (self.train_rows,), replace=False))
            )
            x = x[pick]
        features = self.codec.coarse(self.codec.encode(x))
        self.centroids = kmeans(
            features, kmeans_key, nlist=self.nlist, iters=self.iters, geometry=self.codec.geometry
        )
        self._device = None

    # ------------------------------------------------------------------------------------------------ add
    def add(self, x: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Encode and file this process's vectors x [n, dim] (n may be 0), in steps of 65,536 rows.

        Args:
            x: [n, dim] finite floating vectors.
            ids: as for :meth:`geojax.search.index.Index.add`: [n] distinct new integer ids (one process
                only), or None for the ids after the largest so far, in process order.

        Raises:
            ValueError: the index is not trained, ``x`` or ``ids`` is malformed, an id is in the index
                already, ids are given with several processes, or the index would pass 2^31 − 1 rows.

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexIVF, TorusCodec
            >>> t = np.random.default_rng(0).random((64, 4), dtype=np.float32)
            >>> index = IndexIVF(TorusCodec(4), nlist=4, nprobe=4, iters=5)
            >>> index.train(t)
            >>> index.add(t)
            >>> index.ntotal, int(index.list_sizes.sum())
            (64, 64)
        """
        self._check_trained("adding")
        x = self.codec.check_vectors(x, "x")
        ids, counts = self._new_ids(ids, len(x))
        for i in range(0, len(x), _ADD_ROWS):
            codes = self.codec.encode(x[i : i + _ADD_ROWS])
            self._file(codes, ids[i : i + _ADD_ROWS])
        self.ntotal += int(counts.sum())

    def add_codes(self, codes: ArrayLike, ids: ArrayLike | None = None) -> None:
        """File this process's codes [n, width] made by the codec elsewhere (see ``add``).

        Args:
            codes: [n, width] codes of the codec's dtype.
            ids: [n] distinct new integer ids (one process only), or None for the ids after the largest so
                far, in process order.

        Raises:
            ValueError: the index is not trained, ``codes`` or ``ids`` is malformed, an id is in the index
                already, ids are given with several processes, or the index would pass 2^31 − 1 rows.
        """
        self._check_trained("adding")
        codes = self.codec.check_codes(codes)
        ids, counts = self._new_ids(ids, len(codes))
        for i in range(0, len(codes), _ADD_ROWS):
            self._file(codes[i : i + _ADD_ROWS], ids[i : i + _ADD_ROWS])
        self.ntotal += int(counts.sum())

    def _file(self, codes: np.ndarray, ids: np.ndarray) -> None:
        """Assign rows to their lists; they join the device segments at the next layout."""
        lists = assign(self.codec.coarse(codes), self.centroids)
        self._pending.append((lists.astype(np.int32), ids.astype(np.int32), codes))
        self._sizes += np.bincount(lists, minlength=self.nlist)

    def _held(self) -> tuple[np.ndarray, np.ndarray]:
        _, ids, codes = self._rows()
        return codes, ids.astype(np.int64)

    def _keep(self, keep: np.ndarray) -> None:
        if keep.all():
            return
        lists, ids, codes = self._rows()
        self._pending, self._device = [(lists[keep], ids[keep], codes[keep])], None
        self._sizes = np.bincount(lists[keep], minlength=self.nlist).astype(np.int64)

    def _rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lists [n], ids [n], codes [n, width]) of this process's rows, by list then id: the device
        segments' rows and those filed since."""
        parts = list(self._pending)
        if self._device is not None:
            parts.append(layout_rows(self._device))
        if not parts:
            return (
                np.zeros(0, np.int32),
                np.zeros(0, np.int32),
                np.zeros((0, self.codec.width), self.codec.code_dtype),
            )
        lists, ids, codes = (np.concatenate(p) for p in zip(*parts, strict=True))
        order = np.lexsort((ids, lists))
        return lists[order], ids[order], codes[order]

    # --------------------------------------------------------------------------------------------- layout
    def _layout(self) -> Layout:
        """The lists as segments dealt over the shards, laid out again on the first search (or ``nbytes``)
        after a change; the host then drops its copy of the rows."""
        if self._device is None or self._pending:
            lists, ids, codes = self._rows()
            segment = self.block or segment_rows(self._sizes, self.shards)
            put = functools.partial(placement.put_shards, self.mesh, self.db_axis, self._shard_of)
            self._device = build_layout(lists, ids, codes, self.nlist, segment, put, self.shards)
            self._pending = []
        return self._device

    # --------------------------------------------------------------------------------------------- search
    def _search(
        self, q: np.ndarray, queries: np.ndarray, k: int, bits: np.ndarray | None
    ) -> tuple[jax.Array, jax.Array]:
        filtered = bits is not None
        bits = bits if filtered else np.zeros((1, 1), np.uint8)
        layout = self._layout()
        probe = np.asarray(nearest_lists(self.codec.coarse_queries(q), self.centroids, self.nprobe))
        operand = jax.eval_shape(
            self.codec.scan.operand, jax.ShapeDtypeStruct((1, self.codec.width), self.codec.code_dtype)
        )
        row_bytes = operand.shape[1] * operand.dtype.itemsize
        plan, per_query, span, chunk = schedule(probe, layout.starts, layout.segment, row_bytes)
        group = group_rows(layout.segment, per_query, k)
        shape = (k, layout.segment, span, chunk, group, filtered)
        fn = _search_program(self.mesh, self.db_axis, self.codec.scan, *shape)
        put = functools.partial(placement.put_shards, self.mesh, self.db_axis, self._shard_of)
        sharded = [
            put(lambda s, a=a: a[s], (a.shape[0] * a.shape[1], *a.shape[2:]))
            for a in (
                plan.unit_tile,
                plan.unit_segment,
                plan.unit_count,
                plan.unit_slot,
                plan.units[:, None],
                plan.query_segments,
            )
        ]
        d, i = fn(queries, layout.codes, layout.ids, plan.tiles, *sharded, self.codec.aux, bits)
        return _merge_processes(d, i, k) if jax.process_count() > 1 else (d, i)

    # ----------------------------------------------------------------------------------------------- files
    def state(self) -> tuple[dict, dict]:
        """(description, arrays) of this process's part, for ``write_index``.

        The quantiser and every list's rows in list order (``ntotal`` counts every process's rows).

        Returns:
            ({"nlist", "nprobe", "block", "iters", "train_rows", "ntotal", "next_id"}, {"centroids",
            "list_sizes", "ids", "codes"}).
        """
        meta = {
            "nlist": self.nlist,
            "nprobe": self.nprobe,
            "block": self.block,
            "iters": self.iters,
            "train_rows": self.train_rows,
            "ntotal": self.ntotal,
            "next_id": self._next_id,
        }
        _, ids, codes = self._rows()
        arrays = {
            "centroids": np.asarray(
                self.centroids if self.centroids is not None else np.zeros((0, 0), np.float32)
            ),
            "list_sizes": self.list_sizes,
            "ids": ids,
            "codes": codes,
        }
        return meta, arrays

    @classmethod
    def from_state(cls, codec: Codec, meta: dict, arrays: dict, **placement_args) -> IndexIVF:
        """The index that :meth:`state` described, placed on ``placement_args``.

        Args:
            codec: the index's codec (:func:`geojax.search.codecs.codec_from_state`).
            meta: the description of :meth:`state`.
            arrays: the arrays of :meth:`state`.
            **placement_args: ``mesh``, ``db_axis`` of the constructor.

        Returns:
            The :class:`IndexIVF`.

        Raises:
            ValueError: the arrays do not match the description, the processes read parts of different
                indexes (other sizes or quantisers), or the codec rejects the codes.

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexIVF, TorusCodec
            >>> t = np.random.default_rng(0).random((64, 4), dtype=np.float32)
            >>> index = IndexIVF(TorusCodec(4), nlist=4, nprobe=4, iters=5)
            >>> index.train(t)
            >>> index.add(t)
            >>> again = IndexIVF.from_state(index.codec, *index.state())
            >>> again.ntotal, again.nprobe
            (64, 4)
        """
        index = cls(
            codec,
            meta["nlist"],
            nprobe=meta["nprobe"],
            block=meta["block"],
            iters=meta["iters"],
            train_rows=meta["train_rows"],
            **placement_args,
        )
        sizes = arrays["list_sizes"]
        rows = len(arrays["ids"])
        if len(sizes) != index.nlist or sizes.sum() != rows:
            raise ValueError(f"the file's lists hold {int(sizes.sum())} rows; its ids are {rows}")
        digest = zlib.crc32(np.ascontiguousarray(arrays["centroids"]))
        check_parts(rows, meta["ntotal"], digest)
        if arrays["centroids"].size:
            index.centroids = jnp.asarray(arrays["centroids"])
        codes = codec.check_codes(arrays["codes"], "codes in the file")
        lists = np.repeat(np.arange(index.nlist, dtype=np.int32), sizes)
        index._pending = [(lists, arrays["ids"].astype(np.int32), codes)]
        index._sizes = sizes.astype(np.int64)
        index.ntotal, index._next_id = int(meta["ntotal"]), int(meta["next_id"])
        return index


def _merge_processes(d: jax.Array, i: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Every process's top-k [Q, k] gathered and merged by (distance, id): the top-k of the whole index
    (empty slots, id −1, ranked after every row)."""
    gathered_d = np.asarray(multihost_utils.process_allgather(np.asarray(d)))  # [processes, Q, k]
    gathered_i = np.asarray(multihost_utils.process_allgather(np.asarray(i)))
    cand_d = np.concatenate(list(gathered_d), axis=1)
    cand_i = np.concatenate(list(gathered_i), axis=1)
    md, mi = merge_topk(jnp.asarray(cand_d), jnp.asarray(np.where(cand_i < 0, NO_ID, cand_i)), k)
    return md, jnp.where(mi < NO_ID, mi, -1)


@functools.lru_cache(maxsize=256)
def _search_program(
    mesh: jax.sharding.Mesh,
    db_axis: str,
    spec: Scan,
    k: int,
    segment: int,
    span: int,
    chunk: int,
    group: int,
    filtered: bool,
) -> Callable:
    """The jitted list-major search over ``mesh`` for one scan and schedule shape.

    Shared by every index with that mesh, scan and shape, so an index read back or rebuilt reuses what an
    earlier one compiled.
    """
    local = functools.partial(
        shard_search,
        spec=spec,
        axis=db_axis,
        k=k,
        segment=segment,
        span=span,
        chunk=chunk,
        group=group,
        filtered=filtered,
        platform=placement.platform(mesh),
    )
    db = P(db_axis)
    mapped = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(), db, db, P(), db, db, db, db, db, db, P(), P()),
        out_specs=(P(), P()),
        check_vma=False,
    )
    return jax.jit(mapped)
