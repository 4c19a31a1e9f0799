"""train.app.data's ``idx:DIR`` source: MNIST-layout IDX folders, read back against a writer of the format's
own (LeCun et al.'s MNIST page: magic 0 0 TYPE NDIM, big-endian uint32 sizes, big-endian data), and every
broken file refused, naming it, before any training."""

import gzip
import os
import re
import struct

import numpy as np
import pytest

from train.app import cli, data

STEMS = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
CODES = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}


def idx_bytes(array: np.ndarray, code: int | None = None, ndim: int | None = None) -> bytes:
    """``array`` as IDX bytes; ``code`` / ``ndim`` override the header's type code / dimension count."""
    dims = array.shape if ndim is None else array.shape[:ndim]
    header = struct.pack(">BBBB", 0, 0, CODES[array.dtype] if code is None else code, len(dims))
    return header + struct.pack(f">{len(dims)}I", *dims) + array.tobytes()


def write(path, raw: bytes) -> None:
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        path.write_bytes(raw)


def arrays(n_train=30, n_test=12, h=5, w=4, classes=3, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "train_x": rng.integers(0, 256, (n_train, h, w), dtype=np.uint8),
        "train_y": (np.arange(n_train) % classes).astype(np.uint8),
        "test_x": rng.integers(0, 256, (n_test, h, w), dtype=np.uint8),
        "test_y": rng.integers(0, classes, n_test).astype(np.uint8),
    }


def folder(tmp_path, gz=(), raw: dict[str, bytes] | None = None, **arrays_kw):
    """A folder of the four files (those named in ``gz`` gzipped); ``raw`` replaces some files' bytes."""
    raw = {key: idx_bytes(a) for key, a in arrays(**arrays_kw).items()} | (raw or {})
    tmp_path.mkdir(exist_ok=True)
    for key, stem in STEMS.items():
        write(tmp_path / (stem + ".gz" if key in gz else stem), raw[key])
    return tmp_path


@pytest.mark.parametrize("gz", [(), tuple(STEMS), ("train_x", "test_y")])
def test_idx_folder_reads_back_the_written_arrays(tmp_path, gz):
    want = arrays()
    ds = data.load(f"idx:{folder(tmp_path, gz)}")
    assert ds.name == f"idx:{tmp_path}" and ds.num_classes == 3 and ds.image_shape == (5, 4, 1)
    for key in STEMS:
        got = getattr(ds, key)
        if key.endswith("_x"):  # uint8 code k → k/255 in float32, [N, H, W, 1], as the npz / tfds sources
            assert got.dtype == np.float32 and got.shape == (*want[key].shape, 1)
            np.testing.assert_array_equal(got[..., 0], want[key].astype(np.float32) * np.float32(1 / 255))
        else:
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want[key])
    assert data.compact(ds.train_x).tobytes() == want["train_x"].tobytes()  # held as the same uint8 codes


def test_the_generic_reader_decodes_big_endian_types(tmp_path):
    values = np.array([[-5, 70000], [2**31 - 1, -(2**31)]], dtype=">i4")
    write(tmp_path / "ints.gz", idx_bytes(values))
    got = data.read_idx(str(tmp_path / "ints.gz"))
    assert got.dtype == np.int32 and got.dtype.isnative
    np.testing.assert_array_equal(got, values.astype(np.int64))


def test_dataset_name_idx_needs_an_existing_folder(tmp_path):
    data.check_dataset_name(f"idx:{tmp_path}")
    for bad, expect in [
        ("idx:", "idx:DIR"),
        (f"idx:{tmp_path / 'absent'}", "not a folder"),
        (f"idx:{folder(tmp_path) / STEMS['train_x']}", "not a folder"),
    ]:
        with pytest.raises(ValueError, match=f"^dataset .*{expect}"):
            data.check_dataset_name(bad)


def _cut(raw: bytes, n: int) -> bytes:
    return raw[:n]


def _corrupt_gzip(raw: bytes) -> bytes:
    packed = bytearray(gzip.compress(raw))
    packed[len(packed) // 2] ^= 0xFF
    return bytes(packed)


A = arrays()
OTHER_SHAPE = arrays(h=4, w=5)
BAD = {  # name: (file, its bytes, the message's key phrase)
    "bad magic": ("train_x", b"\x01\x02" + idx_bytes(A["train_x"])[2:], "bad magic number 0102"),
    "gzip data in a plain file": ("test_y", gzip.compress(idx_bytes(A["test_y"])), "name it .gz"),
    "unknown type code": ("train_y", idx_bytes(A["train_y"], code=0x07), "unknown IDX type code 0x07"),
    "int32 labels": (
        "train_y",
        idx_bytes(A["train_y"].astype(">i4")),
        r"type code 0x0c \(int32\), expected uint8",
    ),
    "2-d images": ("test_x", idx_bytes(A["test_x"].reshape(12, 20)), "2 dimensions, expected 3"),
    "4-d images": ("train_x", idx_bytes(A["train_x"][..., None]), "4 dimensions, expected 3"),
    "2-d labels": ("test_y", idx_bytes(A["test_y"][:, None]), "2 dimensions, expected 1"),
    "truncated header": ("train_x", idx_bytes(A["train_x"])[:10], "truncated header"),
    "empty file": ("test_x", b"", "bad magic number"),
    "truncated data": ("train_x", idx_bytes(A["train_x"])[:-1], "599 data bytes follow"),
    "trailing data": ("test_y", idx_bytes(A["test_y"]) + b"\x00", "13 data bytes follow"),
    "no images": ("test_x", idx_bytes(A["test_x"][:0]), "no images"),
    "fewer labels": ("test_y", idx_bytes(A["test_y"][:-1]), "11 labels, but .*holds 12 images"),
    "more labels": ("train_y", idx_bytes(np.r_[A["train_y"], 0].astype(np.uint8)), "31 labels, but"),
    "image sizes differ": ("test_x", idx_bytes(OTHER_SHAPE["test_x"]), r"images of \(4, 5\)"),
    "test label out of range": (
        "test_y",
        idx_bytes(np.r_[A["test_y"][:-1], 3].astype(np.uint8)),
        r"label 3 is out of the training labels' 0 … 2",
    ),
    "a class with no image": (
        "train_y",
        idx_bytes(np.where(A["train_y"] == 1, 2, A["train_y"]).astype(np.uint8)),
        "every class present; of 0 … 2, 1 have no image",
    ),
    "labels far out of range": (
        "train_y",
        idx_bytes(np.where(A["train_y"] == 2, 200, A["train_y"]).astype(np.uint8)),
        "of 0 … 200, 198 have no image",
    ),
}


@pytest.mark.parametrize(
    "case, gz", [(case, False) for case in BAD] + [(case, True) for case in BAD if "plain" not in case]
)
def test_a_broken_file_is_refused_in_one_line_naming_it(tmp_path, case, gz):
    key, raw, phrase = BAD[case]
    ds = folder(tmp_path, gz=(key,) if gz else (), raw={key: raw})
    path = str(ds / (STEMS[key] + (".gz" if gz else "")))
    with pytest.raises(ValueError, match=f"^{re.escape(path)}.*{phrase}") as err:
        data.load(f"idx:{ds}")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "damage, phrase",
    [(lambda raw: gzip.compress(raw)[:-9], "end-of-stream"), (_corrupt_gzip, ""), (lambda raw: raw, "")],
    ids=["truncated", "flipped byte", "not gzip"],
)
def test_a_corrupt_gzip_is_refused_naming_it(tmp_path, damage, phrase):
    ds = folder(tmp_path)
    os.remove(ds / STEMS["test_x"])
    path = ds / (STEMS["test_x"] + ".gz")
    path.write_bytes(damage(idx_bytes(A["test_x"])))
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: cannot read a gzip file .*{phrase}"):
        data.load(f"idx:{ds}")


def test_a_missing_file_or_a_plain_and_gz_pair_is_refused(tmp_path):
    ds = folder(tmp_path)
    os.remove(ds / STEMS["test_y"])
    with pytest.raises(ValueError, match=f"^{re.escape(str(ds / STEMS['test_y']))}\\[.gz\\]: no such file"):
        data.load(f"idx:{ds}")
    write(ds / (STEMS["test_y"] + ".gz"), idx_bytes(A["test_y"]))
    data.load(f"idx:{ds}")  # the .gz alone serves
    write(ds / STEMS["test_y"], idx_bytes(A["test_y"]))
    with pytest.raises(ValueError, match=f"^{re.escape(str(ds / STEMS['test_y']))} and .*both exist"):
        data.load(f"idx:{ds}")


def test_the_app_stops_on_a_broken_file_before_training(tmp_path, capsys):
    ds = folder(tmp_path / "data", raw={"train_y": idx_bytes(A["train_y"][:-1])})
    workdir = tmp_path / "run"
    status = cli.main([f"dataset=idx:{ds}", f"workdir={workdir}", "steps=2", "progress=false"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {ds / STEMS['train_y']}: 29 labels, but")
    assert not workdir.exists()  # nothing was trained or written
