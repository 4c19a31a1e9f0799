"""``Index``: the contract every geojax index keeps, stated once (faiss's ``Index``), and its shared checks.

An index owns a codec (:mod:`geojax.search.codecs`) and rows with int32 ids in [0, 2^31 − 1):

- ``train(x)`` fits what needs fitting (the codec; :class:`~geojax.search.IndexIVF`'s coarse quantiser);
- ``add(x, ids=None)`` encodes and files vectors, ``add_codes(codes, ids=None)`` files codes made elsewhere;
  without ids the rows take the ids after the largest so far, in process order;
- ``search(q, k, *, allowed=None)`` → (distances [Q, k], ids [Q, k]) ascending, ties to the lower id, id −1
  in the slots a query could not fill; ``range_search(q, radius)`` → faiss's (lims, D, I);
- ``reconstruct(ids)`` → the codec's decode of stored codes; ``remove_ids(ids)`` → the rows removed;
  ``reset()`` empties the index; ``ntotal`` counts the rows of every process;
- ``state()`` / ``from_state(...)`` describe this process's part for :func:`geojax.search.write_index` /
  :func:`geojax.search.read_index`.

With several processes (``jax.distributed``) every process calls each method together, with the same
queries and the same ids to remove or reconstruct, and its own vectors to add.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.typing import ArrayLike

from geojax import _checks
from geojax.search import placement
from geojax.search.codecs import Codec
from geojax.search.filters import IdRanges, allowed_bits
from geojax.search.placement import NO_ID
from geojax.search.ranges import check_radius, range_search


def check_ids(ids: ArrayLike | None, n: int) -> np.ndarray | None:
    """User ids as int64 [n], distinct, in [0, 2^31 − 1); None passes through.

    Args:
        ids: [n] integer ids, or None.
        n: the number of rows the ids label.

    Returns:
        [n] int64 NumPy array, or None.

    Raises:
        ValueError: ``ids`` is not a rank-1 integer array of n distinct entries in [0, 2^31 − 1).

    Example:
        >>> import numpy as np
        >>> from geojax.search import index
        >>> index.check_ids(np.array([3, 1]), 2)
        array([3, 1])
    """
    if ids is None:
        return None
    _checks.check_rank(ids, "ids", 1)
    _checks.check_integer(ids, "ids")
    ids = np.asarray(ids, np.int64)
    if len(ids) != n:
        raise ValueError(f"ids must have one entry per row ({n}), got {len(ids)}")
    if n and (ids.min() < 0 or ids.max() >= NO_ID):
        raise ValueError(f"ids must lie in [0, {NO_ID}), got [{ids.min()}, {ids.max()}]")
    if len(np.unique(ids)) != n:
        raise ValueError("ids must be distinct")
    return ids


def check_k(k: int, ntotal: int) -> int:
    """``k`` as an int, checked against the rows in the index.

    Args:
        k: the number of neighbours, 1 ≤ k ≤ ``ntotal``.
        ntotal: the rows in the index.

    Returns:
        ``k`` as a Python int.

    Raises:
        ValueError: ``k`` is not a positive int or exceeds ``ntotal``.
    """
    _checks.check_k(k, "k", ntotal, "rows in the index")
    return int(k)


def check_parts(rows: int, ntotal: int, digest: int = 0) -> np.ndarray:
    """The rows each process read, checked to be parts of one index.

    Every process's file records the same ``ntotal`` (and the same ``digest``, e.g. of a quantiser), and the
    rows read add up to it.

    Args:
        rows: the rows this process read.
        ntotal: the index's row count its file records.
        digest: a checksum of what must be the same on every process (0: nothing).

    Returns:
        [processes] int64: the rows each process read.

    Raises:
        ValueError: the files read hold rows of indexes of different sizes, or different digests.
    """
    counts = placement.process_counts([rows, ntotal, digest])
    same = len(set(counts[:, 1])) == 1 and len(set(counts[:, 2])) == 1
    if not same or counts[:, 0].sum() != ntotal:
        raise ValueError(
            f"the files read hold {counts[:, 0].tolist()} rows of indexes of {counts[:, 1].tolist()} rows"
            + ("" if len(set(counts[:, 2])) == 1 else " with different quantisers")
        )
    return counts[:, 0]


def _reconstruct_rows(codec: Codec, codes: np.ndarray, held: np.ndarray, ids: ArrayLike) -> np.ndarray:
    """The decoded rows of ``ids`` among this process's rows (codes [n, width], held ids [n]), found on
    every process (each id lives on one; with several processes the rows found are gathered).

    Returns [m, D] float32 in the order of ``ids``; raises ``ValueError`` naming the ids in no process's rows.
    """
    _checks.check_rank(ids, "ids", 1)
    _checks.check_integer(ids, "ids")
    want = np.asarray(ids, np.int64)
    order = np.argsort(held, kind="stable")
    pos = np.minimum(np.searchsorted(held[order], want), max(len(held) - 1, 0))
    found = (held[order][pos] == want) if len(held) else np.zeros(len(want), bool)
    local = (
        np.where(found[:, None], codes[order][pos], 0) if len(held) else np.zeros((len(want), codec.width))
    )
    local = local.astype(codec.code_dtype)
    if jax.process_count() > 1:
        every = np.asarray(multihost_utils.process_allgather(found))  # [processes, m]
        local = np.asarray(multihost_utils.process_allgather(local))[
            np.argmax(every, 0), np.arange(len(want))
        ]
        found = every.any(0)
    if not found.all():
        missing = want[~found]
        raise ValueError(
            f"ids must be ids in the index: {len(missing)} are not (e.g. {missing[:5].tolist()})"
        )
    return codec.decode(local)


class Index(abc.ABC):
    """What every index does (module docstring), faiss's ``Index`` contract.

    :class:`~geojax.search.IndexFlat` and :class:`~geojax.search.IndexIVF` fill in where their rows live and
    how they are scanned.

    Args:
        codec: a :class:`geojax.search.codecs.Codec`.

    Raises:
        ValueError: ``codec`` is not a codec.
    """

    kind: ClassVar[str]  # the index's name in its file ('flat', 'ivf')

    def __init__(self, codec: Codec) -> None:
        if not isinstance(codec, Codec):
            raise ValueError(f"codec must be a geojax.search codec, got {type(codec).__name__}")
        self.codec = codec
        self.ntotal = 0
        self._next_id = 0

    # ------------------------------------------------------------------------------ what an index fills in
    @abc.abstractmethod
    def train(self, x: ArrayLike, *, key: jax.Array | None = None) -> None:
        """Fit what the index needs fitted to training vectors x [N, dim].

        Args:
            x: [N, dim] finite floating training vectors.
            key: a JAX PRNG key for the random initialisations, or None.
        """

    @abc.abstractmethod
    def add_codes(self, codes: ArrayLike, ids: ArrayLike | None = None) -> None:
        """File this process's codes [n, width] made by the codec elsewhere (see :meth:`add`).

        Args:
            codes: [n, width] codes of the codec's dtype.
            ids: [n] distinct new integer ids (one process only), or None for the ids after the largest so
                far, in process order.
        """

    @abc.abstractmethod
    def reset(self) -> None:
        """Remove every row (what is trained stays trained)."""

    @abc.abstractmethod
    def state(self) -> tuple[dict, dict]:
        """(description, arrays) of this process's part, for ``write_index``.

        Returns:
            (a JSON-able description, named NumPy arrays) that :meth:`from_state` reads back.
        """

    @classmethod
    @abc.abstractmethod
    def from_state(cls, codec: Codec, meta: dict, arrays: dict, **placement_args: Any) -> Index:
        """The index that :meth:`state` described, placed on ``placement_args``.

        Args:
            codec: the index's codec (:func:`geojax.search.codecs.codec_from_state`).
            meta: the description of :meth:`state`.
            arrays: the arrays of :meth:`state`.
            **placement_args: the constructor's placement arguments (``mesh``, ``db_axis``, ...).

        Returns:
            The index.
        """

    @abc.abstractmethod
    def _held(self) -> tuple[np.ndarray, np.ndarray]:
        """(codes [n, width], ids [n] int64) of this process's rows."""

    @abc.abstractmethod
    def _keep(self, keep: np.ndarray) -> None:
        """Keep the rows of :meth:`_held` where ``keep`` [n] is True (called on every process together)."""

    @abc.abstractmethod
    def _search(
        self, q: np.ndarray, queries: np.ndarray, k: int, bits: np.ndarray | None
    ) -> tuple[jax.Array, jax.Array]:
        """The top-k of checked queries (q [Q, dim] as given, ``queries`` as the codec prepares them),
        over the rows ``bits`` (:func:`geojax.search.filters.allowed_bits`, or None: every row) allows."""

    # ------------------------------------------------------------------------------------ the contract
    @property
    def is_trained(self) -> bool:
        """Whether the index can add and search (its codec, and whatever else it fits, is trained)."""
        return self.codec.is_trained

    def add(self, x: ArrayLike, ids: ArrayLike | None = None) -> None:
        """Encode and file this process's vectors x [n, dim] (n may be 0).

        Without ``ids`` they take the ids after the largest so far, in process order.

        Args:
            x: [n, dim] finite floating vectors.
            ids: [n] distinct new integer ids in [0, 2^31 − 1) (one process only), or None.

        Raises:
            ValueError: the index is not trained, ``x`` or ``ids`` is malformed, an id is in the index
                already, ids are given with several processes, or the index would pass 2^31 − 1 rows.

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexFlat, TorusCodec
            >>> t = np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]], np.float32)
            >>> index = IndexFlat(TorusCodec(4))
            >>> index.add(t)
            >>> index.ntotal
            3
        """
        self._check_trained("adding")
        self.add_codes(self.codec.encode(x), ids)

    def search(
        self, q: ArrayLike, k: int, *, allowed: np.ndarray | IdRanges | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """The k nearest rows for query vectors q [Q, dim] (each index says which rows it scans).

        The queries (and ``allowed``) are the same on every process. With ``allowed``, the rows whose ids
        it masks never enter a query's top-k; a query with fewer than k rows to return gets id −1 and the
        largest distance (int32 max, or +inf for PQ) in the slots left, as faiss does.

        Args:
            q: [Q, dim] finite floating query vectors.
            k: neighbours per query, 1 ≤ k ≤ ``ntotal``.
            allowed: None (every row), or the ids a query may return (:mod:`geojax.search.filters`): a boolean
                mask [n] over ids (id i allowed where i < n and mask[i]), a per-query uint8 bitset [Q, B] in
                ``np.packbits`` order (big-endian bits: id i is bit 7 − i mod 8 of byte i // 8 of its query's
                row), or :class:`geojax.search.IdRanges`.

        Returns:
            (distances [Q, k] ascending, int32 for torus and binary codes, float32 for PQ; ids [Q, k] int32),
            ties to the lower id.

        Raises:
            ValueError: the index is not trained, ``q`` is malformed, ``k`` is not in [1, ntotal], or
                ``allowed`` has another shape, dtype or type (before any work).

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexFlat, TorusCodec
            >>> t = np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]], np.float32)
            >>> index = IndexFlat(TorusCodec(4))
            >>> index.add(t)
            >>> print(*index.search(t[:1], 3, allowed=np.array([False, True, True])))
            [[       180        256 2147483647]] [[ 1  2 -1]]
        """
        self._check_trained("searching")
        queries = self.codec.queries(q)
        _checks.check_matrix(queries, "q")
        k = check_k(k, self.ntotal)
        bits = None if allowed is None else allowed_bits(allowed, len(queries), self._next_id)
        return self._search(np.asarray(q), queries, k, bits)

    def range_search(
        self, q: ArrayLike, radius: float, *, max_results: int = 1_000_000
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row at distance < ``radius`` of each query vector, in faiss's shape (``lims``, ``D``, ``I``).

        Over the rows :meth:`search` scans, by its distances (Hamming bits, wraparound L1 or squared L2 in
        code units, PQ's asymmetric distance), strictly below the radius as faiss's range search; found by
        rounds of the top-k search (:mod:`geojax.search.ranges`). The queries are the same on every process.

        Args:
            q: [Q, dim] finite floating query vectors.
            radius: the radius, a real number.
            max_results: the most results over all queries (a positive int); a radius that gives more is
                refused, never truncated.

        Returns:
            (lims [Q + 1] int64; D [lims[Q]] distances, int32 or float32 as :meth:`search`'s; I [lims[Q]]
            int64 ids): query q's results are D[lims[q]:lims[q + 1]], ascending, ties to the lower id.

        Raises:
            ValueError: the index is not trained, ``q`` is malformed, ``radius`` is not a real number,
                ``max_results`` is not a positive int, or the results would exceed ``max_results``.
        """
        radius = check_radius(radius, max_results)
        self._check_trained("searching")
        _checks.check_matrix(self.codec.queries(q), "q")
        q = np.asarray(q)
        dtype = np.dtype(np.int32 if self.codec.scan.integer else np.float32)
        return range_search(
            lambda rows, k: self.search(q[rows], k), len(q), self.ntotal, radius, max_results, dtype
        )

    def reconstruct(self, ids: ArrayLike) -> np.ndarray:
        """The codec's decode of the stored codes of ``ids`` (faiss's ``reconstruct_batch``).

        Every process calls it with the same ids and gets every row, wherever it lives.

        Args:
            ids: [m] integer ids in the index (any order, repeats allowed).

        Returns:
            [m, D] float32 NumPy array (:meth:`geojax.search.codecs.Codec.decode`).

        Raises:
            ValueError: ``ids`` is not a rank-1 integer array, or an id is not in the index.

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexFlat, TorusCodec
            >>> t = np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]], np.float32)
            >>> index = IndexFlat(TorusCodec(4))
            >>> index.add(t)
            >>> index.reconstruct(np.array([0]))
            array([[0.  , 0.25, 0.5 , 0.75]], dtype=float32)
        """
        codes, held = self._held()
        return _reconstruct_rows(self.codec, codes, held, ids)

    def remove_ids(self, ids: ArrayLike) -> int:
        """Remove the rows with these ids (ids not in the index are ignored).

        Every process calls it with the same ids.

        Args:
            ids: [m] integer ids.

        Returns:
            How many rows went, over all processes.

        Raises:
            ValueError: ``ids`` is not a rank-1 integer array.

        Example:
            >>> import numpy as np
            >>> from geojax.search import IndexFlat, TorusCodec
            >>> t = np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4], [0.5, 0.5, 0.5, 0.5]], np.float32)
            >>> index = IndexFlat(TorusCodec(4))
            >>> index.add(t)
            >>> index.remove_ids(np.array([0]))
            1
            >>> print(*index.search(t[:1], 2))
            [[180 256]] [[1 2]]
        """
        _checks.check_rank(ids, "ids", 1)
        _checks.check_integer(ids, "ids")
        keep = ~np.isin(self._held()[1], np.asarray(ids, np.int64))
        removed = int(placement.process_counts([int((~keep).sum())])[:, 0].sum())
        if removed:
            self._keep(keep)
            self.ntotal -= removed
        return removed

    # ---------------------------------------------------------------------------------- shared steps
    def _check_trained(self, what: str) -> None:
        if not self.is_trained:
            raise ValueError(f"the index must be trained (call train) before {what}")

    def _new_ids(self, ids: ArrayLike | None, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Checked ids for this process's n new rows (default: after the largest so far, in process order)
        and every process's row count [processes]; the id counter moves past them.

        Raises:
            ValueError: ``ids`` is malformed or holds an id in the index, ids are given with several
                processes, or the rows would take the index past 2^31 − 1 rows.
        """
        given = check_ids(ids, n)
        counts = placement.process_counts([n])[:, 0]
        if self.ntotal + int(counts.sum()) > NO_ID:
            raise ValueError(f"the rows would take the index past {NO_ID} rows (int32 ids)")
        if given is None:
            first = self._next_id + int(counts[: jax.process_index()].sum())
            self._next_id += int(counts.sum())
            return np.arange(first, first + n, dtype=np.int64), counts
        if jax.process_count() > 1:
            raise ValueError("ids can be given with one process only (several: ids follow process order)")
        if n and self.ntotal:
            clash = int(np.isin(given, self._held()[1]).sum())
            if clash:
                raise ValueError(f"ids must be new: {clash} are in the index already")
        if n:
            self._next_id = max(self._next_id, int(given.max()) + 1)
        return given, counts
