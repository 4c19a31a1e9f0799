"""Datasets, batch samplers and two-view augmentations.

- ``digits``: scikit-learn's bundled ``load_digits`` (1,797 8×8 images, 10 classes), offline; a fixed,
  stratified, seeded train/test split.
- ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100``: ``tfds.data_source`` (no TensorFlow needed),
  read one element at a time; the data must have been prepared (an error says how otherwise).
- ``npz:PATH``: a local ``.npz`` with ``images`` [N, H, W(, C)] and ``labels`` [N]; split like digits.

Images are float32 in [0, 1], [N, H, W, C]. Samplers are host-side NumPy functions of (seed, step,
process): a run's data order is a function of its seed and step, so a resumed run sees the same batches.
Augmentations are jnp functions of a key, applied per example with a key folded from the example's global
position in the batch (the same views on 1 or many devices).
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import sys
import zipfile
from typing import Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

from train import files

TFDS_NAMES = ("mnist", "fashion_mnist", "cifar10", "cifar100")
DATASETS = ("digits", *TFDS_NAMES)  # by name; any other data set is a local file: npz:PATH
Sampler = Literal["random", "m_per_class", "class_subsampled"]
Augmentation = Literal["shift", "simclr", "none"]
SAMPLERS: tuple[str, ...] = get_args(Sampler)
SPLIT_SEED = 0  # the digits / npz train-test split is fixed, whatever the training seed


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Train and test images [N, H, W, C] float32 in [0, 1] with int32 labels [N]."""

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(max(self.train_y.max(), self.test_y.max())) + 1

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])


def _as_images(images: np.ndarray, what: str) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4 or 0 in images.shape:
        raise ValueError(f"{what} must be images [N, H, W] or [N, H, W, C], got shape {images.shape}")
    if images.dtype == np.uint8:
        return images.astype(np.float32) / 255.0
    if not np.issubdtype(images.dtype, np.number):
        raise ValueError(f"{what} must be numbers, got dtype {images.dtype}")
    images = images.astype(np.float32)
    bad = ~np.isfinite(images).reshape(len(images), -1).all(axis=1)
    if bad.any():
        raise ValueError(
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


def _digits(test_fraction: float) -> Dataset:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return _split((x / 16.0).astype(np.float32).reshape(-1, 8, 8, 1), y, "digits", test_fraction)


def _npz(path: str, test_fraction: float) -> Dataset:
    if not os.path.isfile(path):
        raise ValueError(f"dataset npz:{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = {"images", "labels"} - set(f.files)
            if missing:
                raise ValueError(
                    f"dataset npz:{path} must hold arrays 'images' and 'labels'; missing {sorted(missing)}"
                )
            raw_images, labels = f["images"], np.asarray(f["labels"])
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"dataset npz:{path} cannot be read as a NumPy .npz archive ({err})") from None
    except ValueError as err:
        if "dataset npz:" in str(err):
            raise
        raise ValueError(f"dataset npz:{path} cannot be read as a NumPy .npz archive ({err})") from None
    images = _as_images(raw_images, f"npz:{path} images")
    if labels.ndim != 1 or len(labels) != len(images) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"npz:{path} labels must be integers [N={len(images)}], got {labels.dtype} {labels.shape}"
        )
    return _split(images, labels, f"npz:{path}", test_fraction)


def _tfds_split(name: str, split: str, data_dir: str | None, shard: tuple[int, int]):
    import tensorflow_datasets as tfds

    try:
        source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except Exception as err:  # tfds raises several kinds for "not prepared"; all mean the same here
        raise ValueError(
            f"dataset {name!r} ({split}) is not prepared in {data_dir or 'the tfds data dir'} ({err}). "
            f"Prepare it once on a machine with network access: `tfds build {name}` (or python -c "
            f"\"import tensorflow_datasets as tfds; tfds.data_source('{name}', download=True)\"), then copy "
            f"~/tensorflow_datasets (or pass data_dir=...)."
        ) from err
    index, count = shard
    rows = [source[i] for i in range(index, len(source), count)]  # one element at a time
    images = _as_images(np.stack([r["image"] for r in rows]), f"{name} images")
    return images, np.asarray([r["label"] for r in rows], np.int32)


def check_dataset_name(name: str) -> None:
    """Raise ValueError unless ``name`` is one of DATASETS or ``npz:PATH``."""
    if name not in DATASETS and not name.startswith("npz:"):
        raise ValueError(f"dataset must be {', '.join(DATASETS)} or npz:PATH, got {name!r}")


def load(
    name: str, *, test_fraction: float = 0.25, data_dir: str | None = None, shard: tuple[int, int] = (0, 1)
) -> Dataset:
    """Load a dataset by name; ``shard=(process, processes)`` keeps training rows process::processes."""
    check_dataset_name(name)
    if name == "digits":
        ds = _digits(test_fraction)
    elif name.startswith("npz:"):
        ds = _npz(name[4:], test_fraction)
    else:
        tr_x, tr_y = _tfds_split(name, "train", data_dir, shard)
        te_x, te_y = _tfds_split(name, "test", data_dir, (0, 1))
        return Dataset(name, tr_x, tr_y, te_x, te_y)
    index, count = shard
    return dataclasses.replace(ds, train_x=ds.train_x[index::count], train_y=ds.train_y[index::count])


# --------------------------------------------------------------------------------------------------------
# Samplers: indices [batch] into the (local) training set, a function of (seed, step, process).
# --------------------------------------------------------------------------------------------------------


def sample(
    labels: np.ndarray,
    *,
    kind: str,
    batch: int,
    seed: int,
    step: int,
    process: int = 0,
    m_per_class: int = 4,
    class_fraction: float = 0.4,
) -> np.ndarray:
    """Batch indices for ``step``: ``random`` (uniform, without replacement), ``m_per_class`` (batch/m
    classes × m images, MTriplet's 8 × 4) or ``class_subsampled`` (uniform within a random subset of
    ``class_fraction`` of the classes, SimO's < 50 %)."""
    rng = np.random.default_rng([seed, step, process])
    n = len(labels)
    if kind == "random":
        return rng.choice(n, batch, replace=batch > n)
    classes = np.unique(labels)
    if kind == "m_per_class":
        k = batch // m_per_class
        chosen = rng.choice(classes, k, replace=k > len(classes))
        picks = []
        for c in chosen:
            members = np.flatnonzero(labels == c)
            picks.append(rng.choice(members, m_per_class, replace=m_per_class > len(members)))
        return np.concatenate(picks)
    if kind == "class_subsampled":
        k = max(1, int(class_fraction * len(classes)))
        chosen = rng.choice(classes, k, replace=False)
        members = np.flatnonzero(np.isin(labels, chosen))
        return rng.choice(members, batch, replace=batch > len(members))
    raise ValueError(f"sampler must be one of {list(SAMPLERS)}, got {kind!r}")


# --------------------------------------------------------------------------------------------------------
# Augmentations (jnp, one image [H, W, C] and a key at a time; vmapped over the batch).
# --------------------------------------------------------------------------------------------------------


def shift(key: jax.Array, x: jax.Array) -> jax.Array:
    """Small-image augmentation: random ±1 pixel translation (zero fill) and contrast ×U(0.8, 1.2)."""
    h, w, c = x.shape
    k1, k2 = jax.random.split(key)
    off = jax.random.randint(k1, (2,), 0, 3)
    padded = jnp.pad(x, ((1, 1), (1, 1), (0, 0)))
    out = jax.lax.dynamic_slice(padded, (off[0], off[1], 0), (h, w, c))
    return jnp.clip(out * jax.random.uniform(k2, (), minval=0.8, maxval=1.2), 0.0, 1.0)


def random_resized_crop(key: jax.Array, x: jax.Array, *, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3)) -> jax.Array:
    """Crop a random box of area fraction U(scale) and aspect ratio log-U(ratio), resized back bilinearly."""
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
    """SimCLR colour jitter without hue: brightness, contrast and saturation factors U(1 ± 0.8·strength)."""
    k1, k2, k3 = jax.random.split(key, 3)
    lo, hi = 1 - 0.8 * strength, 1 + 0.8 * strength
    x = x * jax.random.uniform(k1, (), minval=lo, maxval=hi)
    mean = x.mean()
    x = (x - mean) * jax.random.uniform(k2, (), minval=lo, maxval=hi) + mean
    g = _gray(x)
    x = (x - g) * jax.random.uniform(k3, (), minval=lo, maxval=hi) + g
    return jnp.clip(x, 0.0, 1.0)


def simclr(key: jax.Array, x: jax.Array) -> jax.Array:
    """SimCLR's augmentation set: random resized crop, horizontal flip (p 0.5), colour jitter strength 0.5
    (p 0.8) and grayscale (p 0.2) (seed 001, A.1)."""
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    x = random_resized_crop(k1, x)
    x = jnp.where(jax.random.bernoulli(k2, 0.5), x[:, ::-1], x)
    x = jnp.where(jax.random.bernoulli(k3, 0.8), color_jitter(k4, x), x)
    return jnp.where(jax.random.bernoulli(k5, 0.2), _gray(x), x)


def identity(key: jax.Array, x: jax.Array) -> jax.Array:
    """No augmentation."""
    del key
    return x


AUGMENTATIONS = {"shift": shift, "simclr": simclr, "none": identity}
assert tuple(AUGMENTATIONS) == get_args(Augmentation)


def views(key: jax.Array, images: jax.Array, positions: jax.Array, *, n_views: int, kind: str) -> jax.Array:
    """``n_views`` augmented views of ``images`` [n, H, W, C] → [n_views·n, H, W, C] (view-major).

    ``positions`` [n] are the images' global positions in the batch; example i, view v uses the key
    fold_in(fold_in(key, positions[i]), v), so the views do not depend on how the batch is split.
    With ``n_views == 1`` and ``kind`` not 'none' the single view is augmented too.
    """
    fn = AUGMENTATIONS[kind]

    def one(pos, x, v):
        return fn(jax.random.fold_in(jax.random.fold_in(key, pos), v), x)

    return jnp.concatenate(
        [jax.vmap(one, in_axes=(0, 0, None))(positions, images, v) for v in range(n_views)]
    )


# --------------------------------------------------------------------------------------------------------
# IDX files (the format of the official MNIST / Fashion-MNIST downloads) → the npz that ``npz:PATH`` reads.
# --------------------------------------------------------------------------------------------------------

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str) -> np.ndarray:
    """An IDX file (optionally gzipped, as LeCun et al. distribute MNIST) as an array of its shape."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_TYPES[raw[2]])
    body = raw[4 + 4 * ndim :]
    if len(body) != dtype.itemsize * int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} of {dtype}, but {len(body)} data bytes follow")
    return np.frombuffer(body, dtype).reshape(shape).astype(dtype.newbyteorder("="))


def idx_to_npz(images_path: str, labels_path: str, out_path: str) -> tuple[int, ...]:
    """Write ``images`` and ``labels`` from two IDX files into ``out_path`` (.npz); the images' shape."""
    images, labels = read_idx(images_path), read_idx(labels_path)
    if labels.ndim != 1 or len(labels) != len(images):
        raise ValueError(f"{labels_path}: {labels.shape} labels do not match the {images.shape} images")
    files.write_npz(out_path, images=images, labels=labels)
    return images.shape


def main(argv: list[str]) -> int:
    """``python -m train.data IMAGES_IDX LABELS_IDX OUT.npz``: IDX files → ``dataset=npz:OUT.npz``."""
    if len(argv) != 3 or any(a in ("-h", "--help") for a in argv):
        print("usage: python -m train.data IMAGES_IDX[.gz] LABELS_IDX[.gz] OUT.npz", file=sys.stderr)
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
