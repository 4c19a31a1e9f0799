"""Filtered search (``allowed=``) on IndexFlat and IndexIVF against numpy: the flat numpy ranking by
(distance, id) with the masked ids taken out by hand, on random codes with ties, for a mask over ids, a
per-query packed bitset and id ranges; no allowed row and fewer than k give −1; 4 devices equal one; bad
``allowed`` is refused before any work."""

import numpy as np
import pytest
from test_index import mesh
from test_ivf import clustered_angles, numpy_distances, probed_numpy
from tiers import default_tier

from geojax.search import BinaryCodec, IdRanges, IndexFlat, IndexIVF, PQCodec, TorusCodec, filters, flat

pytestmark = pytest.mark.multidevice


def data(case: str, rng):
    """(codec, vectors [400, dim]) with rows 0, 7, 150 and 399 equal (ties across lists and shards)."""
    if case == "torus8":
        codec, x = TorusCodec(8), clustered_angles(rng, 400, 8, rng.random((5, 8)))
    elif case == "binary":
        codec, x = BinaryCodec(16), np.where(rng.random((400, 16)) < 0.5, -1.0, 1.0).astype(np.float32)
    else:
        codec, x = PQCodec(8, m=4, nbits=3), rng.standard_normal((400, 8)).astype(np.float32)
        codec.train(x)
    x[[7, 150, 399]] = x[0]
    return codec, x


def filtered_numpy(dist: np.ndarray, allow: np.ndarray, k: int):
    """Per query, the allowed ids ranked by (distance, id), −1 past them: allow [n] or [Q, n]."""
    out_i, out_d = [], []
    for row in range(len(dist)):
        ok = np.flatnonzero(allow[row] if allow.ndim == 2 else allow)
        order = ok[np.lexsort((ok, dist[row, ok]))][:k]
        out_i.append(np.pad(order, (0, k - len(order)), constant_values=-1))
        out_d.append(dist[row, order])
    return out_d, np.stack(out_i)


def forms(rng, nq: int, n: int):
    """(allowed as given to search, the same as a boolean [n] or [Q, n] mask) for each form."""
    mask = rng.random(n) < 0.4
    mask[[0, 150]] = True  # two of the tied copies
    per = rng.random((nq, n)) < 0.05
    ranges = IdRanges(np.array([3, 140, 390]), np.array([9, 152, 500]))
    by_hand = np.zeros(n, bool)
    by_hand[3:9], by_hand[140:152], by_hand[390:] = True, True, True
    return [(mask, mask), (np.packbits(per, axis=1), per), (ranges, by_hand)]


def check(found, dist, allow, k, integer: bool):
    ref_d, ref_i = filtered_numpy(dist, allow, k)
    d, i = (np.asarray(a) for a in found)
    np.testing.assert_array_equal(i, ref_i)
    big = np.iinfo(np.int32).max if integer else np.inf
    for row, want in enumerate(ref_d):
        np.testing.assert_allclose(d[row, : len(want)], want, rtol=1e-5)
        assert (d[row, len(want) :] == big).all()


@pytest.mark.parametrize("case", default_tier(["torus8", "binary", "pq"], keep=("pq",)))
def test_filtered_search_equals_numpy_by_hand(case):
    rng = np.random.default_rng(0)
    codec, x = data(case, rng)
    q = x[[0, 5, 200, 398]]
    dist = numpy_distances(case, codec, q, codec.encode(x))
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x)
    ivf = IndexIVF(codec, 6, nprobe=6, block=8, mesh=mesh())
    ivf.train(x)
    ivf.add(x)
    for allowed, allow in forms(rng, len(q), len(x)):
        for index in (flat, ivf):
            for k in (1, 12, 60):  # 60: more than a per-query bitset allows (about 20 rows)
                check(index.search(q, k, allowed=allowed), dist, allow, k, case != "pq")


def test_filtered_flat_scan_in_chunks_that_do_not_divide_the_rows(monkeypatch):
    """Chunks of 7 rows: the last one moved back over rows already seen, which must not count twice."""
    monkeypatch.setattr(flat, "_FILTER_ROWS", 7)
    monkeypatch.setattr(flat, "_MIN_CAPACITY", 1)  # shards of exactly 100 rows: the last chunk overlaps rows
    rng = np.random.default_rng(5)
    codec, x = data("binary", rng)
    index = IndexFlat(codec, mesh=mesh())
    index.add(x)
    q = x[[0, 1, 2]]
    dist = numpy_distances("binary", codec, q, codec.encode(x))
    for allowed, allow in forms(rng, len(q), len(x)):
        check(index.search(q, 40, allowed=allowed), dist, allow, 40, True)


def test_filtered_ivf_at_partial_probe_is_the_numpy_scan_of_its_probed_lists():
    rng = np.random.default_rng(1)
    codec, x = data("torus8", rng)
    index = IndexIVF(codec, 8, nprobe=3, block=8, mesh=mesh())
    index.train(x)
    index.add(x)
    q = x[[0, 9, 300]]
    dist = numpy_distances("torus8", codec, q, codec.encode(x))
    mask = rng.random(400) < 0.5
    # The probed lists' rows, then the mask: the scan over the probed lists of the allowed rows only.
    _, probed = probed_numpy(index, q, dist, 400)
    allow = np.zeros((len(q), 400), bool)
    for row, ids in enumerate(probed):
        ids = ids[ids >= 0]
        allow[row, ids] = mask[ids]
    check(index.search(q, 30, allowed=mask), dist, allow, 30, True)


def test_no_allowed_row_and_fewer_than_k_give_minus_one():
    rng = np.random.default_rng(2)
    codec, x = data("binary", rng)
    q = x[:3]
    for index in (IndexFlat(codec, mesh=mesh()), IndexIVF(codec, 4, nprobe=4, mesh=mesh())):
        if isinstance(index, IndexIVF):
            index.train(x)
        index.add(x)
        d, i = (np.asarray(a) for a in index.search(q, 5, allowed=np.zeros(400, bool)))
        assert (i == -1).all() and (d == np.iinfo(np.int32).max).all()
        d, i = (
            np.asarray(a) for a in index.search(q, 5, allowed=IdRanges(np.array([398]), np.array([1000])))
        )
        assert (np.sort(i[:, :2], axis=1) == [398, 399]).all() and (i[:, 2:] == -1).all()


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_sharded_filtered_search_equals_one_device(kind):
    rng = np.random.default_rng(3)
    codec, x = data("torus8", rng)
    per_query = forms(rng, 9, 400)[1][0]
    results = []
    for devices in (1, 4):
        if kind == "flat":
            index = IndexFlat(codec, mesh=mesh((devices,)))
        else:
            index = IndexIVF(codec, 6, nprobe=2, block=8, mesh=mesh((devices,)))
            index.train(x)
        index.add(x)
        results.append([np.asarray(a) for a in index.search(x[:9], 20, allowed=per_query)])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_allowed_is_refused_before_any_work():
    rng = np.random.default_rng(4)
    codec, x = data("torus8", rng)
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x)
    ivf = IndexIVF(codec, 4, nprobe=2, mesh=mesh())
    ivf.train(x)
    ivf.add(x)
    cases = [
        (np.zeros((2, 400), bool), "allowed must have rank 1"),
        (np.zeros((2, 50), np.uint8), r"allowed as a per-query bitset must be uint8 \[Q = 3"),
        (np.zeros((3, 0), np.uint8), "allowed as a per-query bitset"),
        (np.zeros(400, np.int32), "allowed must be a boolean mask"),
        ([True, False], "allowed must be a boolean mask"),
        (IdRanges(np.array([5]), np.array([2])), "allowed ranges must satisfy"),
        (IdRanges(np.array([5, 6]), np.array([9])), "allowed.starts and allowed.stops"),
        (IdRanges(np.array([0.5]), np.array([9])), "allowed.starts"),
    ]
    for index in (flat, ivf):
        before = index.nbytes if isinstance(index, IndexIVF) else index.ntotal
        for allowed, message in cases:
            with pytest.raises(ValueError, match=message):
                index.search(x[:3], 5, allowed=allowed)
        assert before == (index.nbytes if isinstance(index, IndexIVF) else index.ntotal)


def test_bits_are_numpys_packbits_order():
    mask = np.zeros((2, 19), bool)
    mask[0, [0, 9, 18]] = True
    mask[1, [7]] = True
    bits = filters.allowed_bits(np.packbits(mask, axis=1), 2, 19)
    got = np.asarray(filters.is_allowed(bits, np.arange(2)[:, None], np.arange(19)[None]))
    np.testing.assert_array_equal(got, mask)
    assert not np.asarray(
        filters.is_allowed(bits, np.zeros(1, int), np.array([24, np.iinfo(np.int32).max]))
    ).any()
