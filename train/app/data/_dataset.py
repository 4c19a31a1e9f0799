"""The data set a run trains on (:class:`Dataset`, float32 images in [0, 1] or their uint8 codes), its seeded
splits (:func:`hold_out`, :func:`disjoint_classes`) and the uint8 codes (:func:`compact`, :func:`to_unit`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from train.app.errors import UsageError

SPLIT_SEED = 0  # the digits / npz train-test split is fixed, whatever the training seed
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


def as_images(images: np.ndarray, what: str) -> np.ndarray:
    """Images as a data set holds them: [N, H, W, C] float32 in [0, 1] (uint8 codes scaled), checked.

    Args:
        images: [N, H, W] or [N, H, W, C] numbers (uint8 codes, or floats).
        what: how the error messages name them.

    Returns:
        [N, H, W, C] float32.

    Raises:
        UsageError: a wrong rank, an empty axis, a non-numeric dtype, or an image holding NaN or ±inf.
    """
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


def split(images: np.ndarray, labels: np.ndarray, name: str, test_fraction: float) -> Dataset:
    """The seeded train / test split of a data set that comes without one.

    Stratified by class where every class has two images or more.

    Args:
        images: [N, H, W, C] images.
        labels: [N] integer labels.
        name: the data set's name.
        test_fraction: the test split's share, in (0, 1).

    Returns:
        The Dataset, its labels int32.
    """
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
    val = split(ds.train_x, ds.train_y, f"{ds.name} (validation)", fraction)
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
