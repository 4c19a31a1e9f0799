"""Datasets, batch samplers, host prefetching and two-view augmentations.

- ``digits``: scikit-learn's bundled ``load_digits`` (1,797 8×8 images, 10 classes), offline; a fixed,
  stratified, seeded train/test split.
- ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100`` and any ``tfds:NAME`` with ``image`` and ``label``
  features and train/test splits: ``tfds.data_source`` (no TensorFlow needed to read), one element at a
  time; the data must have been prepared in the ``array_record`` format (an error says how otherwise).
- ``npz:PATH``: a local ``.npz`` with ``images`` [N, H, W(, C)] and ``labels`` [N]; split like digits.
- ``idx:DIR``: a folder holding the four IDX files that MNIST, Fashion-MNIST and KMNIST are distributed as
  (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
  ``t10k-labels-idx1-ubyte``; each plain or .gz, not both), with their own train/test split. Every file is
  checked before training starts.

Images are float32 in [0, 1], [N, H, W, C] (:func:`compact` stores 8-bit data as uint8 for the devices).
The sampler is one jnp function of (seed, step) and the label tables: the training step evaluates it on the
devices (data held there), or the host evaluates it on its CPU and gathers the rows in NumPy; both give the
same batches, so a resumed run, or a run on another number of devices or processes, sees the same data.
Augmentations are jnp functions of a key, applied per example with a key folded from the example's global
position in the batch (the same views on 1 or many devices).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import queue
import sys
import threading
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, Literal, TypeVar, get_args

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from train.app import registry
from train.app.errors import UsageError
from train.app.registry import POSITIVE_INT, UNIT_INTERVAL, Key, Range
from train.helpers import files

TFDS_NAMES = ("mnist", "fashion_mnist", "cifar10", "cifar100")
DATASETS = ("digits", *TFDS_NAMES)  # by name; any other: tfds:NAME, or a local file npz:PATH
Augmentation = Literal["shift", "crop_flip", "simclr", "crop_jitter_gray", "none"]
SPLIT_SEED = 0  # the digits / npz train-test split is fixed, whatever the training seed
T = TypeVar("T")
UNIT = np.float32(1 / 255)  # uint8 code k → k·UNIT in [0, 1] (a product: host and devices round it alike)


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Train and test images [N, H, W, C] float32 in [0, 1] with int32 labels [N].

    Attributes:
        name: the data set's name as the report gives it (``digits``, ``npz:PATH``, ...).
        train_x: training images [N, H, W, C], float32 in [0, 1] (or their uint8 codes, :func:`compact`).
        train_y: training labels [N], int32, 0 … C − 1; the retrieval references.
        test_x: test images [M, H, W, C], the retrieval queries.
        test_y: test labels [M], int32.
    """

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    @property
    def num_classes(self) -> int:
        """The number of classes C: one more than the largest label of either split."""
        return int(max(self.train_y.max(), self.test_y.max())) + 1

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """The shape (H, W, C) of one image."""
        return tuple(self.train_x.shape[1:])


def _as_images(images: np.ndarray, what: str) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or 0 in images.shape:
        raise UsageError(f"{what} must be images [N, H, W] or [N, H, W, C], got shape {images.shape}")
    if images.dtype == np.uint8:
        return images.astype(np.float32) * UNIT
    if not np.issubdtype(images.dtype, np.number):
        raise UsageError(f"{what} must be numbers, got dtype {images.dtype}")
    images = images.astype(np.float32)
    bad = ~np.isfinite(images).reshape(len(images), -1).all(axis=1)
    if bad.any():
        raise UsageError(
            f"{what} must be finite: {int(bad.sum())} of {len(images)} images hold NaN or ±inf "
            f"(the first is image {int(np.argmax(bad))})"
        )
    return images


def _split(images: np.ndarray, labels: np.ndarray, name: str, test_fraction: float) -> Dataset:
    from sklearn.model_selection import train_test_split

    _, counts = np.unique(labels, return_counts=True)
    stratify = labels if counts.min() >= 2 else None
    tr_x, te_x, tr_y, te_y = train_test_split(
        images, labels, test_size=test_fraction, random_state=SPLIT_SEED, stratify=stratify
    )
    return Dataset(name, tr_x, tr_y.astype(np.int32), te_x, te_y.astype(np.int32))


def hold_out(ds: Dataset, fraction: float) -> tuple[Dataset, Dataset]:
    """Carve a validation split from ``ds``'s training set.

    Stratified (when every class has two images) and fixed (SPLIT_SEED, as the digits / npz test split),
    whatever the training seed: every seed of a configuration validates on the same images.

    Args:
        ds: the data set whose training images are split; its test images are left alone.
        fraction: the held-out share of the training images, in (0, 1).

    Returns:
        (``ds`` with the rest as its training set, the validation set: a Dataset whose queries (``test_*``)
        are the held-out images and whose references (``train_*``) are the rest).

    Raises:
        ValueError: ``fraction`` is not in (0, 1), or leaves one side of the split empty.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    val = _split(ds.train_x, ds.train_y, f"{ds.name} (validation)", fraction)
    if len(val.test_y) == 0 or len(val.train_y) == 0:
        raise ValueError(f"fraction {fraction} of {len(ds.train_y)} training images leaves an empty split")
    return dataclasses.replace(ds, train_x=val.train_x, train_y=val.train_y), val


def disjoint_classes(ds: Dataset) -> Dataset:
    """The metric-learning split of classes seen in training and classes retrieved among.

    Korman 2021 §3.2.1 (the practice of CUB-200 and Stanford Cars): training images of the first half
    of the classes (labels < C // 2 of C) to train on, test images of the other half to retrieve among, each
    against the rest; no class of the retrieval set is seen in training.

    Args:
        ds: the data set to split, with C = ``ds.num_classes`` classes.

    Returns:
        A Dataset of the training images of classes < C // 2 and the test images of classes ≥ C // 2, named
        after ``ds`` with the two class ranges.

    Raises:
        UsageError: no training image of a class < C // 2, or test images of fewer than two classes ≥ C // 2.

    Example:
        >>> x_train, x_test = np.zeros((6, 1, 1, 1)), np.zeros((4, 1, 1, 1))
        >>> d = Dataset("t", x_train, np.arange(6) % 4, x_test, np.arange(4))
        >>> s = disjoint_classes(d)
        >>> s.train_y.tolist(), s.test_y.tolist(), s.name
        ([0, 1, 0, 1], [2, 3], 't (classes 0-1 to train, 2-3 to retrieve)')
    """
    half = ds.num_classes // 2
    seen, unseen = ds.train_y < half, ds.test_y >= half
    if not seen.any() or not unseen.any() or np.unique(ds.test_y[unseen]).size < 2:
        raise UsageError(
            f"classes='disjoint' needs training images of classes < {half} and test images of at least two "
            f"classes ≥ {half}; {ds.name} has classes {np.unique(ds.train_y).tolist()} / "
            f"{np.unique(ds.test_y).tolist()}"
        )
    return Dataset(
        f"{ds.name} (classes 0-{half - 1} to train, {half}-{ds.num_classes - 1} to retrieve)",
        ds.train_x[seen],
        ds.train_y[seen],
        ds.test_x[unseen],
        ds.test_y[unseen],
    )


def _digits(test_fraction: float) -> Dataset:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return _split((x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1), y, "digits", test_fraction)


def _npz(path: str, test_fraction: float) -> Dataset:
    if not os.path.isfile(path):
        raise UsageError(f"dataset npz:{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = {"images", "labels"} - set(f.files)
            if missing:
                raise UsageError(
                    f"dataset npz:{path} must hold arrays 'images' and 'labels'; missing {sorted(missing)}"
                )
            raw_images, labels = f["images"], np.asarray(f["labels"])
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise UsageError(f"dataset npz:{path} cannot be read as a NumPy .npz archive ({err})") from None
    except ValueError as err:
        if "dataset npz:" in str(err):
            raise
        raise UsageError(f"dataset npz:{path} cannot be read as a NumPy .npz archive ({err})") from None
    images = _as_images(raw_images, f"npz:{path} images")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise UsageError(
            f"npz:{path} labels must be integers [N={len(images)}], got {labels.dtype} {labels.shape}"
        )
    return _split(images, labels, f"npz:{path}", test_fraction)


def _tfds_split(name: str, split: str, data_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
    import tensorflow_datasets as tfds

    try:
        source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except Exception as err:  # tfds raises several kinds for "not prepared"; all mean the same here
        raise UsageError(
            f"dataset {name!r} ({split}) is not prepared in {data_dir or 'the tfds data dir'} ({err}). "
            f"Prepare it once on a machine with network access (tfds's builders need TensorFlow: pip install "
            f"tensorflow): `tfds build {name} --file_format=array_record`, then copy ~/tensorflow_datasets "
            f"(or pass data_dir=...)."
        ) from err
    rows = [source[i] for i in range(len(source))]  # one element at a time
    images = _as_images(np.stack([r["image"] for r in rows]), f"{name} images")
    return images, np.asarray([r["label"] for r in rows], np.int32)


def check_dataset_name(name: str) -> None:
    """Raise UsageError unless ``name`` is one of DATASETS, ``tfds:NAME``, ``npz:PATH`` or ``idx:DIR``.

    Only the name is checked (and that an ``idx:`` folder exists); the files are checked when loaded.

    Args:
        name: a ``dataset`` value: ``digits``, ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100``,
            ``tfds:NAME``, ``npz:PATH`` or ``idx:DIR`` (DIR an existing folder).

    Raises:
        UsageError: ``name`` is none of these, or ``idx:DIR``'s DIR is not a folder.
    """
    source, _, rest = name.partition(":")
    if name not in DATASETS and not (source in ("npz", "tfds", "idx") and rest):
        raise UsageError(
            f"dataset must be {', '.join(DATASETS)}, tfds:NAME, npz:PATH or idx:DIR, got {name!r}"
        )
    if source == "idx" and not os.path.isdir(rest):
        raise UsageError(
            f"dataset {name!r}: {rest} is not a folder (idx:DIR names the folder of the IDX files)"
        )


def dataset_source(name: str) -> str:
    """The kind of a ``dataset`` value: digits, npz, idx or tfds (a tfds name or tfds:NAME).

    Args:
        name: a ``dataset`` value (not checked: see :func:`check_dataset_name`).

    Returns:
        ``"digits"``, ``"npz"``, ``"idx"`` or ``"tfds"`` (every other name), the registered data source that
        loads it.
    """
    prefix, sep, _ = name.partition(":")
    if name == "digits" or (sep and prefix in ("npz", "idx")):
        return name if name == "digits" else prefix
    return "tfds"


def _tfds(name: str, data_dir: str | None = None) -> Dataset:
    source = name.removeprefix("tfds:")
    tr_x, tr_y = _tfds_split(source, "train", data_dir)
    te_x, te_y = _tfds_split(source, "test", data_dir)
    return Dataset(name, tr_x, tr_y, te_x, te_y)


def load(name: str, *, test_fraction: float = 0.25, data_dir: str | None = None) -> Dataset:
    """Load a dataset by name, each source receiving the keys it registered.

    Every process of a multi-process run loads all of it: each draws the same global batches and uses its
    own rows of them.

    Args:
        name: a ``dataset`` value (see :func:`check_dataset_name`).
        test_fraction: the held-out test share of digits and npz data, in (0, 1) (ignored by the sources
            with their own test split).
        data_dir: tfds's data directory (None: tfds's default); ignored by the other sources.

    Returns:
        The Dataset: images [N, H, W, C] float32 in [0, 1], int32 labels.

    Raises:
        UsageError: a bad name, or data that is missing, unprepared or malformed (one line naming the file).
    """
    check_dataset_name(name)
    source = registry.option("dataset", dataset_source(name))
    given = {"test_fraction": test_fraction, "data_dir": data_dir}
    return source.calls(name, **{k.arg: given[k.arg] for k in source.keys})


TEST_FRACTION = Key(
    "test_fraction",
    0.25,
    "held-out fraction (data without a test split)",
    float,
    "data",
    UNIT_INTERVAL,
    arg="test_fraction",
)
DATA_DIR = Key(
    "data_dir", None, "tfds data directory (none = tfds's default)", str | None, "data", arg="data_dir"
)
registry.register(
    "dataset", "digits", keys=(TEST_FRACTION,), calls=lambda _, test_fraction: _digits(test_fraction)
)
registry.register(
    "dataset",
    "npz",
    keys=(TEST_FRACTION,),
    calls=lambda name, test_fraction: _npz(name[4:], test_fraction),
    label="npz:PATH",
)
registry.register("dataset", "idx", calls=lambda name: _idx(name[4:]), label="idx:DIR")
registry.register("dataset", "tfds", keys=(DATA_DIR,), calls=_tfds, label=f"{'|'.join(TFDS_NAMES)}|tfds:NAME")


def compact(images: np.ndarray) -> np.ndarray:
    """``images`` as uint8 codes when they are exactly k·UNIT (decoded 8-bit data), else as they are.

    The codes take a quarter of the bytes to hold on a device or send; :func:`to_unit` gives back the same
    floats.

    Args:
        images: images of any shape, float32 in [0, 1] (or already uint8).

    Returns:
        The uint8 codes k = round(255·x) of the same shape when k·UNIT reproduces every value exactly;
        otherwise ``images`` itself.
    """
    if images.dtype == np.uint8:
        return images
    codes = np.round(images * 255.0)
    if codes.min() < 0 or codes.max() > 255:
        return images
    codes = codes.astype(np.uint8)
    return codes if np.array_equal(codes.astype(np.float32) * UNIT, images) else images


def to_unit(images: jax.Array) -> jax.Array:
    """Images as float32 in [0, 1]: uint8 codes k → k·UNIT (as the loaders compute it), floats as they are.

    Args:
        images: images of any shape, uint8 codes (:func:`compact`) or floats.

    Returns:
        The images as float32 of the same shape (floats are returned as they are).
    """
    return images.astype(jnp.float32) * UNIT if images.dtype == jnp.uint8 else images


# --------------------------------------------------------------------------------------------------------
# Samplers: the global batch's row indices, a jnp function of (seed, step) and the label tables, evaluated
# inside the jitted step (device feed) or on the host CPU (host feed): both give the same batches.
# --------------------------------------------------------------------------------------------------------

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


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items`` computed ahead by a background thread, so the devices do not wait on the host's NumPy work.

    Closing this generator (or dropping it) stops the thread.

    Args:
        items: an iterable whose items are computed on the thread (a generator of host batches).
        depth: the most items waiting, computed but not yet taken (≥ 1).

    Returns:
        An iterator over ``items``, in order.

    Raises:
        BaseException: whatever computing an item raised, raised here, when the consumer reaches it.
    """
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((item, None)):
                    return
        except BaseException as err:  # handed to the consumer, which raises it
            offer((None, err))
            return
        offer((done, None))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, err = ready.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        stop.set()
        thread.join()


# --------------------------------------------------------------------------------------------------------
# Augmentations (jnp, one image [H, W, C] and a key at a time; vmapped over the batch).
# --------------------------------------------------------------------------------------------------------


def _translate(key: jax.Array, x: jax.Array, pad: int) -> jax.Array:
    """Random translation by up to ``pad`` pixels each way, zero fill (a random crop of the padded image)."""
    h, w, c = x.shape
    off = jax.random.randint(key, (2,), 0, 2 * pad + 1)
    padded = jnp.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    return jax.lax.dynamic_slice(padded, (off[0], off[1], 0), (h, w, c))


def shift(key: jax.Array, x: jax.Array) -> jax.Array:
    """Small-image augmentation: random ±1 pixel translation (zero fill) and contrast ×U(0.8, 1.2).

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].

    Returns:
        The augmented image [H, W, C], clipped to [0, 1].
    """
    k1, k2 = jax.random.split(key)
    return jnp.clip(_translate(k1, x, 1) * jax.random.uniform(k2, (), minval=0.8, maxval=1.2), 0.0, 1.0)


def crop_flip(key: jax.Array, x: jax.Array) -> jax.Array:
    """Random crop of the image padded by 2 pixels (±2 px translation, zero fill) and a flip with p 0.5.

    The standard augmentation of small natural images (He et al. 2016's CIFAR recipe pads 4 pixels of 32),
    for data whose classes are mirror-symmetric (Fashion-MNIST, CIFAR; not digits).

    Args:
        key: a PRNG key.
        x: one image [H, W, C].

    Returns:
        The augmented image [H, W, C].
    """
    k1, k2 = jax.random.split(key)
    x = _translate(k1, x, 2)
    return jnp.where(jax.random.bernoulli(k2, 0.5), x[:, ::-1], x)


def random_resized_crop(key: jax.Array, x: jax.Array, *, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3)) -> jax.Array:
    """Crop a random box of area fraction U(scale) and aspect ratio log-U(ratio), resized back bilinearly.

    torchvision's RandomResizedCrop; the default area, 0.2 to 1, is SupContrast's CIFAR crop (Khosla et al.
    2020). The box's sides are clipped to the image.

    Args:
        key: a PRNG key.
        x: one image [H, W, C].
        scale: (low, high) of the box's area as a fraction of the image's, 0 < low ≤ high ≤ 1.
        ratio: (low, high) of the box's aspect ratio width / height, drawn log-uniformly, 0 < low ≤ high.

    Returns:
        The crop resized to [H, W, C] (bilinear, no antialiasing).
    """
    h, w, _ = x.shape
    k1, k2, k3, k4 = jax.random.split(key, 4)
    area = jax.random.uniform(k1, (), minval=scale[0], maxval=scale[1]) * h * w
    aspect = jnp.exp(jax.random.uniform(k2, (), minval=np.log(ratio[0]), maxval=np.log(ratio[1])))
    ch = jnp.clip(jnp.sqrt(area / aspect), 1.0, h)
    cw = jnp.clip(jnp.sqrt(area * aspect), 1.0, w)
    y0 = jax.random.uniform(k3, ()) * (h - ch)
    x0 = jax.random.uniform(k4, ()) * (w - cw)
    s = jnp.stack([h / ch, w / cw])
    return jax.image.scale_and_translate(
        x, x.shape, (0, 1), s, -jnp.stack([y0, x0]) * s, method="linear", antialias=False
    )


def _gray(x: jax.Array) -> jax.Array:
    if x.shape[-1] != 3:
        return x
    g = x @ jnp.asarray([0.299, 0.587, 0.114], x.dtype)
    return jnp.broadcast_to(g[..., None], x.shape)


def color_jitter(key: jax.Array, x: jax.Array, *, strength: float = 0.5) -> jax.Array:
    """SimCLR colour jitter without hue: brightness, contrast and saturation factors U(1 ± 0.8·strength).

    Chen et al. 2020 (SimCLR), appendix A; saturation mixes with the luma grey (ITU-R 601 weights) of an RGB
    image and does nothing to a grey one.

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].
        strength: the jitter strength s ≥ 0 (SimCLR's 0.5: factors in [0.6, 1.4]).

    Returns:
        The jittered image [H, W, C], clipped to [0, 1].
    """
    k1, k2, k3 = jax.random.split(key, 3)
    lo, hi = 1 - 0.8 * strength, 1 + 0.8 * strength
    x = x * jax.random.uniform(k1, (), minval=lo, maxval=hi)
    mean = x.mean()
    x = (x - mean) * jax.random.uniform(k2, (), minval=lo, maxval=hi) + mean
    g = _gray(x)
    x = (x - g) * jax.random.uniform(k3, (), minval=lo, maxval=hi) + g
    return jnp.clip(x, 0.0, 1.0)


def _crop_flip_jitter_gray(key: jax.Array, x: jax.Array, *, crop_scale: tuple[float, float], flip: bool):
    """Random resized crop of area U(crop_scale), [horizontal flip (p 0.5),] colour jitter strength 0.5
    (p 0.8), grayscale (p 0.2)."""
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    x = random_resized_crop(k1, x, scale=crop_scale)
    if flip:
        x = jnp.where(jax.random.bernoulli(k2, 0.5), x[:, ::-1], x)
    x = jnp.where(jax.random.bernoulli(k3, 0.8), color_jitter(k4, x), x)
    return jnp.where(jax.random.bernoulli(k5, 0.2), _gray(x), x)


def simclr(key: jax.Array, x: jax.Array) -> jax.Array:
    """SupContrast's CIFAR views (Khosla et al. 2020; the SimCLR set of Chen et al. 2020).

    Random resized crop of area 0.2 to 1, horizontal flip (p 0.5), colour jitter strength 0.5 (p 0.8;
    brightness, contrast and saturation 0.4, no hue) and grayscale (p 0.2).

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].

    Returns:
        The augmented view [H, W, C].
    """
    return _crop_flip_jitter_gray(key, x, crop_scale=(0.2, 1.0), flip=True)


def crop_jitter_gray(key: jax.Array, x: jax.Array) -> jax.Array:
    """Korman 2021 appendix A.1's views: colour jitter, grayscale and a random resized crop, no flip.

    Colour jitter strength 0.5 (p 0.8), grayscale (p 0.2); the crop's area, 0.08 to 1, is that of SimCLR
    (Chen et al. 2020, appendix A), the augmentation A.1 says it uses.

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].

    Returns:
        The augmented view [H, W, C].
    """
    return _crop_flip_jitter_gray(key, x, crop_scale=(0.08, 1.0), flip=False)


def identity(key: jax.Array, x: jax.Array) -> jax.Array:
    """No augmentation (``augment=none``).

    Args:
        key: a PRNG key (unused).
        x: one image [H, W, C].

    Returns:
        ``x`` itself.
    """
    del key
    return x


AUGMENTATIONS = {
    "shift": shift,
    "crop_flip": crop_flip,
    "simclr": simclr,
    "crop_jitter_gray": crop_jitter_gray,
    "none": identity,
}
assert tuple(AUGMENTATIONS) == get_args(Augmentation)


def views(key: jax.Array, images: jax.Array, positions: jax.Array, *, n_views: int, kind: str) -> jax.Array:
    """``n_views`` augmented views of ``images`` [n, H, W, C] → [n_views·n, H, W, C] (view-major).

    Example i, view v uses the key fold_in(fold_in(key, positions[i]), v), so the views do not depend on how
    the batch is split. With ``n_views == 1`` and ``kind`` not 'none' the single view is augmented too.

    Args:
        key: the step's augmentation PRNG key.
        images: the images [n, H, W, C], float in [0, 1].
        positions: the images' global positions in the batch [n], integers.
        n_views: views per image, ≥ 1.
        kind: the augmentation: ``shift``, ``crop_flip``, ``simclr``, ``crop_jitter_gray`` or ``none``.

    Returns:
        The views [n_views·n, H, W, C]: all images' first view, then all their second, ...
    """
    fn = AUGMENTATIONS[kind]

    def one(pos, x, v):
        return fn(jax.random.fold_in(jax.random.fold_in(key, pos), v), x)

    return jnp.concatenate(
        [jax.vmap(one, in_axes=(0, 0, None))(positions, images, v) for v in range(n_views)]
    )


# --------------------------------------------------------------------------------------------------------
# IDX files (the format of the official MNIST / Fashion-MNIST / KMNIST downloads): ``idx:DIR`` reads a folder
# of them; ``python -m train.app.data`` converts a pair into the npz that ``npz:PATH`` reads.
# --------------------------------------------------------------------------------------------------------

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IDX_FILES = {  # split → (images, labels), each plain or with .gz
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _file_bytes(path: str) -> bytes:
    """The bytes of ``path``, gunzipped when it ends in .gz; ValueError naming it when it cannot be read."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as err:  # gzip: bad header, truncated stream, CRC or data error
        kind = "a gzip file" if path.endswith(".gz") else "the file"
        raise UsageError(f"{path}: cannot read {kind} ({err})") from None


def read_idx(path: str, *, ndim: int | None = None, dtype: type | None = None) -> np.ndarray:
    """An IDX file (LeCun et al. 1998's MNIST format; gzipped when the name ends in .gz) as an array.

    The format: magic 0 0 TYPE NDIM, NDIM big-endian uint32 sizes, then the data, big-endian.

    Args:
        path: the file, plain or gzipped (then its name ends in .gz).
        ndim: the number of dimensions the file must hold (None: any).
        dtype: the element type the file must hold, e.g. ``np.uint8`` (None: any).

    Returns:
        The array of the header's shape, in native byte order.

    Raises:
        UsageError: a missing or unreadable file, or one that breaks the format, ``ndim`` or ``dtype`` (a
            ``ValueError``; the message names the file).
    """
    raw = _file_bytes(path)
    if len(raw) < 4 or raw[:2] != b"\0\0":
        gz = " (gzip data: name it .gz)" if raw[:2] == b"\x1f\x8b" else ""
        raise UsageError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()}{gz})")
    if raw[2] not in _IDX_TYPES:
        raise UsageError(
            f"{path}: unknown IDX type code 0x{raw[2]:02x} (known: {[hex(c) for c in _IDX_TYPES]})"
        )
    found = np.dtype(_IDX_TYPES[raw[2]])
    native = found.newbyteorder("=")
    if dtype is not None and native != np.dtype(dtype):
        raise UsageError(f"{path}: IDX type code 0x{raw[2]:02x} ({native}), expected {np.dtype(dtype)}")
    if ndim is not None and raw[3] != ndim:
        raise UsageError(f"{path}: {raw[3]} dimensions, expected {ndim}")
    body_start = 4 + 4 * raw[3]
    if len(raw) < body_start:
        raise UsageError(f"{path}: truncated header ({len(raw)} bytes; {raw[3]} sizes need {body_start})")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(raw[3]))
    body = raw[body_start:]
    if len(body) != found.itemsize * int(np.prod(shape)):
        raise UsageError(f"{path}: header says {shape} of {native}, but {len(body)} data bytes follow")
    return np.frombuffer(body, found).reshape(shape).astype(native)


def _idx_path(folder: str, stem: str) -> str:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists; both, or neither, is an error."""
    found = [p for p in (os.path.join(folder, stem), os.path.join(folder, stem + ".gz")) if os.path.isfile(p)]
    if len(found) == 2:
        raise UsageError(f"{found[0]} and {found[1]} both exist (they may differ): keep one")
    if not found:
        raise UsageError(
            f"{os.path.join(folder, stem)}[.gz]: no such file (idx:DIR needs its four IDX files)"
        )
    return found[0]


def _idx_split(folder: str, split: str) -> tuple[np.ndarray, np.ndarray, str, str]:
    """(images [N, H, W] uint8, labels [N] uint8, images' path, labels' path) of ``split`` in ``folder``."""
    images_path, labels_path = (_idx_path(folder, stem) for stem in IDX_FILES[split])
    images = read_idx(images_path, ndim=3, dtype=np.uint8)
    labels = read_idx(labels_path, ndim=1, dtype=np.uint8)
    if 0 in images.shape:
        raise UsageError(f"{images_path}: no images (shape {images.shape})")
    if len(labels) != len(images):
        raise UsageError(f"{labels_path}: {len(labels)} labels, but {images_path} holds {len(images)} images")
    return images, labels, images_path, labels_path


def _idx(folder: str) -> Dataset:
    """The four IDX files of ``folder`` (MNIST's layout, see :data:`IDX_FILES`) with their own train/test
    split; labels must be 0 … C − 1, each class present in the training labels."""
    tr_x, tr_y, tr_images, tr_labels = _idx_split(folder, "train")
    te_x, te_y, te_images, te_labels = _idx_split(folder, "test")
    if te_x.shape[1:] != tr_x.shape[1:]:
        raise UsageError(f"{te_images}: images of {te_x.shape[1:]}, but {tr_images} holds {tr_x.shape[1:]}")
    classes = int(tr_y.max()) + 1
    absent = np.setdiff1d(np.arange(classes), tr_y)
    if len(absent):
        raise UsageError(
            f"{tr_labels}: labels must be 0 … C − 1 with every class present; of 0 … {classes - 1}, "
            f"{len(absent)} have no image (the first is {int(absent[0])})"
        )
    if te_y.max() >= classes:
        raise UsageError(
            f"{te_labels}: label {int(te_y.max())} is out of the training labels' 0 … {classes - 1}"
        )
    return Dataset(
        f"idx:{folder}",
        _as_images(tr_x, tr_images),
        tr_y.astype(np.int32),
        _as_images(te_x, te_images),
        te_y.astype(np.int32),
    )


def idx_to_npz(images_path: str, labels_path: str, out_path: str) -> tuple[int, ...]:
    """Write ``images`` and ``labels`` from two IDX files into ``out_path`` (.npz), for ``dataset=npz:PATH``.

    Args:
        images_path: the images' IDX file (plain or .gz).
        labels_path: the labels' IDX file [N] (plain or .gz).
        out_path: the .npz file to write (its folder is created).

    Returns:
        The images' shape.

    Raises:
        UsageError: a file that cannot be read as IDX, or labels that are not one per image.
    """
    images, labels = read_idx(images_path), read_idx(labels_path)
    if labels.ndim != 1 or len(labels) != len(images):
        raise UsageError(f"{labels_path}: {labels.shape} labels do not match the {images.shape} images")
    files.write_npz(out_path, images=images, labels=labels)
    return images.shape


def main(argv: list[str]) -> int:
    """``python -m train.app.data IMAGES_IDX LABELS_IDX OUT.npz``: IDX files → ``dataset=npz:OUT.npz``.

    Args:
        argv: the command-line arguments after the program name: the images' and the labels' IDX files and
            the .npz to write (or ``-h`` / ``--help``).

    Returns:
        The exit status: 0 on success or help, 2 on bad arguments or files (one line on stderr).
    """
    if len(argv) != 3 or any(a in ("-h", "--help") for a in argv):
        print("usage: python -m train.app.data IMAGES_IDX[.gz] LABELS_IDX[.gz] OUT.npz", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        shape = idx_to_npz(*argv)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {argv[2]}: images {shape}; train with dataset=npz:{argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
