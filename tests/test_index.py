"""geojax.index.Index on the 4 fake CPU devices against naive numpy scans and the single-device searches:
uneven shards, k larger than a shard, ties across shard borders, a second (query) mesh axis, adds, and
save/load with the files it must refuse."""

import os
import struct

import jax
import numpy as np
import pytest
from test_search_kernels import hamming_numpy, naive_topk, pq_numpy, torus_numpy

from geojax import index as index_lib
from geojax import quantize, search
from geojax.index import Index

pytestmark = pytest.mark.multidevice


def torus_bits_numpy(a, b, bits, p):
    """Wraparound Lp^p of packed b-bit codes, unpacked by numpy (little-endian lanes)."""
    lanes = 8 // bits

    def unpack(x):
        return ((x[..., None] >> (bits * np.arange(lanes))) & ((1 << bits) - 1)).reshape(len(x), -1)

    diff = (unpack(a)[:, None].astype(np.int64) - unpack(b)[None]) % (1 << bits)
    return (np.minimum(diff, (1 << bits) - diff) ** p).sum(-1)


def mesh(shape=(4,), names=("db",)):
    return jax.sharding.Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)


def with_ties(rng, n, width, nq, mask=0xFF):
    """Codes whose rows repeat across shard borders (rows 0, n/4 − 1, n/4, n/2 + 1 and n − 1 equal) and
    queries equal to those rows, so that equal distances span shards."""
    db = rng.integers(0, 256, (n, width), dtype=np.uint8) & mask
    for r in (n // 4 - 1, n // 4, n // 2 + 1, n - 1):
        db[r] = db[0]
    q = rng.integers(0, 256, (nq, width), dtype=np.uint8) & mask
    q[0] = db[0]
    q[1] = db[0] ^ 1  # distance 1 from all five copies
    return q, db


def added_in_pieces(kind, db, cuts, **options):
    """An index of ``db`` added in pieces at ``cuts`` (uneven shard sizes, growth across adds)."""
    idx = Index(kind, db.shape[1], mesh=mesh(), **options)
    for piece in np.split(db, cuts):
        idx.add(piece)
    return idx


@pytest.mark.parametrize("k", [1, 10, 130])
def test_hamming_sharded_equals_numpy_and_single_device(k):
    rng = np.random.default_rng(0)
    q, db = with_ties(rng, 403, 8, 9)
    idx = added_in_pieces("hamming", db, [7, 100, 101])
    assert idx.shard_sizes.sum() == 403 and len(set(idx.shard_sizes)) > 1  # uneven
    if k == 130:
        assert idx.shard_sizes.max() < k  # k larger than every shard
    d, i = idx.search(q, k)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), k)
    np.testing.assert_array_equal(d, ref_d)
    np.testing.assert_array_equal(i, ref_i)
    one = search.hamming_topk(q, db, k)
    np.testing.assert_array_equal(i, np.asarray(one[1]))


@pytest.mark.parametrize("bits,p", [(8, 1), (8, 2), (4, 1), (4, 2), (2, 1), (1, 1)])
def test_torus_sharded_every_bit_width(bits, p):
    rng = np.random.default_rng(bits * 10 + p)
    q, db = with_ties(rng, 257, 6, 7)
    idx = added_in_pieces("torus", db, [3, 200], bits=bits, p=p)
    d, i = idx.search(q, 12)
    ref_d, ref_i = naive_topk(torus_bits_numpy(q, db, bits, p), 12)
    np.testing.assert_array_equal(d, ref_d)
    np.testing.assert_array_equal(i, ref_i)
    if bits == 8:
        np.testing.assert_array_equal(torus_bits_numpy(q, db, 8, 1), torus_numpy(q, db))  # the reference


def test_pq_sharded_equals_numpy_adc():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    pq = quantize.pq_fit(x, m=4, nbits=3, key=jax.random.key(0))
    codes = np.array(quantize.pq_encode(pq, x))
    codes[77] = codes[0]  # a tie across the first shard border
    idx = Index.build("pq", codes, pq=pq, mesh=mesh())
    d, i = idx.search(x[:6], 90)  # k larger than each 75-row shard
    ref = pq_numpy(x[:6], np.asarray(pq.codebooks), codes)
    ref_d, ref_i = naive_topk(ref, 90)
    np.testing.assert_allclose(d, ref_d, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(i, ref_i)


def test_queries_sharded_over_a_second_axis():
    rng = np.random.default_rng(4)
    q, db = with_ties(rng, 200, 8, 11)  # 11 queries over 2 devices: padded
    idx = Index.build("hamming", db, mesh=mesh((2, 2), ("db", "q")), query_axis="q")
    assert idx.shards == 2
    d, i = idx.search(q, 7)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), 7)
    np.testing.assert_array_equal(d, ref_d)
    np.testing.assert_array_equal(i, ref_i)


def test_add_then_search_equals_build_all():
    rng = np.random.default_rng(5)
    q, db = with_ties(rng, 3000, 16, 5)
    built = Index.build("torus", db, mesh=mesh())
    grown = added_in_pieces("torus", db, [1, 2, 1100, 2900])
    assert grown._capacity < 2 * 3000  # grown by doubling, not by the whole index per add
    for a, b in zip(built.search(q, 25), grown.search(q, 25), strict=True):
        np.testing.assert_array_equal(a, b)


def test_save_load_round_trip_and_add_after(tmp_path):
    rng = np.random.default_rng(6)
    q, db = with_ties(rng, 500, 4, 6, mask=0x33)
    idx = added_in_pieces("torus", db[:400], [150], bits=2, p=2)
    path = str(tmp_path / "codes.gjx")
    idx.save(path)
    loaded = Index.load(path, mesh=mesh((2,)))  # another mesh: the ids travel with the rows
    assert (loaded.kind, loaded.bits, loaded.p, loaded.ntotal) == ("torus", 2, 2, 400)
    for a, b in zip(idx.search(q, 9), loaded.search(q, 9), strict=True):
        np.testing.assert_array_equal(a, b)
    loaded.add(db[400:])
    ref_d, ref_i = naive_topk(torus_bits_numpy(q, db, 2, 2), 9)
    d, i = loaded.search(q, 9)
    np.testing.assert_array_equal(d, ref_d)
    np.testing.assert_array_equal(i, ref_i)
    assert not [f for f in os.listdir(tmp_path) if f != "codes.gjx"]  # no temporary file left


def test_save_load_pq(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((100, 8)).astype(np.float32)
    pq = quantize.pq_fit(x, m=2, nbits=4, key=jax.random.key(1))
    idx = Index.build("pq", np.asarray(quantize.pq_encode(pq, x)), pq=pq, mesh=mesh())
    path = str(tmp_path / "pq.gjx")
    idx.save(path)
    loaded = Index.load(path)
    np.testing.assert_array_equal(np.asarray(loaded._pq.codebooks), np.asarray(pq.codebooks))
    for a, b in zip(idx.search(x[:4], 5), loaded.search(x[:4], 5), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_files_refused(tmp_path):
    idx = Index.build("hamming", np.zeros((10, 4), np.uint8), mesh=mesh())
    good = tmp_path / "good.gjx"
    idx.save(str(good))
    data = good.read_bytes()
    other = tmp_path / "other.npy"
    np.save(other, np.zeros(3))
    with pytest.raises(ValueError, match="not a geojax index file"):
        Index.load(str(other))
    newer = tmp_path / "newer.gjx"
    newer.write_bytes(data[:8] + struct.pack("<I", index_lib.VERSION + 1) + data[12:])
    with pytest.raises(ValueError, match="format version 2"):
        Index.load(str(newer))
    cut = tmp_path / "cut.gjx"
    cut.write_bytes(data[:-3])
    with pytest.raises(ValueError, match="header describes"):
        Index.load(str(cut))
    with pytest.raises(ValueError, match="not a geojax index file"):
        (tmp_path / "empty.gjx").write_bytes(b"")
        Index.load(str(tmp_path / "empty.gjx"))


def test_bad_arguments_rejected_before_work():
    idx = Index.build("hamming", np.zeros((10, 4), np.uint8), mesh=mesh())
    with pytest.raises(ValueError, match="kind"):
        Index("cosine", 4)
    with pytest.raises(ValueError, match="width"):
        idx.add(np.zeros((2, 5), np.uint8))
    with pytest.raises(ValueError, match="codes"):
        idx.add(np.zeros((2, 4), np.int32))
    with pytest.raises(ValueError, match="k must be at most 10"):
        idx.search(np.zeros((1, 4), np.uint8), 11)
    with pytest.raises(ValueError, match="db_axis"):
        Index("hamming", 4, mesh=mesh(), db_axis="rows")
    with pytest.raises(ValueError, match="pq must be given"):
        Index("pq", 4)
    pq = quantize.pq_fit(np.ones((20, 4), np.float32), m=2, nbits=2, key=jax.random.key(0))
    pidx = Index("pq", 2, pq=pq, mesh=mesh())
    with pytest.raises(ValueError, match="codes"):
        pidx.add(np.full((3, 2), 4, np.uint8))  # outside [0, 4)
    pidx.add(np.zeros((3, 2), np.uint8))
    with pytest.raises(ValueError, match="queries"):
        pidx.search(np.full((1, 4), np.nan, np.float32), 1)
