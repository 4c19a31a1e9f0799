"""geojax.search.IndexIVF: at nprobe = nlist exactly the flat index (ids, distances, ties), at smaller nprobe
a numpy scan of the probed lists, sharded over 4 fake devices = one device, the circular k-means on the
torus, adds in steps and growth without retraining, write/read, and every bad input refused unchanged."""

import logging

import jax
import numpy as np
import pytest
from test_index import mesh
from test_search_kernels import hamming_numpy, pq_numpy
from tiers import default_tier

from geojax.search import (
    BinaryCodec,
    IndexFlat,
    IndexIVF,
    PQCodec,
    TorusCodec,
    coarse,
    ivf,
    ivf_scan,
    merge,
    read_index,
    write_index,
)
from geojax.search import flat as flat_module

pytestmark = pytest.mark.multidevice


def clustered_angles(rng, n, dim, centres, spread=0.04):
    """Angles in turns near ``centres`` [c, dim] (each row near one centre), wrapped to [0, 1)."""
    pick = rng.integers(0, len(centres), n)
    return np.mod(centres[pick] + spread * rng.standard_normal((n, dim)), 1.0).astype(np.float32)


def with_duplicates(x):
    """x with rows 5, 50 and the last equal to row 0, and row 7 equal to row 3: ties across lists' blocks."""
    x = x.copy()
    x[[5, 50, len(x) - 1]] = x[0]
    x[7] = x[3]
    return x


def codecs_and_data(rng):
    centres = rng.random((6, 16))
    torus = clustered_angles(rng, 700, 16, centres)
    signs = np.where(clustered_angles(rng, 700, 32, rng.random((6, 32))) < 0.5, -1.0, 1.0).astype(np.float32)
    floats = rng.standard_normal((700, 8)).astype(np.float32) + np.repeat(rng.standard_normal((7, 8)), 100, 0)
    return {
        "torus8": (TorusCodec(16), with_duplicates(torus)),
        "torus4-L2": (TorusCodec(16, bits=4, p=2), with_duplicates(torus)),
        "binary": (BinaryCodec(32), with_duplicates(signs)),
        "itq": (BinaryCodec(8, bits=16, method="itq"), with_duplicates(floats)),
        "pq": (PQCodec(8, m=4, nbits=4), with_duplicates(floats)),
        "pq-sphere": (PQCodec(8, m=4, nbits=4, geometry="sphere"), with_duplicates(floats)),
    }


CASES = ["torus8", "torus4-L2", "binary", "itq", "pq", "pq-sphere"]


def built(codec, x, nlist, *, devices=4, block=8, nprobe=None):
    index = IndexIVF(codec, nlist, nprobe=nprobe or nlist, block=block, mesh=mesh((devices,)))
    index.train(x)
    index.add(x[:300])
    index.add(x[300:])
    return index


@pytest.mark.parametrize("case", default_tier(CASES, keep=("torus8", "pq", "pq-sphere")))
def test_full_probe_equals_flat_exactly(case):
    codec, x = codecs_and_data(np.random.default_rng(0))[case]
    index = built(codec, x, 9)
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x)
    q = x[[0, 3, 11, 200, 699]]
    for k in (1, 40):  # 40 > block: a list's candidates from several blocks
        want_d, want_i = flat.search(q, k)
        got_d, got_i = index.search(q, k)
        np.testing.assert_array_equal(np.asarray(got_i), np.asarray(want_i))
        np.testing.assert_array_equal(np.asarray(got_d), np.asarray(want_d))
    d, i = (np.asarray(a)[0] for a in flat.search(q[:1], 40))
    tied = i[d == d[list(i).index(0)]].tolist()  # row 0's copies (and any equal code): ties to the lower id
    assert tied == sorted(tied) and ({0, 5, 50, 699} <= set(tied) or tied[-1] == i[-1])


def lists_of(index):
    """Each list's ids [n_l] (this process's rows), from the index's own description (``state``)."""
    _, arrays = index.state()
    return np.split(arrays["ids"], np.cumsum(arrays["list_sizes"])[:-1])


def probed_numpy(index, q, dist, k):
    """Reference for nprobe < nlist: the rows of the nprobe lists whose centroids are nearest (numpy),
    ranked by (distance, id); −1 beyond the candidates."""
    c = np.asarray(index.centroids, np.float64)
    f = np.asarray(index.codec.coarse_queries(q), np.float64)
    score = ((f[:, None] - c[None]) ** 2).sum(-1)
    lists = np.argsort(score, axis=1, kind="stable")[:, : index.nprobe]
    out_d, out_i, held = [], [], lists_of(index)
    for row, probe in enumerate(lists):
        ids = np.sort(np.concatenate([held[j] for j in probe]).astype(np.int64))
        order = np.lexsort((ids, dist[row, ids]))[:k]
        out_i.append(np.pad(ids[order], (0, k - len(order)), constant_values=-1))
        out_d.append(dist[row, ids[order]])
    return out_d, np.stack(out_i)


def numpy_distances(case: str, codec, q: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """[Q, N] distances of the query vectors to the codes by numpy: wraparound L1 of 8-bit torus codes,
    Hamming of bits, PQ's asymmetric distance."""
    if case == "torus8":
        return np.abs(((codec.encode(q)[:, None].astype(np.int64) - codes[None]) + 128) % 256 - 128).sum(-1)
    if case == "binary":
        return hamming_numpy(codec.encode(q), codes)
    return pq_numpy(q, np.asarray(codec.pq.codebooks), codes)


@pytest.mark.parametrize("case", ["torus8", "binary", "pq"])
def test_partial_probe_equals_numpy_over_the_probed_lists(case):
    codec, x = codecs_and_data(np.random.default_rng(1))[case]
    index = built(codec, x, 12, nprobe=3)
    q = x[[0, 9, 300, 650]]
    codes = codec.encode(x)
    dist = numpy_distances(case, codec, q, codes)
    ref_d, ref_i = probed_numpy(index, q, dist, 20)
    d, i = index.search(q, 20)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    for row, want in enumerate(ref_d):
        np.testing.assert_allclose(np.asarray(d)[row, : len(want)], want, rtol=1e-5)


@pytest.mark.parametrize("case", ["torus8", "pq"])
def test_sharded_equals_one_device(case):
    codec, x = codecs_and_data(np.random.default_rng(2))[case]
    one, four = (built(codec, x, 10, devices=n, nprobe=4) for n in (1, 4))
    np.testing.assert_array_equal(np.asarray(one.centroids), np.asarray(four.centroids))
    q = x[::37]
    for a, b in zip(one.search(q, 25), four.search(q, 25), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_torus_quantiser_wraps_around():
    """Two clusters at angle 0 (straddling 0 ≡ 1) and at 0.5: the circular k-means keeps each whole, with
    centroids at their circular means; k-means on the raw angles would split the first."""
    rng = np.random.default_rng(3)
    x = clustered_angles(rng, 600, 8, np.array([[0.0] * 8, [0.5] * 8]), spread=0.05)
    index = IndexIVF(TorusCodec(8), 2, mesh=mesh((1,)))
    index.train(x)
    index.add(x)
    near_zero = np.abs(((x + 0.5) % 1.0) - 0.5).max(1) < 0.25
    lists = coarse.assign(index.codec.coarse(index.codec.encode(x)), index.centroids)
    assert len(set(lists[near_zero])) == 1 and len(set(lists[~near_zero])) == 1
    assert lists[near_zero][0] != lists[~near_zero][0]
    c = np.asarray(index.centroids).reshape(2, 8, 2)
    angles = np.mod(np.arctan2(c[..., 1], c[..., 0]) / (2 * np.pi), 1.0)
    zero = angles[lists[near_zero][0]]
    assert np.all(np.minimum(zero, 1 - zero) < 0.02)  # the circular mean, not 0.5
    assert np.allclose(np.linalg.norm(c, axis=-1), 1.0, atol=1e-5)  # unit pairs


def test_adds_in_steps_grow_without_retraining(monkeypatch):
    monkeypatch.setattr(ivf, "_ADD_ROWS", 64)  # several steps per add
    rng = np.random.default_rng(4)
    x = clustered_angles(rng, 900, 16, rng.random((5, 16)))
    index = IndexIVF(TorusCodec(16), 6, nprobe=6, block=16, mesh=mesh())
    index.train(x[:200])
    centroids = np.asarray(index.centroids)
    for piece in np.split(x, [100, 101, 500]):
        index.add(piece)
    np.testing.assert_array_equal(np.asarray(index.centroids), centroids)
    assert index.ntotal == 900 and index.list_sizes.sum() == 900
    from_codes = IndexIVF(TorusCodec(16), 6, nprobe=6, block=16, mesh=mesh())
    from_codes.centroids = index.centroids
    from_codes.add_codes(TorusCodec(16).encode(x))
    flat = IndexFlat(TorusCodec(16), mesh=mesh())
    flat.add(x)
    for other in (from_codes, flat):
        for a, b in zip(index.search(x[:7], 30), other.search(x[:7], 30), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_fewer_candidates_than_k_give_minus_one():
    rng = np.random.default_rng(5)
    x = clustered_angles(rng, 200, 8, np.array([[0.0] * 8, [0.5] * 8]), spread=0.02)
    index = built(TorusCodec(8), x, 2, nprobe=1)
    probed = int(coarse.assign(index.codec.coarse_queries(x[:1]), index.centroids)[0])
    n = int(index.list_sizes[probed])
    assert 0 < n < 150
    d, i = (np.asarray(a) for a in index.search(x[:1], 150))
    assert (i[0, :n] >= 0).all() and np.isin(i[0, :n], lists_of(index)[probed]).all()
    assert (i[0, n:] == -1).all() and (d[0, n:] == np.iinfo(np.int32).max).all()


def test_devices_without_probed_segments_scan_none_and_agree_with_flat():
    """Four lists of one segment each, one on each of 4 devices: a query's one probed list lies on one
    device, and the other three have no unit to scan (their loop's trip count is zero); the search is still
    the numpy scan of the probed list, and at full probe exactly the flat index's."""
    rng = np.random.default_rng(6)
    x = clustered_angles(rng, 48, 8, rng.random((4, 8)))
    index = built(TorusCodec(8), x, 4, block=32, nprobe=1)
    layout = index._layout()
    assert (np.diff(layout.starts, axis=1).sum(1) == 1).all()  # one segment on each device
    probe = coarse.nearest_lists(index.codec.coarse_queries(x[:1]), index.centroids, 1)
    plan, *_ = ivf_scan.schedule(np.asarray(probe), layout.starts, 32, 8)
    assert sorted(plan.units.tolist()) == [0, 0, 0, 1]
    k = int(index.list_sizes[int(probe[0, 0])])
    dist = numpy_distances("torus8", index.codec, x[:1], index.codec.encode(x))
    ref_d, ref_i = probed_numpy(index, x[:1], dist, k)
    d, i = index.search(x[:1], k)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    np.testing.assert_array_equal(np.asarray(d)[0], ref_d[0])
    index.nprobe = 4
    flat = IndexFlat(TorusCodec(8), mesh=mesh())
    flat.add(x)
    for got, want in zip(index.search(x[:6], 20), flat.search(x[:6], 20), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_remove_reset_write_read(tmp_path):
    codec, x = codecs_and_data(np.random.default_rng(6))["pq"]
    index = built(codec, x, 8, nprobe=3)
    assert index.remove_ids(np.array([0, 5, 10_000])) == 2 and index.ntotal == 698
    d, i = index.search(x[:4], 12)
    assert not np.isin(np.asarray(i), [0, 5]).any()
    path = str(tmp_path / "ivf.gjx")
    write_index(index, path)
    loaded = read_index(path, kind="ivf", codec="pq", mesh=mesh((2,)))
    assert (loaded.nlist, loaded.nprobe, loaded.ntotal) == (8, 3, 698)
    for a, b in zip((d, i), loaded.search(x[:4], 12), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    loaded.add(x[:1])  # grows after reading, ids after the largest
    assert loaded.ntotal == 699 and 700 in np.concatenate(lists_of(loaded))
    with pytest.raises(ValueError, match="holds a 'ivf' index, not the 'flat'"):
        read_index(path, kind="flat")
    index.reset()
    assert index.ntotal == 0 and index.is_trained


def test_bad_inputs_refused_and_nothing_changed():
    rng = np.random.default_rng(7)
    x = clustered_angles(rng, 100, 8, rng.random((3, 8)))
    index = IndexIVF(TorusCodec(8), 4, nprobe=2, mesh=mesh())
    with pytest.raises(ValueError, match="trained"):
        index.search(x[:1], 1)
    with pytest.raises(ValueError, match="trained"):
        index.add(x)
    with pytest.raises(ValueError, match="at least nlist = 4 rows"):
        index.train(x[:3])
    index.train(x)
    index.add(x)
    before = [np.asarray(a) for a in index.search(x[:2], 5)]
    bad = x[:2].copy()
    bad[1, 3] = np.nan
    cases = [
        (lambda: index.search(bad, 5), "q must be finite"),
        (lambda: index.search(np.where(np.isnan(bad), np.inf, bad), 5), "q must be finite"),
        (lambda: index.add(bad), "x must be finite"),
        (lambda: index.add(x[:, :7]), "x must have 8 columns"),
        (lambda: index.search(x[:1, :6], 5), "q must have 8 columns"),
        (lambda: index.add_codes(np.zeros((2, 9), np.uint8)), "codes must have 8 columns"),
        (lambda: index.add_codes(np.zeros((2, 8), np.int32)), "codes"),
        (lambda: index.search(x[:1], 101), "k must be at most 100"),
        (lambda: index.add(x[:2], ids=np.array([3, 4])), "ids must be new"),
        (lambda: setattr(index, "nprobe", 5), "nprobe must be at most nlist = 4"),
        (lambda: IndexIVF(TorusCodec(8), 0), "nlist"),
        (lambda: IndexIVF("torus", 4), "codec"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    assert index.ntotal == 100 and index.nprobe == 2
    for a, b in zip(before, index.search(x[:2], 5), strict=True):
        np.testing.assert_array_equal(a, np.asarray(b))


def slots(sizes, shards, segment):
    """Row slots of lists of ``sizes`` in segments of ``segment`` rows dealt evenly over ``shards``."""
    segments = int(np.ceil(np.asarray(sizes) / segment).sum())
    return shards * max(1, -(-segments // shards)) * segment


@pytest.mark.parametrize(
    "sizes,shards",
    [([1000, 1000, 10], 1), ([300, 0, 500], 2), ([3], 1), ([0, 0], 2), ([5000, 4, 70, 900, 1200], 4)],
)
def test_the_segment_chosen_pads_at_most_8_percent_and_is_the_largest_that_does(sizes, shards):
    segment = ivf_scan.segment_rows(np.array(sizes), shards)
    rows = sum(sizes)
    assert segment & (segment - 1) == 0 and 1 <= segment <= 1024
    if segment > 1:
        assert slots(sizes, shards, segment) <= 1.08 * rows
    if segment < 1024:  # the next size up pads more
        assert slots(sizes, shards, 2 * segment) > 1.08 * rows


def test_the_segment_chosen_from_the_lists_gives_the_results_of_any_fixed_segment():
    codec, x = codecs_and_data(np.random.default_rng(0))["torus8"]
    auto = built(codec, x, 9, block=None, nprobe=3)
    assert auto._layout().segment == ivf_scan.segment_rows(auto.list_sizes, 4)
    q = x[[0, 3, 11, 200, 699]]
    for block in (1, 8, 64):
        fixed = built(codec, x, 9, block=block, nprobe=3)
        fixed.centroids = auto.centroids  # the same lists
        fixed.reset()
        fixed.add(x)
        auto.reset()
        auto.add(x)
        for got, want_ in zip(auto.search(q, 20), fixed.search(q, 20), strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want_))


@pytest.mark.parametrize("case", default_tier(["torus8", "binary", "pq"], keep=("torus8",)))
def test_memory_is_the_codes_ids_and_at_most_10_percent_more(case):
    """``nbytes`` counts what the index holds (the device arrays' own sizes, the host's tables and the
    centroids), and that is at most (code bytes + 4-byte id) · 1.1 a row; the rows live only on the devices
    once laid out (the host keeps no copy), and a search adds nothing held."""
    rng = np.random.default_rng(9)
    codec, x = codecs_and_data(rng)[case]
    x = np.concatenate([x] * 6)  # 4,200 rows
    index = IndexIVF(codec, 8, nprobe=2, mesh=mesh((4,)))
    index.train(x)
    index.add(x)
    bound = len(x) * (codec.width + 4) * 1.1
    before = index.nbytes
    index.search(x[:3], 5)
    layout = index._layout()
    held = layout.codes.nbytes + layout.ids.nbytes
    assert index._pending == [] and held >= len(x) * (codec.width + 4)
    assert index.nbytes == held + layout.starts.nbytes + index.list_sizes.nbytes + index.centroids.nbytes
    assert before == index.nbytes <= bound


@pytest.mark.parametrize("case", default_tier(["torus8", "binary", "pq"], keep=("binary",)))
def test_heavy_ties_go_to_the_lowest_ids(case):
    """600 rows that are 4 distinct vectors, under shuffled ids up to 2^31 − 2, in lists of several blocks
    on 4 devices: every distance is tied hundreds of times, so only a scan that ranks each block, list and
    device by (distance, id) returns the flat index's ids; at nprobe < nlist, the numpy scan's."""
    rng = np.random.default_rng(8)
    codec, x = codecs_and_data(rng)[case]
    x = x[rng.choice(np.arange(100), 4, replace=False)][rng.integers(0, 4, 600)]
    ids = rng.choice(np.iinfo(np.int32).max - 1, 600, replace=False)
    ids[:3] = [np.iinfo(np.int32).max - 2, 0, 1 << 24]
    index = IndexIVF(codec, 6, nprobe=6, block=8, mesh=mesh((4,)))
    index.train(x)
    index.add(x[:250], ids=ids[:250])
    index.add(x[250:], ids=ids[250:])
    assert (index.list_sizes > 16).sum() >= 2  # lists of several blocks on several devices
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x, ids=ids)
    q = x[:5]
    for k in (1, 40, 170):  # within a block; over 32 candidates (top_k, ordered by counting); over 64 (sort)
        want_d, want_i = (np.asarray(a) for a in flat.search(q, k))
        got_d, got_i = (np.asarray(a) for a in index.search(q, k))
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_array_equal(got_d, want_d)
        assert (np.diff(got_i, axis=1)[np.diff(got_d, axis=1) == 0] > 0).all()  # ties ascend by id
    index.nprobe = 2
    codes = codec.encode(x)
    dist = numpy_distances(case, codec, q, codes)
    sorted_ids = np.argsort(ids)
    c = np.asarray(index.centroids, np.float64)
    f = np.asarray(codec.coarse_queries(q), np.float64)
    lists = np.argsort(((f[:, None] - c[None]) ** 2).sum(-1), axis=1, kind="stable")[:, :2]
    d, i = (np.asarray(a) for a in index.search(q, 60))
    held = lists_of(index)
    for row, probe in enumerate(lists):
        cand = np.sort(np.concatenate([held[j] for j in probe]).astype(np.int64))
        rows = sorted_ids[np.searchsorted(ids[sorted_ids], cand)]  # the rows of dist holding these ids
        order = np.lexsort((cand, dist[row, rows]))[:60]
        want = np.pad(cand[order], (0, 60 - len(order)), constant_values=-1)
        np.testing.assert_array_equal(i[row], want)


def test_indexes_rank_as_their_devices_not_the_default_backend(monkeypatch):
    # Indexes on CPU devices in a process whose default backend is a GPU: their (distance, id) merges take
    # the CPU's two-top_k path (merge._largest), chosen from the mesh, and give the same results.
    codec, x = codecs_and_data(np.random.default_rng(3))["torus8"]
    q = x[[0, 3, 200]]
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x)
    want = [np.asarray(a) for a in flat.search(q, 40)]
    calls = []
    largest = merge._largest
    monkeypatch.setattr(merge, "_largest", lambda v, k: calls.append(k) or largest(v, k))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    ivf._search_program.cache_clear()  # programs are shared by indexes of one shape: trace anew
    flat_module._functions.cache_clear()
    for idx in (built(codec, x, 5), IndexFlat(codec, mesh=mesh())):  # new indexes: traced under the patch
        if idx.ntotal == 0:
            idx.add(x)
        calls.clear()
        for got, ref in zip(idx.search(q, 40), want, strict=True):
            np.testing.assert_array_equal(np.asarray(got), ref)
        assert calls, type(idx).__name__


def test_indexes_of_one_shape_share_their_compiled_searches(caplog):
    # An index rebuilt from another's state (as read_index does) on an equal mesh searches with the programs
    # the first one compiled: nothing is compiled for its search.
    codec, x = codecs_and_data(np.random.default_rng(4))["binary"]
    q = x[[1, 50, 400]]
    for index in (built(codec, x, 6, nprobe=2), IndexFlat(codec, mesh=mesh((4,)))):
        if index.ntotal == 0:
            index.add(x)
        want = [np.asarray(a) for a in index.search(q, 7)]
        meta, arrays = index.state()
        copy = type(index).from_state(codec, meta, arrays, mesh=mesh((4,)))
        caplog.clear()
        with jax.log_compiles(), caplog.at_level(logging.WARNING):
            got = copy.search(q, 7)
        compiled = [r.getMessage() for r in caplog.records if "ompil" in r.getMessage()]
        assert not compiled, (type(index).__name__, compiled)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(a), b)


def decoded_numpy(case: str, codec, x: np.ndarray) -> np.ndarray:
    """What the codec's codes of x stand for, by numpy: 4-bit angles round(16·t) mod 16 / 16, signs as ±1
    (sign(0) = +1), PQ's centroids of each sub-space concatenated."""
    if case == "torus4-L2":
        return (np.round(x.astype(np.float64) * 16) % 16 / 16).astype(np.float32)
    if case == "binary":
        return np.where(x >= 0, 1.0, -1.0).astype(np.float32)
    books, codes = np.asarray(codec.pq.codebooks), codec.encode(x)
    return np.concatenate([books[j][codes[:, j]] for j in range(codes.shape[1])], axis=1)


@pytest.mark.parametrize("case", ["torus4-L2", "binary", "pq"])
def test_reconstruct_is_the_decode_of_the_stored_codes_and_refuses_unknown_ids(case):
    codec, x = codecs_and_data(np.random.default_rng(10))[case]
    index = built(codec, x, 6, nprobe=2)  # 4 devices; trains the codec
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x)
    ids = np.array([699, 0, 5, 350, 5])  # any order, a repeat
    want = decoded_numpy(case, codec, x[ids])
    for idx in (index, flat):
        np.testing.assert_allclose(idx.reconstruct(ids), want, rtol=1e-6, atol=1e-6)
        with pytest.raises(ValueError, match=r"ids must be ids in the index: 1 are not \(e.g. \[700\]\)"):
            idx.reconstruct(np.array([3, 700]))
        with pytest.raises(ValueError, match="ids must have rank 1"):
            idx.reconstruct(ids[None])
        idx.remove_ids(np.array([5]))
        with pytest.raises(ValueError, match=r"\[5\]"):
            idx.reconstruct(np.array([5]))
