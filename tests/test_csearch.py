"""The C99 header train/csearch/geojax_torus.h, compiled with the system C compiler (skipped without one):
its top-k equals geojax.search.torus_topk, and it reads the codes.gjt files of train.csearch.reader."""

import numpy as np
import pytest

from geojax import quantize, search
from train import export
from train.csearch import clib, reader

pytestmark = pytest.mark.skipif(clib.compiler() is None, reason="no C compiler")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return clib.Library(str(tmp_path_factory.mktemp("csearch")))


def with_ties(rng, nq, n, width):
    q = rng.integers(0, 256, (nq, width), dtype=np.uint8)
    db = rng.integers(0, 256, (n, width), dtype=np.uint8)
    db[n // 2] = db[1]  # exact ties: the lower index must come first
    db[n - 1] = db[3]
    q[0] = db[1]
    q[1] = db[3]
    return q, db


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("width,n,k", [(8, 500, 10), (13, 300, 7), (3, 40, 40)])
def test_c_topk_equals_torus_topk(lib, bits, width, n, k):
    # widths 13 and 3 leave a tail of bytes after the whole 32-bit words; k = n returns the whole order.
    rng = np.random.default_rng(width * 10 + bits)
    q, db = with_ties(rng, 17, n, width)
    want_d, want_i = search.torus_topk(q, db, k, bits=bits, chunk=128)
    got_d, got_i = lib.topk(q, db, k, bits=bits)
    np.testing.assert_array_equal(got_i, np.asarray(want_i))
    np.testing.assert_array_equal(got_d, np.asarray(want_d))


def test_c_pinned_distances(lib):
    # 8-bit: 250 vs 5 → 11 (Stowell 2026's wraparound); 4-bit: (15, 1) vs (1, 14) → 2 + 3.
    d, _ = lib.topk(np.array([[250]], np.uint8), np.array([[5]], np.uint8), 1, bits=8)
    assert int(d[0, 0]) == 11
    d, _ = lib.topk(np.array([[15 | 1 << 4]], np.uint8), np.array([[1 | 14 << 4]], np.uint8), 1, bits=4)
    assert int(d[0, 0]) == 5


def test_c_rejects_other_widths(lib):
    q = np.zeros((1, 4), np.uint8)
    with pytest.raises(ValueError, match="found 0"):
        lib.topk(q, q, 1, bits=3)


@pytest.mark.parametrize("bits", [2, 4])
def test_codes_file_round_trip_numpy_and_c(lib, tmp_path, bits):
    rng = np.random.default_rng(bits)
    t = rng.uniform(0, 1, (37, 12)).astype(np.float32)
    codes = np.asarray(quantize.torus_codes(t, bits))
    labels = rng.integers(-5, 10, 37).astype(np.int32)
    path = str(tmp_path / "codes.gjt")
    header = export.write_codes(path, codes, labels, bits=bits, dim=12, extra={"geometry": "torus_n"})
    got = reader.read_codes(path)
    assert (got.bits, got.dim, got.header["geometry"]) == (bits, 12, "torus_n")
    assert header["codes_offset"] % 8 == 0 and header["labels_offset"] % 8 == 0
    np.testing.assert_array_equal(got.codes, codes)
    np.testing.assert_array_equal(got.labels, labels)
    unpacked = reader.unpack(got.codes, bits)
    np.testing.assert_array_equal(unpacked, quantize.torus_unpack(codes, bits))
    with open(path, "rb") as f:
        c_bits, c_dim, c_count, c_codes, c_labels = lib.open_db(f.read())
    assert (c_bits, c_dim, c_count) == (bits, 12, 37)
    np.testing.assert_array_equal(c_codes, codes)
    np.testing.assert_array_equal(c_labels, labels)


def test_reader_rejects_bad_files(tmp_path, lib):
    path = tmp_path / "bad.gjt"
    path.write_bytes(b"NOTTORUS" + bytes(40))
    with pytest.raises(ValueError, match="not a version-1"):
        reader.read_codes(str(path))
    with pytest.raises(ValueError, match="rejected"):
        lib.open_db(path.read_bytes())
    good = tmp_path / "good.gjt"
    export.write_codes(str(good), np.zeros((4, 2), np.uint8), np.arange(4), bits=4, dim=4)
    cut = tmp_path / "cut.gjt"
    cut.write_bytes(good.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated"):
        reader.read_codes(str(cut))
    with pytest.raises(ValueError, match="rejected"):
        lib.open_db(cut.read_bytes())
