"""A search index the user keeps: exact top-k over codes sharded across devices and processes.

The codes live on a device mesh axis (``jax.sharding.NamedSharding``, ``db_axis``): each shard holds its rows
in one buffer, in the order they were added, beside each row's global id (add order over all processes, as
faiss numbers its rows). A search runs the scans of :mod:`geojax.search` on every shard at once
(``jax.shard_map``), each device over its own rows only, then gathers the per-shard top-k (distance, id)
over ``db_axis`` and sorts them by (distance, id): the exact global top-k with ties to the lower id, equal to
one device scanning everything, since every row of the global top-k is in its own shard's top-k by the same
order. Queries can be split over a second mesh axis (``query_axis``) at the same time.

Several processes (``jax.distributed``) form one index: every process calls :meth:`Index.add`,
:meth:`Index.search`, :meth:`Index.save` and :meth:`Index.load` together, each with its own part of the
codes (its own file or range). A process's rows go to the shards on its own devices and take the ids after
those of the processes before it, so that the index equals one process holding all rows in process order.
A shard may span several devices only along ``query_axis``, all of one process.

Memory per device is proportional to its shard: ``width + 4`` bytes per row (code and int32 id) in a buffer
that grows by doubling (an add writes its rows in place; the buffer is copied only when it grows, so it
holds at most twice the rows), and a search lays the buffer out once more for its scan (``2·width`` bytes
per buffer row for that call, the unpacked width for b-bit L2): at most 1e9 / (3·width + 4) rows per GB.
Ids are int32: at most 2^31 − 1 rows in all.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from geojax import _checks, quantize, search
from geojax._files import atomic_write
from geojax.quantize import PQ

KINDS = ("hamming", "torus", "pq")
MAGIC = b"GEOJAXIX"
VERSION = 1
_HEADER = struct.Struct("<8sII")  # magic, format version, bytes of the JSON description that follows
_MIN_CAPACITY = 1024
_NO_ID = np.iinfo(np.int32).max


class _Scan(NamedTuple):
    """How one kind of code is scanned: :func:`geojax.search._blocked`'s arguments and defaults."""

    kernel: object
    prepare: object
    operand: object  # codes or queries [n, B] → the kernel's operand (e.g. uint32 words)
    exact: bool  # integer keys fit float32
    integer: bool  # distances are integers
    chunk: int
    query_block: int


def _scan(kind: str, width: int, bits: int, p: int) -> _Scan:
    if kind == "pq":
        return _Scan(search._pq_kernel, search._pq_tables, _as_is, True, False, 4096, 32)
    if kind == "hamming":
        exact = width * 8 <= search._EXACT_F32
        return _Scan(
            search._hamming_kernel, search._queries_as_is, search._as_words, exact, True, 16384, 1024
        )
    kernel = search._torus_codes(p, bits, jnp.zeros((1, width), jnp.uint8))[0]
    exact = search._torus_bound(width, bits, p) <= search._EXACT_F32
    operand = functools.partial(_torus_operand, p, bits)
    return _Scan(kernel, search._queries_as_is, operand, exact, True, 16384, 256)


def _as_is(x):
    return x


def _torus_operand(p: int, bits: int, codes):
    return search._torus_codes(p, bits, codes)[1]


def _split(rows: int, parts: int) -> list[int]:
    """``rows`` in ``parts`` near-equal pieces, the larger ones first."""
    return [rows // parts + (i < rows % parts) for i in range(parts)]


def _process_counts(values: list[int]) -> np.ndarray:
    """[processes, len(values)]: every process's ``values`` (one row per process, in process order)."""
    local = np.asarray(values, np.int64)
    if jax.process_count() == 1:
        return local[None]
    return np.asarray(multihost_utils.process_allgather(local)).reshape(jax.process_count(), len(values))


def _host(x: jax.Array) -> np.ndarray:
    """A global array as a numpy array on every process."""
    if x.is_fully_addressable:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _write_parts(path: str, parts: list[bytes | np.ndarray]) -> None:
    """Write ``parts`` to ``path`` atomically: it holds either its old content or all of the new."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part if isinstance(part, bytes) else np.ascontiguousarray(part).tobytes())

    atomic_write(path, write)


def _read_header(path: str) -> tuple[dict, int]:
    """(description, byte offset of the arrays) of an index file; ValueError for a file of another kind or
    version."""
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size or head[:8] != MAGIC:
            raise ValueError(f"path {path!r} is not a geojax index file (its first bytes are not {MAGIC!r})")
        _, version, length = _HEADER.unpack(head)
        if version != VERSION:
            raise ValueError(
                f"path {path!r} is a geojax index file of format version {version}; this geojax reads "
                f"version {VERSION}"
            )
        meta = json.loads(f.read(length).decode())
    return meta, _HEADER.size + length


class Index:
    """Exact top-k search over Hamming, torus (b-bit, wraparound L1/L2) or PQ codes, sharded over
    ``mesh``'s ``db_axis`` (default: every device of every process on one axis).

    kind: 'hamming' (packed bits, ``width`` bytes), 'torus' (``quantize.torus_codes(·, bits)``, ``width``
    bytes, distance ``p`` = 1 or 2) or 'pq' (codes of ``pq``, ``width`` = pq.m). The distances are those of
    :func:`geojax.search.hamming_topk`, :func:`geojax.search.torus_topk` and :func:`geojax.search.pq_topk`.
    """

    def __init__(
        self,
        kind: str,
        width: int,
        *,
        bits: int = 8,
        p: int = 1,
        pq: PQ | None = None,
        mesh: jax.sharding.Mesh | None = None,
        db_axis: str = "db",
        query_axis: str | None = None,
    ) -> None:
        _checks.check_choice(kind, "kind", KINDS)
        _checks.check_positive_int(width, "width")
        _checks.check_choice(bits, "bits", quantize.TORUS_BITS)
        _checks.check_choice(p, "p", (1, 2))
        self._pq = _check_pq(kind, width, pq)
        self.mesh = mesh if mesh is not None else jax.sharding.Mesh(np.array(jax.devices()), (db_axis,))
        _check_axes(self.mesh, db_axis, query_axis)
        self.kind, self.width, self.bits, self.p = kind, int(width), int(bits), int(p)
        self.db_axis, self.query_axis = db_axis, query_axis
        self._dtype = np.uint16 if pq is not None and pq.codebooks.shape[1] > 256 else np.uint8
        self._spec = _scan(kind, self.width, self.bits, self.p)
        operand = jax.eval_shape(self._spec.operand, jax.ShapeDtypeStruct((1, self.width), self._dtype))
        self._row_bytes = operand.shape[1] * operand.dtype.itemsize
        self._shard_of, self._owners = _shard_owners(self.mesh, db_axis)
        self.shards = len(self._owners)
        self._sizes = np.zeros(self.shards, np.int64)
        self._capacity = 0
        self._codes = self._ids = None
        self.ntotal = 0
        self._fns = _Functions(self.mesh, db_axis, query_axis, self._spec)

    # ---------------------------------------------------------------------------------------------- build
    @classmethod
    def build(cls, kind: str, codes: ArrayLike, **options) -> Index:
        """An index of ``codes`` [N, width] (this process's part); ``options`` as for the constructor."""
        _checks.check_matrix(codes, "codes")
        index = cls(kind, int(np.shape(codes)[1]), **options)
        index.add(codes)
        return index

    @property
    def shard_sizes(self) -> np.ndarray:
        """Rows held by each shard, in mesh order along ``db_axis`` [shards]."""
        return self._sizes.copy()

    def add(self, codes: ArrayLike) -> None:
        """Append this process's ``codes`` [n, width] (n may be 0); their ids follow the index's rows and the
        rows the processes before this one add in the same call."""
        codes = self._check_codes(codes, "codes")
        counts = _process_counts([len(codes)])[:, 0]
        first = self.ntotal + int(counts[: jax.process_index()].sum())
        self._append(codes, np.arange(first, first + len(codes), dtype=np.int64), counts)
        self.ntotal += int(counts.sum())

    def _check_codes(self, codes, name: str) -> np.ndarray:
        _checks.check_matrix(codes, name)
        _checks.check_dtype(codes, name, self._dtype)
        if np.shape(codes)[1] != self.width:
            raise ValueError(
                f"{name} must have {self.width} columns (the index's width), got {np.shape(codes)}"
            )
        codes = np.asarray(codes)
        if self.kind == "pq":
            k = self._pq.codebooks.shape[1]
            _checks.check_index_range(codes, name, k, f"{k} centroids per sub-space")
        if self.ntotal + len(codes) > _NO_ID:
            raise ValueError(f"{name} would take the index past {_NO_ID} rows (int32 ids)")
        return codes

    def _append(self, codes: np.ndarray, ids: np.ndarray, counts: np.ndarray) -> None:
        """Write this process's rows (ids ascending) to its shards; ``counts``: every process's row count."""
        pieces = np.zeros(self.shards, np.int64)
        for proc, count in enumerate(counts):
            owned = [s for s in range(self.shards) if self._owners[s] == proc]
            if count and not owned:
                raise ValueError(
                    f"process {proc} adds rows but holds no shard of the mesh's {self.db_axis!r}"
                )
            pieces[owned] = _split(int(count), len(owned))
        most = int(pieces.max())
        if most == 0:
            return
        need = int((self._sizes + most).max())
        if need > self._capacity:
            self._grow(max(need, 2 * self._capacity, _MIN_CAPACITY))
        mine = [s for s in range(self.shards) if self._owners[s] == jax.process_index()]
        ends = np.cumsum(pieces[mine])
        local = {s: slice(int(e - pieces[s]), int(e)) for s, e in zip(mine, ends, strict=True)}
        new_codes = self._put(lambda s: _pad_rows(codes[local[s]], most), (self.shards * most, self.width))
        new_ids = self._put(
            lambda s: _pad_rows(ids[local[s]].astype(np.int32), most, _NO_ID), (self.shards * most,)
        )
        starts = self._put(lambda s: self._sizes[s : s + 1].astype(np.int32), (self.shards,))
        self._codes, self._ids = self._fns.write(self._codes, self._ids, new_codes, new_ids, starts)
        self._sizes += pieces

    def _put(self, shard_data, shape: tuple[int, ...]) -> jax.Array:
        """A global array sharded over ``db_axis``, each local device given ``shard_data(its shard)``."""
        sharding = NamedSharding(self.mesh, P(self.db_axis))
        arrays = [jax.device_put(shard_data(self._shard_of[d]), d) for d in sharding.addressable_devices]
        return jax.make_array_from_single_device_arrays(shape, sharding, arrays)

    def _grow(self, capacity: int) -> None:
        """Reallocate every shard's buffer to ``capacity`` rows, keeping its rows (the one copy an add makes,
        and only when the buffer is full)."""
        if self._codes is None:
            self._codes, self._ids = self._fns.empty(self.shards * capacity, self.width, self._dtype)
        else:
            self._codes, self._ids = self._fns.grow(self._codes, self._ids, capacity - self._capacity)
        self._capacity = capacity

    # --------------------------------------------------------------------------------------------- search
    def search(self, queries: ArrayLike, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact k nearest rows of the whole index for ``queries`` (the same on every process).

        queries: [Q, width] uint8 codes (hamming, torus) or [Q, D] finite floats (pq) → (distances [Q, k]
        ascending, int32 for codes and float32 for pq; ids [Q, k] int32), ties to the lower id.
        """
        queries = self._check_queries(queries)
        _checks.check_k(k, "k", self.ntotal, "rows in the index")
        k = int(k)
        parts = self.mesh.shape[self.query_axis] if self.query_axis else 1
        q = len(queries)
        padded = _pad_rows(queries, -(-q // parts) * parts)
        qarr = jax.make_array_from_callback(
            padded.shape, NamedSharding(self.mesh, P(self.query_axis)), lambda idx: padded[idx]
        )
        per = len(padded) // parts
        plan = search._plan(
            self._capacity,
            k,
            self._spec.chunk,
            min(self._spec.query_block, per),
            search._SELECT,
            self._row_bytes,
        )
        rows, cols = self._fns.layout(self._codes, plan)
        sizes = self._put(lambda s: self._sizes[s : s + 1].astype(np.int32), (self.shards,))
        aux = search._NO_AUX if self._pq is None else self._pq.codebooks
        d, i = self._fns.search(
            qarr, rows, cols, self._ids, sizes, aux, k=k, group=plan[2], capacity=self._capacity
        )
        return _host(d)[:q], _host(i)[:q]

    def _check_queries(self, queries) -> np.ndarray:
        _checks.check_matrix(queries, "queries")
        if self.kind == "pq":
            _checks.check_floating(queries, "queries")
            want = self._pq.codebooks.shape[0] * self._pq.codebooks.shape[2]
            _checks.check_finite(queries, "queries")
            queries = np.asarray(queries, np.float32)
        else:
            _checks.check_dtype(queries, "queries", np.uint8)
            want = self.width
            queries = np.asarray(queries)
        if queries.shape[1] != want:
            raise ValueError(f"queries must have {want} columns, got {queries.shape}")
        return queries

    # ------------------------------------------------------------------------------------------ save/load
    def save(self, path: str) -> None:
        """Write this process's rows (ascending ids, with the ids) and the index's description to ``path``,
        atomically. With several processes each writes its own file (give each its own path)."""
        codes, ids = self._local_rows()
        meta = {
            "kind": self.kind,
            "width": self.width,
            "bits": self.bits,
            "p": self.p,
            "dtype": np.dtype(self._dtype).name,
            "ntotal": self.ntotal,
            "rows": len(ids),
            "process": jax.process_index(),
            "processes": jax.process_count(),
            "codebooks": None if self._pq is None else list(self._pq.codebooks.shape),
        }
        text = json.dumps(meta).encode()
        parts = [_HEADER.pack(MAGIC, VERSION, len(text)), text, ids.astype("<i4"), codes]
        if self._pq is not None:
            parts.append(np.asarray(self._pq.codebooks, "<f4"))
        _write_parts(path, parts)

    def _local_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes, ids) of the shards on this process's devices, ascending ids."""
        codes, ids, seen = [], [], set()
        for c, i in zip(self._codes.addressable_shards, self._ids.addressable_shards, strict=True):
            shard = self._shard_of[c.device]
            if shard in seen:
                continue
            seen.add(shard)
            size = int(self._sizes[shard])
            codes.append(np.asarray(c.data)[:size])
            ids.append(np.asarray(i.data)[:size])
        if not ids:
            return np.zeros((0, self.width), self._dtype), np.zeros(0, np.int32)
        ids_all = np.concatenate(ids)
        order = np.argsort(ids_all, kind="stable")
        return np.concatenate(codes)[order], ids_all[order]

    @classmethod
    def load(cls, path: str, **placement) -> Index:
        """The index saved by :meth:`save` (this process's file), placed on ``placement`` (``mesh``,
        ``db_axis``, ``query_axis``). ValueError for a file of another kind or version, or parts of
        different indexes."""
        meta, offset = _read_header(path)
        shape, rows, width = meta["codebooks"], meta["rows"], meta["width"]
        dtype = np.dtype(meta["dtype"])
        expected = (
            offset + rows * 4 + rows * width * dtype.itemsize + (4 * int(np.prod(shape)) if shape else 0)
        )
        if os.path.getsize(path) != expected:
            raise ValueError(
                f"path {path!r} holds {os.path.getsize(path)} bytes; its header describes {expected}"
            )
        ids = np.fromfile(path, "<i4", rows, offset=offset).astype(np.int64)
        codes = np.fromfile(path, dtype, rows * width, offset=offset + rows * 4).reshape(rows, width)
        pq = None
        if shape:
            books = np.fromfile(path, "<f4", int(np.prod(shape)), offset=offset + rows * 4 + codes.nbytes)
            pq = PQ(codebooks=jnp.asarray(books.reshape(shape)), objective=jnp.zeros((shape[0], 0)))
        index = cls(meta["kind"], width, bits=meta["bits"], p=meta["p"], pq=pq, **placement)
        counts = _process_counts([rows, meta["ntotal"]])
        if len(set(counts[:, 1])) != 1 or counts[:, 0].sum() != meta["ntotal"]:
            raise ValueError(
                f"the files loaded hold {counts[:, 0].tolist()} rows of indexes of {counts[:, 1].tolist()}"
            )
        index._append(index._check_codes(codes, "codes in the file"), ids, counts[:, 0])
        index.ntotal = int(meta["ntotal"])
        return index


def _pad_rows(x: np.ndarray, rows: int, value=0) -> np.ndarray:
    return np.pad(x, ((0, rows - len(x)),) + ((0, 0),) * (x.ndim - 1), constant_values=value)


def _check_pq(kind: str, width: int, pq: PQ | None) -> PQ | None:
    if (kind == "pq") != (pq is not None):
        raise ValueError(
            f"pq must be given for kind 'pq' and only then, got kind {kind!r} and pq {type(pq).__name__}"
        )
    if pq is None:
        return None
    _checks.check_rank(pq.codebooks, "pq.codebooks", 3)
    _checks.check_finite(pq.codebooks, "pq.codebooks")
    if pq.codebooks.shape[0] != width:
        raise ValueError(f"width must be pq's m = {pq.codebooks.shape[0]} for kind 'pq', got {width}")
    return PQ(codebooks=jnp.asarray(pq.codebooks, jnp.float32), objective=pq.objective)


def _check_axes(mesh: jax.sharding.Mesh, db_axis: str, query_axis: str | None) -> None:
    names = tuple(mesh.axis_names)
    if db_axis not in names:
        raise ValueError(f"db_axis must be one of the mesh's axes {names}, got {db_axis!r}")
    if query_axis is not None and (query_axis not in names or query_axis == db_axis):
        raise ValueError(
            f"query_axis must be None or a mesh axis other than {db_axis!r} in {names}, got {query_axis!r}"
        )


def _shard_owners(mesh: jax.sharding.Mesh, db_axis: str) -> tuple[dict, list[int]]:
    """(device → its shard along ``db_axis``, each shard's process); ValueError when a shard's devices
    belong to several processes."""
    dim = mesh.axis_names.index(db_axis)
    shard_of, owners = {}, [set() for _ in range(mesh.shape[db_axis])]
    for position, device in np.ndenumerate(mesh.devices):
        shard_of[device] = position[dim]
        owners[position[dim]].add(device.process_index)
    if any(len(o) > 1 for o in owners):
        raise ValueError(f"mesh: each shard along {db_axis!r} must lie on the devices of one process")
    return shard_of, [o.pop() for o in owners]


class _Functions:
    """The index's compiled steps over its mesh (one set per index: the mesh and kind are fixed)."""

    def __init__(self, mesh, db_axis: str, query_axis: str | None, spec: _Scan) -> None:
        self.mesh, self.db_axis, self.query_axis, self.spec = mesh, db_axis, query_axis, spec
        db = P(db_axis)
        self._db = NamedSharding(mesh, db)
        shard = functools.partial(jax.shard_map, mesh=mesh, check_vma=False)
        self.write = jax.jit(
            shard(_write_rows, in_specs=(db,) * 5, out_specs=(db, db)), donate_argnums=(0, 1)
        )

    def empty(self, rows: int, width: int, dtype) -> tuple[jax.Array, jax.Array]:
        make = jax.jit(
            lambda: (jnp.zeros((rows, width), dtype), jnp.full((rows,), _NO_ID, jnp.int32)),
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
            lambda c: search._layout(self.spec.operand(c), plan),
            mesh=self.mesh,
            in_specs=(db,),
            out_specs=(db, db),
            check_vma=False,
        )(codes)

    @functools.partial(jax.jit, static_argnums=0, static_argnames=("k", "group", "capacity"))
    def search(self, queries, rows, cols, ids, sizes, aux, *, k: int, group: int, capacity: int):
        db, qs = P(self.db_axis), P(self.query_axis)
        local = functools.partial(
            _shard_topk, spec=self.spec, axis=self.db_axis, k=k, group=group, capacity=capacity
        )
        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(qs, db, db, db, db, P()),
            out_specs=(qs, qs),
            check_vma=False,
        )(queries, rows, cols, ids, sizes, aux)


def _write_rows(codes, ids, new_codes, new_ids, start):
    """One shard: ``new_codes`` [m, W] and ``new_ids`` [m] written at row ``start[0]`` of its buffers."""
    return (
        lax.dynamic_update_slice(codes, new_codes, (start[0], 0)),
        lax.dynamic_update_slice(ids, new_ids, (start[0],)),
    )


def _grow_rows(codes, ids, *, extra: int):
    """One shard's buffers with ``extra`` empty rows appended."""
    return jnp.pad(codes, ((0, extra), (0, 0))), jnp.pad(ids, (0, extra), constant_values=_NO_ID)


def _shard_topk(
    queries, rows, cols, ids, size, aux, *, spec: _Scan, axis: str, k: int, group: int, capacity: int
):
    """One device: the top-k of its queries over its shard's ``size[0]`` rows, then the exact top-k over all
    shards of ``axis`` by (distance, id) → (distances [q, k], ids [q, k])."""
    v, i = search._blocked(
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
    )
    lowest = jnp.finfo(search._F32).max if spec.exact else jnp.iinfo(jnp.int32).max
    gid = jnp.where(v > -lowest, ids[jnp.minimum(i, capacity - 1)], _NO_ID)
    keys = lax.all_gather(-v, axis, axis=1, tiled=True)  # [q, shards·k] distances, shard order
    gid = lax.all_gather(gid, axis, axis=1, tiled=True)
    d, g = lax.sort((keys, gid), dimension=1, num_keys=2)
    return (d[:, :k].astype(jnp.int32) if spec.integer else d[:, :k]), g[:, :k]
