"""Samplers: the global batch's row indices, a jnp function of (seed, step) and the label tables, evaluated
inside the jitted step (device feed) or on the host CPU (host feed): both give the same batches.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from train.app import registry
from train.app.registry import POSITIVE_INT, Key, Range

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

SAMPLER_STREAM = 0x7FFFFFFF  # fold_in tag of the sampler's keys (no step index reaches it)


def label_tables(labels: np.ndarray) -> dict[str, np.ndarray]:
    """What the samplers read about the training labels.

    Args:
        labels: the training labels [N], integers, N ≥ 1 (any values; C distinct ones).

    Returns:
        A dict of int32 arrays: ``labels`` [N]; ``class_of`` [N], each row's class as an index into the
        sorted distinct classes; ``order`` [N], the rows grouped by class (stable) and ``starts`` [C + 1], so
        that class c's rows are ``order[starts[c]:starts[c + 1]]``.

    Raises:
        ValueError: ``labels`` is not a non-empty one-dimensional integer array.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) == 0 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers [N] with N ≥ 1, got {labels.dtype} {labels.shape}")
    classes, class_of = np.unique(labels, return_inverse=True)
    starts = np.concatenate([[0], np.cumsum(np.bincount(class_of, minlength=len(classes)))])
    return {
        "labels": labels.astype(np.int32),
        "class_of": class_of.astype(np.int32),
        "order": np.argsort(class_of, kind="stable").astype(np.int32),
        "starts": starts.astype(np.int32),
    }


def _subset(key: jax.Array, size: int, n: int, mask: jax.Array | None = None) -> jax.Array:
    """``size`` distinct indices of ``range(n)`` (those where ``mask`` [n] holds, when given), uniformly: the
    ``size`` largest of i.i.d. uniform scores; drawn with replacement when fewer than ``size`` qualify."""
    k_scores, k_repeat = jax.random.split(key)
    count = n if mask is None else jnp.sum(mask)
    repeated = jax.random.randint(k_repeat, (size,), 0, count)
    if mask is not None:  # the repeated draws' r-th qualifying index
        repeated = jnp.searchsorted(jnp.cumsum(mask), repeated, side="right")
    if size > n:
        return repeated.astype(jnp.int32)
    scores = jax.random.uniform(k_scores, (n,))
    distinct = lax.top_k(scores if mask is None else jnp.where(mask, scores, -1.0), size)[1]
    return (distinct if mask is None else jnp.where(size > count, repeated, distinct)).astype(jnp.int32)


def _floyd(key: jax.Array, m: int, counts: jax.Array) -> jax.Array:
    """[k, m] offsets into k groups of ``counts`` [k] items: m distinct ones per group by Floyd's algorithm
    (Bentley & Floyd 1987: for j = count − m … count − 1 draw t ∈ [0, j], keep t, or j when t is taken),
    or m drawn with replacement where a group holds fewer than m."""
    k_floyd, k_repeat = jax.random.split(key)
    counts = counts[:, None]
    tops = counts - m + jnp.arange(m)  # j of each round
    draws = jax.random.randint(k_floyd, (counts.shape[0], m), 0, jnp.maximum(tops + 1, 1))
    picks: list[jax.Array] = []
    for i in range(m):
        taken = jnp.any(jnp.stack(picks, 1) == draws[:, i : i + 1], axis=1) if picks else False
        picks.append(jnp.where(taken, tops[:, i], draws[:, i]))
    repeated = jax.random.randint(k_repeat, (counts.shape[0], m), 0, counts)
    return jnp.where(counts >= m, jnp.stack(picks, 1), repeated)


def random_rows(
    k_classes: jax.Array, k_rows: jax.Array, tables: dict[str, jax.Array], batch: int
) -> jax.Array:
    """``batch`` rows drawn uniformly, without replacement (with replacement when ``batch`` > N).

    Args:
        k_classes: a PRNG key for the classes (unused: every class is eligible).
        k_rows: a PRNG key for the rows.
        tables: the label tables of :func:`label_tables` (``class_of`` gives N).
        batch: the number of rows to draw.

    Returns:
        Row indices [batch], int32, in [0, N).
    """
    return _subset(k_rows, batch, jnp.asarray(tables["class_of"]).shape[0])


def m_per_class_rows(
    k_classes: jax.Array, k_rows: jax.Array, tables: dict[str, jax.Array], batch: int, m_per_class: int
) -> jax.Array:
    """batch/m random classes × m images each (Korman 2021's MTriplet: 8 × 4).

    The classes are distinct (unless there are fewer than batch/m), and so are the m images of each (by
    Floyd's algorithm, Bentley & Floyd 1987), unless a class holds fewer than m.

    Args:
        k_classes: a PRNG key for the classes.
        k_rows: a PRNG key for the rows within each class.
        tables: the label tables of :func:`label_tables`.
        batch: the number of rows, a multiple of ``m_per_class``.
        m_per_class: images per class, m ≥ 1.

    Returns:
        Row indices [batch], int32, class by class (m consecutive rows per class).
    """
    order, starts = jnp.asarray(tables["order"]), jnp.asarray(tables["starts"])
    chosen = _subset(k_classes, batch // m_per_class, starts.shape[0] - 1)
    first = starts[chosen]
    offsets = _floyd(k_rows, m_per_class, starts[chosen + 1] - first)
    return order[first[:, None] + offsets].reshape(-1)


def class_subsampled_rows(
    k_classes: jax.Array, k_rows: jax.Array, tables: dict[str, jax.Array], batch: int, class_fraction: float
) -> jax.Array:
    """``batch`` rows uniform within a random subset of ``class_fraction`` of the classes.

    SimO (Bouhsine et al. 2024) draws batches of fewer than half the classes.

    Args:
        k_classes: a PRNG key for the subset of classes.
        k_rows: a PRNG key for the rows.
        tables: the label tables of :func:`label_tables`.
        batch: the number of rows to draw.
        class_fraction: the share of the C classes in the subset, in (0, 0.5]; at least one class.

    Returns:
        Row indices [batch], int32, all of the chosen classes; without replacement unless they hold fewer
        than ``batch`` rows.
    """
    class_of, starts = jnp.asarray(tables["class_of"]), jnp.asarray(tables["starts"])
    n_classes = starts.shape[0] - 1
    chosen = _subset(k_classes, max(1, int(class_fraction * n_classes)), n_classes)
    in_chosen = jnp.zeros(n_classes, bool).at[chosen].set(True)[class_of]
    return _subset(k_rows, batch, class_of.shape[0], in_chosen)


registry.register("sampler", "random", calls=random_rows)
registry.register(
    "sampler",
    "m_per_class",
    calls=m_per_class_rows,
    keys=(
        Key(
            "m_per_class",
            4,
            "images per class (MTriplet: 8 classes × 4)",
            int,
            "batches",
            POSITIVE_INT,
            arg="m_per_class",
        ),
    ),
)
registry.register(
    "sampler",
    "class_subsampled",
    calls=class_subsampled_rows,
    keys=(
        Key(
            "class_fraction",
            0.4,
            "fraction of classes per batch (< 0.5: fewer than half the classes)",
            float,
            "batches",
            Range(high=0.5),
            arg="class_fraction",
        ),
    ),
)


def sample(
    key: jax.Array, tables: dict[str, jax.Array], *, kind: str, batch: int, **options: Any
) -> jax.Array:
    """Row indices [batch] of one global batch, drawn by the registered sampler ``kind`` (jnp, jit-able).

    Draws are without replacement unless the batch asks for more than there is.

    Args:
        key: the batch's PRNG key (split into one for the classes and one for the rows).
        tables: the label tables of :func:`label_tables` (NumPy or jnp arrays).
        kind: a registered sampler: ``random``, ``m_per_class``, ``class_subsampled`` or a user's.
        batch: the global batch size.
        **options: the sampler's own keys (``m_per_class``, ``class_fraction``).

    Returns:
        Row indices [batch], int32, into the training images.
    """
    k_classes, k_rows = jax.random.split(key)
    return registry.option("sampler", kind).calls(k_classes, k_rows, tables, batch, **options)


@dataclasses.dataclass(frozen=True)
class Batches:
    """The batches of a run: the global batch of step s is a function of (``seed``, s) and the label tables.

    So a resumed run, a run on other devices and both feeds see the same batches. :meth:`rows` gives one
    device's (or process's) slice ``[start, start + count)`` of the global batch: row indices, labels (the
    global positions themselves when ``instance``: each image its own class) and global positions, the key
    of the image's augmentations.

    Attributes:
        kind: the registered sampler (``random``, ``m_per_class``, ``class_subsampled``).
        batch: the global batch size.
        seed: the run's seed.
        options: the sampler's keys, (argument, value) pairs.
        instance: each image is its own class (``labels=instance``, SimCLR).
    """

    kind: str
    batch: int
    seed: int
    options: tuple[tuple[str, Any], ...] = ()  # the sampler's keys, (arg, value) pairs
    instance: bool = False

    @classmethod
    def of(cls, cfg: RunConfig) -> Batches:
        """The batches of the run ``cfg``.

        Args:
            cfg: the run's configuration (sampler and its keys, batch_size, seed, labels).

        Returns:
            Its :class:`Batches`.
        """
        return cls(
            kind=cfg.sampler,
            batch=cfg.batch_size,
            seed=cfg.seed,
            options=tuple(sorted(registry.option_kwargs(cfg, "sampler").items())),
            instance=cfg.labels == "instance",
        )

    def key(self, step: jax.Array | int) -> jax.Array:
        """The sampler's PRNG key of one step.

        Args:
            step: the training step (an int or a scalar integer array).

        Returns:
            fold_in(fold_in(key(seed), SAMPLER_STREAM), step), a typed PRNG key.
        """
        return jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), SAMPLER_STREAM), step)

    def indices(self, tables: dict[str, jax.Array], step: jax.Array | int) -> jax.Array:
        """Row indices [batch] of the global batch of ``step``.

        Args:
            tables: the label tables of :func:`label_tables`.
            step: the training step (an int or a scalar integer array).

        Returns:
            Row indices [batch], int32, into the training images.
        """
        return sample(self.key(step), tables, kind=self.kind, batch=self.batch, **dict(self.options))

    def rows(
        self, tables: dict[str, jax.Array], step: jax.Array | int, start: jax.Array | int, count: int
    ) -> dict[str, jax.Array]:
        """{'idx', 'y', 'pos'} [count] of the global batch of ``step``, its rows start … start + count − 1.

        Args:
            tables: the label tables of :func:`label_tables`.
            step: the training step (an int or a scalar integer array).
            start: the first row of the slice (a device's or process's offset), 0 ≤ start ≤ batch − count.
            count: the number of rows of the slice.

        Returns:
            ``idx``: row indices [count] into the training images; ``y``: their labels [count] (the global
            positions when ``instance``); ``pos``: their global positions [count] in the batch, all int32.
        """
        idx = lax.dynamic_slice_in_dim(self.indices(tables, step), start, count)
        pos = (start + jnp.arange(count)).astype(jnp.int32)
        labels = pos if self.instance else jnp.asarray(tables["labels"])[idx]
        return {"idx": idx, "y": labels, "pos": pos}
