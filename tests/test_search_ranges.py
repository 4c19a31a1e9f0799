"""Range search (``range_search``) on IndexFlat and IndexIVF against numpy: every row strictly nearer than the
radius — Hamming bits, wraparound L1 and squared L2 in code units, PQ distance — ascending, ties to the lower
id, in faiss's (lims, D, I) shape, on random codes with ties; a radius whose results pass ``max_results`` is
refused, never truncated."""

import numpy as np
import pytest
from test_index import mesh, torus_bits_numpy
from test_ivf import numpy_distances, probed_numpy
from test_search_filters import data
from tiers import default_tier

from geojax import search
from geojax.search import IndexFlat, IndexIVF, TorusCodec

pytestmark = pytest.mark.multidevice


def ranges_numpy(dist: np.ndarray, radius: float):
    """(lims, D, I) by numpy: each query's rows with dist < radius, by (distance, id)."""
    lims, d, i = [0], [], []
    for row in dist:
        ok = np.flatnonzero(row < radius)
        ok = ok[np.lexsort((ok, row[ok]))]
        lims.append(lims[-1] + len(ok))
        d.append(row[ok])
        i.append(ok)
    return np.array(lims), np.concatenate(d), np.concatenate(i)


def assert_ranges(found, want, integer: bool):
    lims, d, i = found
    assert lims.dtype == np.int64 and i.dtype == np.int64 and d.dtype == (np.int32 if integer else np.float32)
    np.testing.assert_array_equal(lims, want[0])
    np.testing.assert_array_equal(i, want[2])
    np.testing.assert_allclose(d, want[1], rtol=1e-5)


@pytest.mark.parametrize("case", default_tier(["torus8", "torus4-L2", "binary", "pq"], keep=("binary",)))
def test_range_search_equals_numpy(case):
    rng = np.random.default_rng(0)
    if case == "torus4-L2":
        codec, x = TorusCodec(8, bits=4, p=2), data("torus8", rng)[1]
        codes = codec.encode(x)
        dist = torus_bits_numpy(codec.encode(x[:5]), codes, 4, 2)  # squared L2 in code units
    else:
        codec, x = data(case, rng)
        dist = numpy_distances(case, codec, x[:5], codec.encode(x))
    q = x[:5]  # query 0 and rows 0, 7, 150, 399 are equal: ties at distance 0
    flat = IndexFlat(codec, mesh=mesh())
    flat.add(x)
    ivf = IndexIVF(codec, 6, nprobe=6, block=8, mesh=mesh())
    ivf.train(x)
    ivf.add(x)
    for quantile in (0.0, 0.02, 0.3):  # no row (radius = the smallest distance), a few, more than 64 a query
        radius = float(np.quantile(dist, quantile, method="lower"))  # a distance: rows at it are left out
        if case == "pq":  # float32 against numpy's float64: halfway to the next distance, off every row
            radius = (radius + dist[dist > radius + 1e-4].min()) / 2 if quantile else radius - 1e-4
        want = ranges_numpy(dist, radius)
        for index in (flat, ivf):
            assert_ranges(index.range_search(q, radius), want, case != "pq")
    assert want[0][-1] > 5 * 64  # the last radius needed rounds past the first k


def test_ivf_range_search_at_partial_probe_is_over_the_probed_lists():
    rng = np.random.default_rng(1)
    codec, x = data("binary", rng)
    index = IndexIVF(codec, 8, nprobe=2, block=8, mesh=mesh())
    index.train(x)
    index.add(x)
    q = x[[0, 9, 300]]
    dist = numpy_distances("binary", codec, q, codec.encode(x))
    _, probed = probed_numpy(index, q, dist, 400)
    outside = np.ones_like(dist, bool)
    for row, ids in enumerate(probed):
        outside[row, ids[ids >= 0]] = False
    radius = 7
    assert_ranges(index.range_search(q, radius), ranges_numpy(np.where(outside, radius, dist), radius), True)


def test_a_radius_past_max_results_is_refused_not_truncated():
    rng = np.random.default_rng(2)
    codec, x = data("torus8", rng)
    index = IndexFlat(codec, mesh=mesh())
    index.add(x)
    dist = numpy_distances("torus8", codec, x[:4], codec.encode(x))
    radius = float(np.quantile(dist, 0.5))
    total = int((dist < radius).sum())
    lims, _, _ = index.range_search(x[:4], radius, max_results=total)  # exactly enough
    assert lims[-1] == total
    for max_results in (total - 1, 10):
        with pytest.raises(ValueError, match=f"max_results = {max_results} is exceeded"):
            index.range_search(x[:4], radius, max_results=max_results)
    for radius_, message in ((float("nan"), "radius must be a number"), ("3", "radius must be a real")):
        with pytest.raises(ValueError, match=message):
            index.range_search(x[:4], radius_)
    with pytest.raises(ValueError, match="max_results"):
        index.range_search(x[:4], 3, max_results=0)
    empty = IndexFlat(codec, mesh=mesh())
    lims, d, i = empty.range_search(x[:2], 100)
    assert lims.tolist() == [0, 0, 0] and len(d) == len(i) == 0
    np.testing.assert_array_equal(
        np.asarray(search.torus_distances(codec.encode(x[:4]), codec.encode(x))), dist
    )
