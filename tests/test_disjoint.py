"""Korman 2021's metric-learning protocol (§3.2.1: train on the first half of the classes, retrieve among the
other half) and its compressed-code evaluation (§2.4, eq. 3): against numpy loops on small arrays."""

import numpy as np
import pytest

from geojax import similarity
from geojax.models import Outputs
from train.app import config, data, report
from train.app.errors import UsageError


def _dataset(seed=0, n_train=40, n_test=30, classes=6):
    rng = np.random.default_rng(seed)
    return data.Dataset(
        "toy",
        rng.random((n_train, 3, 3, 1), dtype=np.float32),
        (np.arange(n_train) % classes).astype(np.int32),
        rng.random((n_test, 3, 3, 1), dtype=np.float32),
        (np.arange(n_test) % classes).astype(np.int32),
    )


def test_disjoint_split_sees_no_retrieval_class_in_training():
    ds = _dataset()
    split = data.disjoint_classes(ds)
    assert set(split.train_y.tolist()) == {0, 1, 2} and set(split.test_y.tolist()) == {3, 4, 5}
    assert not set(split.train_y.tolist()) & set(split.test_y.tolist())
    np.testing.assert_array_equal(split.train_x, ds.train_x[ds.train_y < 3])
    np.testing.assert_array_equal(split.test_x, ds.test_x[ds.test_y >= 3])
    one_class = data.Dataset("one", ds.train_x, ds.train_y, ds.test_x[:1], np.array([5], np.int32))
    with pytest.raises(UsageError, match="at least two classes"):
        data.disjoint_classes(one_class)
    with pytest.raises(UsageError, match="no probe"):
        config.make(preset="mtriplet", classes="disjoint", probe="linear")


def _compressed_loop(ca, qa, cb, qb):
    """d_M on compressed codes by hand: ‖coords of the most probable chart‖ apart where the charts agree."""
    out = np.full((len(ca), len(cb)), np.inf)
    for i in range(len(ca)):
        for j in range(len(cb)):
            a, b = int(np.argmax(qa[i])), int(np.argmax(qb[j]))
            if a == b:
                out[i, j] = np.linalg.norm(ca[i, a] - cb[j, b])
    return out


def test_compressed_distance_against_a_loop():
    rng = np.random.default_rng(1)
    ca, cb = rng.normal(size=(7, 4, 2)).astype(np.float32), rng.normal(size=(9, 4, 2)).astype(np.float32)
    qa, qb = rng.dirichlet(np.ones(4), 7).astype(np.float32), rng.dirichlet(np.ones(4), 9).astype(np.float32)
    got = np.asarray(similarity.compressed_manifold_distance(ca, qa, cb, qb))
    want = _compressed_loop(ca, qa, cb, qb)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-5, atol=1e-6)
    # soft memberships differ from the compressed code: d_M mixes every shared chart
    soft = np.asarray(similarity.manifold_distance(ca, qa, cb, qb))
    assert np.isfinite(soft).all() and not np.allclose(soft[np.isfinite(want)], want[np.isfinite(want)])
    qa[0, 0] = np.nan
    assert np.isnan(np.asarray(similarity.compressed_manifold_distance(ca, qa, cb, qb))[0]).all()


def test_disjoint_report_retrieves_among_the_unseen_test_images_on_the_compressed_code():
    """R@1 within the test set (each query against the rest) on the compressed code, and the raw pixels
    under the same protocol, against leave-one-out loops."""
    rng = np.random.default_rng(2)
    split = data.disjoint_classes(_dataset(seed=3))
    n, charts = len(split.test_y), 3
    coords = rng.normal(size=(n, charts, 2)).astype(np.float32)
    q = rng.dirichlet(np.ones(charts), n).astype(np.float32)
    out = Outputs(embedding=np.zeros((n, 2), np.float32), coords=coords, q=q, projection=None)
    train = Outputs(
        embedding=np.zeros((len(split.train_y), 2), np.float32), coords=None, q=None, projection=None
    )
    cfg = config.make(preset="mtriplet", charts=charts, classes="disjoint", dataset="digits")
    rep = report.retrieval_report(cfg, out, train, split)

    def loo_r1(dist):
        dist = dist.copy()
        np.fill_diagonal(dist, np.inf)
        hits = [
            split.test_y[np.argmin(d)] == split.test_y[i] for i, d in enumerate(dist) if np.isfinite(d).any()
        ]
        return float(np.mean(hits))

    compressed = _compressed_loop(coords, q, coords, q)
    assert rep["compressed_recall_at_k"]["1"] == pytest.approx(loo_r1(compressed))
    soft = np.asarray(similarity.manifold_distance(coords, q, coords, q))
    assert rep["recall_at_k"]["1"] == pytest.approx(loo_r1(soft))
    pixels = split.test_x.reshape(n, -1).astype(np.float64)
    raw = np.linalg.norm(pixels[:, None] - pixels[None], axis=-1)
    assert rep["baseline_raw_1nn"]["precision_at_1"] == pytest.approx(loo_r1(raw))


def test_pca_recall_is_leave_one_out_among_the_unseen_classes():
    from train.reproduce import atlas

    ds = _dataset(seed=4, n_train=60, n_test=48)
    split = data.disjoint_classes(ds)
    train = split.train_x.reshape(len(split.train_x), -1).astype(np.float64)
    test = split.test_x.reshape(len(split.test_x), -1).astype(np.float64)
    centre = train.mean(0)
    _, vectors = np.linalg.eigh(np.cov(train - centre, rowvar=False))
    code = (test - centre) @ vectors[:, ::-1][:, :2]  # fitted on the seen classes' training images alone
    dist = np.linalg.norm(code[:, None] - code[None], axis=-1)
    np.fill_diagonal(dist, np.inf)
    want = np.mean(split.test_y[np.argmin(dist, axis=1)] == split.test_y)
    assert atlas.pca_recall(ds, dim=2) == pytest.approx(want)


def test_pca_piecewise_probe_has_the_capacity_of_its_cells():
    """Four clusters labelled like XOR: no line separates them; a linear classifier per k-means cell does."""
    from train.reproduce import atlas

    rng = np.random.default_rng(5)

    def xor(n):
        centres = np.array([[-3.0, -3.0], [-3.0, 3.0], [3.0, -3.0], [3.0, 3.0]])
        which = rng.integers(0, 4, n)
        points = centres[which] + rng.normal(scale=0.3, size=(n, 2))
        labels = np.array([0, 1, 1, 0])[which].astype(np.int32)
        return points.reshape(n, 1, 2, 1).astype(np.float32), labels

    (tx, ty), (vx, vy) = xor(400), xor(200)
    ds = data.Dataset("xor", tx, ty, vx, vy)
    piecewise = atlas.pca_piecewise_probe(ds, dim=2, cells=4, epochs=30, seeds=1)
    linear = atlas.pca_probe(ds, dim=2, epochs=30, seeds=1)
    assert piecewise[0] > 0.95 and linear[0] < 0.8
