"""The data sources: ``digits``, ``npz:PATH``, ``idx:DIR`` and tfds data, each registered with its keys,
:func:`load`, which loads one by name, and :func:`prepare`, a run's data.
"""

from __future__ import annotations

import os
import zipfile
from typing import TYPE_CHECKING

import numpy as np

from train.app import registry
from train.app.data._dataset import Dataset, as_images, disjoint_classes, hold_out, split
from train.app.data._idx import idx_folder
from train.app.errors import UsageError
from train.app.registry import UNIT_INTERVAL, Key

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

TFDS_NAMES = ("mnist", "fashion_mnist", "cifar10", "cifar100")
DATASETS = ("digits", *TFDS_NAMES)  # by name; any other: tfds:NAME, or a local file npz:PATH


def _digits(test_fraction: float) -> Dataset:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return split((x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1), y, "digits", test_fraction)


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
    images = as_images(raw_images, f"npz:{path} images")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise UsageError(
            f"npz:{path} labels must be integers [N={len(images)}], got {labels.dtype} {labels.shape}"
        )
    return split(images, labels, f"npz:{path}", test_fraction)


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
    images = as_images(np.stack([r["image"] for r in rows]), f"{name} images")
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


def prepare(cfg: RunConfig) -> tuple[Dataset, Dataset | None]:
    """A run's data: the data set loaded, its class split, the validation split of ``select_best``, checked.

    Args:
        cfg: the run's configuration (``dataset``, ``test_fraction``, ``data_dir``, ``classes``,
            ``select_best``, ``val_fraction``, ``knn_k``).

    Returns:
        (the data set trained on: with ``select_best``, less its validation images, which are also the
        report's references; the validation set of ``select_best``, or None).

    Raises:
        UsageError: a bad data set (as :func:`load`), a class split it cannot make, or ``knn_k`` larger than
            the training set (what would fail only after training).
    """
    ds = load(cfg.dataset, test_fraction=cfg.test_fraction, data_dir=cfg.data_dir)
    if cfg.classes == "disjoint":
        ds = disjoint_classes(ds)
    val = None
    if cfg.select_best:
        ds, val = hold_out(ds, cfg.val_fraction)
    if cfg.knn_k > len(ds.train_y):
        raise UsageError(f"knn_k must be at most the {len(ds.train_y)} training images, got {cfg.knn_k}")
    return ds, val


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
registry.register("dataset", "idx", calls=lambda name: idx_folder(name[4:]), label="idx:DIR")
registry.register("dataset", "tfds", keys=(DATA_DIR,), calls=_tfds, label=f"{'|'.join(TFDS_NAMES)}|tfds:NAME")
