"""geojax.search.IndexFlat on the 4 fake CPU devices against naive numpy scans and the single-device searches:
uneven shards, k larger than a shard, ties across shard borders, a second (query) mesh axis, adds, user ids,
removal, and write_index/read_index with the files read_index must refuse."""

import os
import struct

import jax
import numpy as np
import pytest
from test_search_kernels import hamming_numpy, naive_topk, pq_numpy, torus_numpy

from geojax import quantize, search
from geojax.search import BinaryCodec, IndexFlat, PQCodec, TorusCodec, read_index, write_index
from geojax.search import io as index_io

pytestmark = pytest.mark.multidevice


def torus_bits_numpy(a, b, bits, p):
    """Wraparound Lp^p of packed b-bit codes, unpacked by numpy (little-endian lanes)."""
    lanes = 8 // bits

    def unpack(x):
        return ((x[..., None] >> (bits * np.arange(lanes))) & ((1 << bits) - 1)).reshape(len(x), -1)

    diff = (unpack(a)[:, None].astype(np.int64) - unpack(b)[None]) % (1 << bits)
    return (np.minimum(diff, (1 << bits) - diff) ** p).sum(-1)


def angles_of(codes, bits=8):
    """Angles in turns whose b-bit torus codes are ``codes`` (code / 2^b)."""
    return np.asarray(quantize.torus_unpack(codes, bits), np.float32) / (1 << bits)


def signs_of(codes):
    """±1 vectors whose sign bits are ``codes``."""
    return 2 * np.asarray(quantize.unpack_bits(codes), np.float32) - 1


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


def added_in_pieces(codec, db, cuts, **options):
    """An index of ``db`` added in pieces at ``cuts`` (uneven shard sizes, growth across adds)."""
    idx = IndexFlat(codec, mesh=options.pop("mesh", mesh()), **options)
    for piece in np.split(db, cuts):
        idx.add_codes(piece)
    return idx


def assert_same(found, ref_d, ref_i):
    d, i = found
    assert isinstance(d, jax.Array) and isinstance(i, jax.Array)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)


@pytest.mark.parametrize("k", [1, 10, 130])
def test_hamming_sharded_equals_numpy_and_single_device(k):
    rng = np.random.default_rng(0)
    q, db = with_ties(rng, 403, 8, 9)
    idx = added_in_pieces(BinaryCodec(64), db, [7, 100, 101])
    assert idx.shard_sizes.sum() == 403 and len(set(idx.shard_sizes)) > 1  # uneven
    if k == 130:
        assert idx.shard_sizes.max() < k  # k larger than every shard
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), k)
    assert_same(idx.search(signs_of(q), k), ref_d, ref_i)
    np.testing.assert_array_equal(np.asarray(search.hamming_topk(q, db, k)[1]), ref_i)


@pytest.mark.parametrize("bits,p", [(8, 1), (8, 2), (4, 1), (4, 2), (2, 1), (1, 1)])
def test_torus_sharded_every_bit_width(bits, p):
    rng = np.random.default_rng(bits * 10 + p)
    q, db = with_ties(rng, 257, 6, 7)
    idx = added_in_pieces(TorusCodec(6 * 8 // bits, bits=bits, p=p), db, [3, 200])
    ref_d, ref_i = naive_topk(torus_bits_numpy(q, db, bits, p), 12)
    assert_same(idx.search(angles_of(q, bits), 12), ref_d, ref_i)
    if bits == 8:
        np.testing.assert_array_equal(torus_bits_numpy(q, db, 8, 1), torus_numpy(q, db))  # the reference


def test_pq_sharded_equals_numpy_adc():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    codec = PQCodec(8, m=4, nbits=3)
    idx = IndexFlat(codec, mesh=mesh())
    idx.train(x)
    codes = codec.encode(x)
    codes[77] = codes[0]  # a tie across the first shard border
    idx.add_codes(codes)
    d, i = idx.search(x[:6], 90)  # k larger than each 75-row shard
    ref_d, ref_i = naive_topk(pq_numpy(x[:6], np.asarray(codec.pq.codebooks), codes), 90)
    np.testing.assert_allclose(d, ref_d, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(i, ref_i)


def test_queries_sharded_over_a_second_axis():
    rng = np.random.default_rng(4)
    q, db = with_ties(rng, 200, 8, 11)  # 11 queries over 2 devices: padded
    idx = added_in_pieces(BinaryCodec(64), db, [], mesh=mesh((2, 2), ("db", "q")), query_axis="q")
    assert idx.shards == 2
    assert_same(idx.search(signs_of(q), 7), *naive_topk(hamming_numpy(q, db), 7))


def test_add_vectors_equals_add_codes_and_build_all():
    rng = np.random.default_rng(5)
    q, db = with_ties(rng, 3000, 16, 5)
    built = added_in_pieces(TorusCodec(16), db, [])
    grown = added_in_pieces(TorusCodec(16), db, [1, 2, 1100, 2900])
    assert grown._capacity < 2 * 3000  # grown by doubling, not by the whole index per add
    from_vectors = IndexFlat(TorusCodec(16), mesh=mesh())
    from_vectors.add(angles_of(db) + 0.001)  # rounds to the same codes
    for other in (grown, from_vectors):
        for a, b in zip(built.search(angles_of(q), 25), other.search(angles_of(q), 25), strict=True):
            np.testing.assert_array_equal(a, b)


def test_user_ids_ties_to_the_lower_id_and_removal():
    rng = np.random.default_rng(8)
    q, db = with_ties(rng, 120, 8, 6)
    ids = rng.permutation(10_000)[:120]  # out of order: the shards are re-sorted by id
    idx = IndexFlat(BinaryCodec(64), mesh=mesh())
    idx.add_codes(db[:50], ids[:50])
    idx.add_codes(db[50:], ids[50:])
    dist = hamming_numpy(q, db)
    order = np.lexsort((np.broadcast_to(ids, dist.shape), dist), axis=1)[:, :15]  # by distance, then id
    assert_same(idx.search(signs_of(q), 15), np.take_along_axis(dist, order, 1), ids[order])
    gone = ids[[0, 60, 119]]
    assert idx.remove_ids(np.concatenate([gone, [10_001]])) == 3 and idx.ntotal == 117
    keep = ~np.isin(ids, gone)
    dist, kept = dist[:, keep], ids[keep]
    order = np.lexsort((np.broadcast_to(kept, dist.shape), dist), axis=1)[:, :15]
    assert_same(idx.search(signs_of(q), 15), np.take_along_axis(dist, order, 1), kept[order])
    idx.add_codes(db[:2])  # default ids continue after the largest
    assert idx.ntotal == 119 and int(idx.search(signs_of(db[1:2]), 1)[1][0, 0]) == ids[1]  # not max + 2
    idx.reset()
    assert idx.ntotal == 0 and idx.shard_sizes.sum() == 0


def test_write_read_round_trip_and_add_after(tmp_path):
    rng = np.random.default_rng(6)
    q, db = with_ties(rng, 500, 4, 6, mask=0x33)
    idx = added_in_pieces(TorusCodec(16, bits=2, p=2), db[:400], [150])
    path = str(tmp_path / "codes.gjx")
    write_index(idx, path)
    loaded = read_index(path, mesh=mesh((2,)))  # another mesh: the ids travel with the rows
    assert (loaded.codec.bits, loaded.codec.p, loaded.ntotal) == (2, 2, 400)
    for a, b in zip(idx.search(angles_of(q, 2), 9), loaded.search(angles_of(q, 2), 9), strict=True):
        np.testing.assert_array_equal(a, b)
    loaded.add_codes(db[400:])
    assert_same(loaded.search(angles_of(q, 2), 9), *naive_topk(torus_bits_numpy(q, db, 2, 2), 9))
    assert not [f for f in os.listdir(tmp_path) if f != "codes.gjx"]  # no temporary file left


@pytest.mark.parametrize("method", ["itq", "pq"])
def test_write_read_trained_codecs(tmp_path, method):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((100, 8)).astype(np.float32)
    codec = PQCodec(8, m=2, nbits=4) if method == "pq" else BinaryCodec(8, bits=16, method="itq")
    idx = IndexFlat(codec, mesh=mesh())
    idx.train(x)
    idx.add(x)
    path = str(tmp_path / "trained.gjx")
    write_index(idx, path)
    loaded = read_index(path, codec=codec.kind)
    np.testing.assert_array_equal(loaded.codec.encode(x), codec.encode(x))
    for a, b in zip(idx.search(x[:4], 5), loaded.search(x[:4], 5), strict=True):
        np.testing.assert_array_equal(a, b)


def test_foreign_newer_and_damaged_files_refused(tmp_path):
    idx = added_in_pieces(BinaryCodec(32), np.arange(40, dtype=np.uint8).reshape(10, 4), [])
    good = tmp_path / "good.gjx"
    write_index(idx, str(good))
    data = good.read_bytes()
    cases = {
        "other.npy": (None, "not a geojax index file"),
        "empty.gjx": (b"", "not a geojax index file"),
        "newer.gjx": (data[:8] + struct.pack("<I", index_io.VERSION + 1) + data[12:], "format version 3"),
        "cut.gjx": (data[:-3], "damaged: it holds"),
        "flipped.gjx": (data[:-1] + bytes([data[-1] ^ 1]), "checksum"),
        "json.gjx": (data[:20] + b"x" + data[21:], "description does not parse"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if content is None:
            np.save(path, np.zeros(3))
        else:
            path.write_bytes(content)
        with pytest.raises(ValueError, match=message):
            read_index(str(path))
    with pytest.raises(ValueError, match="holds a 'flat' index, not the 'ivf'"):
        read_index(str(good), kind="ivf")
    with pytest.raises(ValueError, match="holds 'binary' codes, not the 'torus'"):
        read_index(str(good), codec="torus")
    assert good.read_bytes() == data


def test_bad_arguments_rejected_before_work():
    idx = added_in_pieces(BinaryCodec(32), np.zeros((10, 4), np.uint8), [])
    before = [np.asarray(a) for a in idx.search(np.ones((1, 32), np.float32), 3)]
    with pytest.raises(ValueError, match="codec"):
        IndexFlat("hamming")
    with pytest.raises(ValueError, match="codes must have 4 columns"):
        idx.add_codes(np.zeros((2, 5), np.uint8))
    with pytest.raises(ValueError, match="codes"):
        idx.add_codes(np.zeros((2, 4), np.int32))
    with pytest.raises(ValueError, match="x must have 32 columns"):
        idx.add(np.zeros((2, 31), np.float32))
    with pytest.raises(ValueError, match="x must be finite"):
        idx.add(np.full((2, 32), np.inf, np.float32))
    with pytest.raises(ValueError, match="q must be finite"):
        idx.search(np.full((1, 32), np.nan, np.float32), 1)
    with pytest.raises(ValueError, match="k must be at most 10"):
        idx.search(np.zeros((1, 32), np.float32), 11)
    with pytest.raises(ValueError, match="ids must be distinct"):
        idx.add_codes(np.zeros((2, 4), np.uint8), np.array([3, 3]))
    with pytest.raises(ValueError, match="ids must be new"):
        idx.add_codes(np.zeros((1, 4), np.uint8), np.array([3]))
    with pytest.raises(ValueError, match="db_axis"):
        IndexFlat(BinaryCodec(32), mesh=mesh(), db_axis="rows")
    assert idx.ntotal == 10
    for a, b in zip(before, idx.search(np.ones((1, 32), np.float32), 3), strict=True):
        np.testing.assert_array_equal(a, b)  # nothing changed
    pq = IndexFlat(PQCodec(4, m=2, nbits=2), mesh=mesh())
    with pytest.raises(ValueError, match="trained"):
        pq.add(np.zeros((3, 4), np.float32))
    pq.train(np.random.default_rng(0).standard_normal((20, 4)).astype(np.float32))
    with pytest.raises(ValueError, match="codes"):
        pq.add_codes(np.full((3, 2), 4, np.uint8))  # outside [0, 4)
    assert pq.ntotal == 0
