"""Cross-batch memory: the key rows of recent batches, kept as a fixed-shape ring buffer (Wang et al. 2020,
XBM; He et al. 2020, MoCo's queue).

A :class:`Memory` holds ``M`` slots of key rows (any pytree of arrays with a leading slot axis: embedding
vectors [M, D], or an atlas's chart coordinates and memberships ``{'coords': [M, n, d], 'q': [M, n]}``), their
integer labels [M], the next slot to write and the number of filled slots. Its shapes never change, so it is
state of a jitted step: :func:`update` writes a batch's rows over the oldest ones (first in, first out, as a
``collections.deque(maxlen=M)``), :func:`keys` appends the memory's rows to a batch's own keys as constants
(stop-gradient), with a mask [K + M] that is False on the empty slots. Every loss of :mod:`geojax.losses`
takes that mask as ``key_valid``::

    mem = memory.init(4096, z)                                         # z: [B, D], the batch's key rows
    rows, key_labels, key_valid = memory.keys(mem, z, labels)          # [B + M, D], [B + M], [B + M]
    loss = losses.supcon(cosine(z, rows), labels, key_labels=key_labels, key_valid=key_valid)
    mem = memory.update(mem, z, labels)                                # after the loss (next step's keys)

Slots fill in order 0, 1, … while the memory is not full, so the filled slots are always ``[0, size)``; after
that the write position wraps around. :func:`ordered` gives the rows oldest first.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from geojax import _checks


class Memory(NamedTuple):
    """A ring buffer of M key rows (Wang et al. 2020, XBM §3.3): a pytree, the state of a training step.

    Attributes:
        rows: a pytree of arrays [M, ...], the stored key rows (zeros in empty slots).
        labels: [M] int32 labels of the rows (0 in empty slots).
        head: int32 scalar, the slot the next row is written to, in [0, M).
        size: int32 scalar, the number of filled slots, in [0, M]; slots [0, size) are filled.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import memory
        >>> mem = memory.init(3, jnp.zeros((2, 4)))
        >>> mem.rows.shape, int(mem.size)
        ((3, 4), 0)
    """

    rows: Any
    labels: jax.Array
    head: jax.Array
    size: jax.Array


def _slots(memory: Memory) -> int:
    return memory.labels.shape[0]


def _check_rows(rows: Any, name: str) -> int:
    """The common leading length of the leaves of ``rows`` (each of rank ≥ 1); raise naming ``name``."""
    leaves = jax.tree.leaves(rows)
    if not leaves:
        raise ValueError(f"{name} must hold at least one array, got {rows!r}")
    for leaf in leaves:
        _checks.check_min_rank(leaf, name, 1)
    lengths = {jnp.shape(leaf)[0] for leaf in leaves}
    if len(lengths) != 1:
        raise ValueError(f"{name} must have one leading length, got {sorted(lengths)}")
    return lengths.pop()


def _check_batch(memory: Memory, rows: Any, labels: ArrayLike) -> int:
    """Check that ``rows`` fit the memory's slots and ``labels`` match them; the number of rows."""
    n = _check_rows(rows, "rows")
    _checks.check_rank(labels, "labels", 1)
    _checks.check_length(labels, "labels", n, "rows")
    _checks.check_integer(labels, "labels")
    got_structure: object = jax.tree.structure(rows)
    slot_structure: object = jax.tree.structure(memory.rows)
    if got_structure != slot_structure:
        raise ValueError(f"rows must have the memory's structure {slot_structure}, got {got_structure}")
    for got, slot in zip(jax.tree.leaves(rows), jax.tree.leaves(memory.rows), strict=True):
        if jnp.shape(got)[1:] != slot.shape[1:]:
            raise ValueError(
                f"rows must have the memory's row shape {slot.shape[1:]}, got {tuple(jnp.shape(got)[1:])}"
            )
    return n


def init(size: int, rows: Any) -> Memory:
    """An empty memory of ``size`` slots for rows shaped like those of ``rows`` (Wang et al. 2020, XBM §3.3).

    Args:
        size: M, the number of slots (a positive int): the rows of the last M enqueued (PyTorch Metric
            Learning's ``memory_size``).
        rows: an example batch: a pytree of arrays (or ``jax.ShapeDtypeStruct``) [n, ...]; only each leaf's
            trailing shape and dtype are used.

    Returns:
        A :class:`Memory` with zero rows [M, ...], zero labels [M], ``head = size = 0``.

    Raises:
        ValueError: ``size`` is not a positive int; ``rows`` holds no array or a leaf of rank 0.

    References:
        Wang et al. 2020, "Cross-Batch Memory for Embedding Learning" (CVPR; arXiv 1912.06798), §3.3.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import memory
        >>> mem = memory.init(5, {"coords": jnp.zeros((2, 3, 2)), "q": jnp.zeros((2, 3))})
        >>> mem.rows["coords"].shape, mem.rows["q"].shape, mem.labels.shape
        ((5, 3, 2), (5, 3), (5,))
    """
    _checks.check_positive_int(size, "size")
    _check_rows(rows, "rows")
    empty = jax.tree.map(lambda x: jnp.zeros((size, *jnp.shape(x)[1:]), x.dtype), rows)
    # head and size are separate buffers: a step that donates its state donates each once
    return Memory(empty, jnp.zeros((size,), jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def update(memory: Memory, rows: Any, labels: ArrayLike) -> Memory:
    """Enqueue a batch's rows over the oldest ones (Wang et al. 2020, XBM §3.3; He et al. 2020, §3.2).

    Row i of the batch goes to slot (head + i) mod M, as appending the rows one by one to a
    ``collections.deque(maxlen=M)``: a batch of more than M rows leaves its last M. The rows are stored as
    constants (stop-gradient), cast to the memory's dtypes.

    Args:
        memory: the :class:`Memory` (M slots).
        rows: the batch's key rows, the memory's pytree structure with leaves [n, ...] (the memory's row
            shapes); in a data-parallel step, the rows of every device gathered in device order, so that
            every device holds the same memory.
        labels: [n] integer labels of the rows.

    Returns:
        The updated :class:`Memory`: head (head + min(n, M)) mod M, size min(size + n, M).

    Raises:
        ValueError: ``rows`` does not have the memory's structure and row shapes; ``labels`` is not an
            integer [n] vector.

    References:
        Wang et al. 2020, "Cross-Batch Memory for Embedding Learning" (arXiv 1912.06798), §3.3 (enqueue the
        batch, dequeue the oldest); He et al. 2020, "Momentum Contrast for Unsupervised Visual
        Representation Learning" (arXiv 1911.05722), §3.2 (the dictionary as a queue).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import memory
        >>> mem = memory.init(3, jnp.zeros((1, 1)))
        >>> mem = memory.update(mem, jnp.array([[1.0], [2.0]]), jnp.array([7, 8]))
        >>> mem = memory.update(mem, jnp.array([[3.0], [4.0]]), jnp.array([9, 10]))
        >>> mem.rows[:, 0].tolist(), mem.labels.tolist(), int(mem.head), int(mem.size)
        ([4.0, 2.0, 3.0], [10, 8, 9], 1, 3)
    """
    n = _check_batch(memory, rows, labels)
    m = _slots(memory)
    keep = min(n, m)  # static: a batch longer than the memory leaves its last M rows
    slots = (memory.head + jnp.arange(keep, dtype=jnp.int32)) % m

    def write(buffer, new):
        new = lax.stop_gradient(jnp.asarray(new)[n - keep :]).astype(buffer.dtype)
        return buffer.at[slots].set(new, unique_indices=True, mode="promise_in_bounds")

    return Memory(
        jax.tree.map(write, memory.rows, rows),
        write(memory.labels, jnp.asarray(labels)),
        (memory.head + keep) % m,
        jnp.minimum(memory.size + keep, m),
    )


def valid(memory: Memory) -> jax.Array:
    """Which slots hold a row: [M] bool, True on slots [0, size).

    Args:
        memory: the :class:`Memory`.

    Returns:
        [M] bool.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import memory
        >>> mem = memory.update(memory.init(3, jnp.zeros((1, 2))), jnp.ones((2, 2)), jnp.array([0, 1]))
        >>> memory.valid(mem).tolist()
        [True, True, False]
    """
    return jnp.arange(_slots(memory)) < memory.size


def keys(memory: Memory, rows: Any, labels: ArrayLike) -> tuple[Any, jax.Array, jax.Array]:
    """A batch's key rows followed by the memory's, as constants (Wang et al. 2020, XBM §3.3).

    The loss of a step with memory is the loss of the batch's anchors against the keys [batch; memory]:
    the batch's own rows first (so ``self_index`` keeps its columns), then the M slots, their rows under
    ``stop_gradient`` and the empty ones masked out.

    Args:
        memory: the :class:`Memory` (M slots).
        rows: the batch's key rows [K, ...], the memory's pytree structure (in a data-parallel step, the
            gathered rows of every device).
        labels: [K] integer labels of the batch's key rows.

    Returns:
        ``(key_rows, key_labels, key_valid)``: the pytree of [K + M, ...] rows, [K + M] int32 labels and a
        [K + M] bool mask, False on the memory's empty slots (pass it to a loss as ``key_valid``).

    Raises:
        ValueError: ``rows`` does not have the memory's structure and row shapes; ``labels`` is not an
            integer [K] vector.

    References:
        Wang et al. 2020, "Cross-Batch Memory for Embedding Learning" (arXiv 1912.06798), §3.3.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import memory
        >>> mem = memory.update(memory.init(3, jnp.zeros((1, 1))), jnp.array([[5.0]]), jnp.array([2]))
        >>> k, y, ok = memory.keys(mem, jnp.array([[1.0], [2.0]]), jnp.array([0, 1]))
        >>> k[:, 0].tolist(), y.tolist(), ok.tolist()
        ([1.0, 2.0, 5.0, 0.0, 0.0], [0, 1, 2, 0, 0], [True, True, True, False, False])
    """
    n = _check_batch(memory, rows, labels)

    def join(batch, slots):
        return jnp.concatenate([jnp.asarray(batch).astype(slots.dtype), lax.stop_gradient(slots)])

    key_rows = jax.tree.map(join, rows, memory.rows)
    key_labels = jnp.concatenate([jnp.asarray(labels).astype(jnp.int32), memory.labels])
    key_valid = jnp.concatenate([jnp.ones((n,), bool), valid(memory)])
    return key_rows, key_labels, key_valid


def ordered(memory: Memory) -> tuple[Any, jax.Array, jax.Array]:
    """The slots oldest first: what a ``collections.deque(maxlen=M)`` fed the same rows holds.

    Args:
        memory: the :class:`Memory` (M slots).

    Returns:
        ``(rows, labels, filled)``: the pytree of [M, ...] rows and [M] labels, oldest first, and [M] bool,
        True on the first ``size`` entries (the rest are empty slots).

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import memory
        >>> mem = memory.init(3, jnp.zeros((1, 1)))
        >>> for i in range(4):
        ...     mem = memory.update(mem, jnp.array([[float(i)]]), jnp.array([i]))
        >>> rows, labels, filled = memory.ordered(mem)
        >>> labels.tolist(), filled.tolist()
        ([1, 2, 3], [True, True, True])
    """
    m = _slots(memory)
    order = (memory.head - memory.size + jnp.arange(m)) % m
    return (
        jax.tree.map(lambda x: x[order], memory.rows),
        memory.labels[order],
        jnp.arange(m) < memory.size,
    )
