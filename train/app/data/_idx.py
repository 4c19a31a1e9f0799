"""IDX files (the format of the official MNIST / Fashion-MNIST / KMNIST downloads): ``idx:DIR`` reads a folder
of them; ``python -m train.app.data`` converts a pair into the npz that ``npz:PATH`` reads.
"""

from __future__ import annotations

import gzip
import os
import sys
import zlib

import numpy as np

from train.app.data._dataset import Dataset, as_images
from train.app.errors import UsageError
from train.helpers import files

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


def idx_folder(folder: str) -> Dataset:
    """The data set of the four IDX files of ``folder``, with their own train/test split.

    Args:
        folder: the folder holding them in MNIST's layout (:data:`IDX_FILES`), each plain or ``.gz``.

    Returns:
        The Dataset; its labels are 0 … C − 1, each class present in the training labels.

    Raises:
        UsageError: the test images' shape differs from the training images', a class of 0 … C − 1 has no
            training image, or a test label is not one of the training labels.
    """
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
        as_images(tr_x, tr_images),
        tr_y.astype(np.int32),
        as_images(te_x, te_images),
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
