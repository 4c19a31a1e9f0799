"""ITQ and Tensorized Projection (Hong, Meng & Yuan 2018) and that paper's evaluation protocol."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import binary, tt
from train import binary_eval


def _data(n=60, d=16, seed=0):
    rng = np.random.default_rng(seed)
    scales = np.linspace(2.0, 0.2, d)
    return (rng.normal(size=(n, d)) * scales + 0.5).astype(np.float32)


def _non_increasing(history, rel=1e-5):
    h = np.asarray(history, np.float64)
    return bool(np.all(h[1:] <= h[:-1] * (1 + rel) + 1e-6))


def _numpy_itq(x, bits, q0, iters):
    """Gong & Lazebnik's ITQ in float64 numpy from the rotation q0 (PCA to b dims when b < d)."""
    xc = x.astype(np.float64) - x.mean(0)
    d = x.shape[1]
    if bits < d:
        vals, vecs = np.linalg.eigh(xc.T @ xc)
        w = vecs[:, np.argsort(vals)[::-1][:bits]]
        w = w * np.sign(w[np.abs(w).argmax(0), np.arange(bits)])  # same sign convention as geojax
    else:
        w = np.eye(d)
    v, q, history = xc @ w, q0.astype(np.float64), []
    for _ in range(iters):
        b = np.where(v @ q >= 0, 1.0, -1.0)
        u, _, wt = np.linalg.svd(v.T @ b, full_matrices=False)
        q = u @ wt
        history.append(np.sum((b - v @ q) ** 2))
    return (w @ q).T, np.array(history)


@pytest.mark.parametrize("bits", [8, 32])  # b < d (PCA + rotation) and b ≥ d (eq. 5, dense R)
def test_itq_matches_numpy_reference(bits):
    x = _data()
    key = jax.random.key(1)
    model = binary.itq_fit(jnp.asarray(x), bits, key=key, iters=6)
    q0 = np.asarray(jax.random.orthogonal(key, min(bits, x.shape[1]), m=bits))  # the documented start
    proj, history = _numpy_itq(x, bits, q0, 6)
    np.testing.assert_allclose(np.asarray(model.objective), history, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(model.projection), proj, atol=2e-4)
    np.testing.assert_allclose(np.asarray(model.mean), x.mean(0), rtol=1e-5, atol=1e-6)
    r = np.asarray(model.projection, np.float64)
    gram = r @ r.T if bits < x.shape[1] else r.T @ r  # orthonormal rows (b < d) or columns (b ≥ d)
    np.testing.assert_allclose(gram, np.eye(min(bits, x.shape[1])), atol=1e-5)
    assert _non_increasing(model.objective)


def test_itq_objective_non_increasing_50_iterations():
    model = binary.itq_fit(jnp.asarray(_data(n=80)), 8, key=jax.random.key(2))
    assert model.objective.shape == (50,)
    assert _non_increasing(model.objective)
    assert float(model.objective[-1]) < float(model.objective[0])


@pytest.mark.parametrize(
    "bits,out_modes",
    [(8, (2, 2, 2)), (16, (2, 4, 2)), (32, (4, 4, 2))],  # b < d, b = d, b > d
)
def test_tp_objective_non_increasing_and_encode_matches_dense(bits, out_modes):
    x = _data()
    model = binary.tp_fit(
        jnp.asarray(x), bits, in_modes=(2, 4, 2), out_modes=out_modes, rank=2, key=jax.random.key(3), iters=6
    )
    assert model.objective.shape == (6,)
    assert _non_increasing(model.objective)
    assert float(model.objective[-1]) < float(model.objective[0])
    assert model.projection.out_modes == out_modes and model.projection.in_modes == (2, 4, 2)
    assert model.projection.ranks == (1, 2, 2, 1)
    # Codes: sign(R (x − mean)) with the dense R formed in numpy from the cores, packed little-endian.
    proj = (x - np.asarray(model.mean)) @ _dense64(model.projection.cores).T
    want = np.packbits(proj >= 0, axis=1, bitorder="little")
    codes = np.asarray(binary.encode(model, jnp.asarray(x)))
    assert codes.dtype == np.uint8 and codes.shape == (x.shape[0], bits // 8)
    near_zero = np.abs(proj) < 1e-4  # float rounding may flip a sign there
    agree = np.unpackbits(codes, axis=1, bitorder="little") == (proj >= 0)
    assert np.all(agree | near_zero)
    assert np.mean(codes == want) > 0.99


def _dense64(cores) -> np.ndarray:
    """Hong, Meng & Yuan 2018, eq. 2 in float64 numpy: the dense R of TT cores [r, b, d, s]."""
    dense = np.eye(1)[:, None, :]
    for g in cores:
        g = np.asarray(g, np.float64)
        dense = np.einsum("BDr,rbds->BbDds", dense, g).reshape(dense.shape[0] * g.shape[1], -1, g.shape[3])
    return dense[:, :, 0]


@pytest.mark.parametrize(
    "out_modes,in_modes,rank,batch,slab",
    [
        ((4,) * 6, (4,) * 6, 4, 70, None),  # the paper's 4096 → 4096 bits; plan: 32-row slabs, last overlaps
        ((2, 4, 4, 4, 4, 2), (4,) * 6, 4, 33, None),  # 4096 → 1024 bits
        ((2, 4, 2), (3, 2, 4), 3, 13, 100),  # three cores, slabs of a few rows
        ((2, 2, 4, 2, 2), (2, 3, 2, 2, 2), 2, 9, 200),  # five cores
        ((8,), (12,), 1, 6, None),  # one core
    ],
)
def test_tp_encode_matches_float64_dense_sign(monkeypatch, out_modes, in_modes, rank, batch, slab):
    if slab is not None:  # small matrices would fit whole; make the slabs hold a few rows
        monkeypatch.setattr(tt, "_SLAB_VALUES", slab)
    m = tt.init(jax.random.key(7), out_modes, in_modes, rank)
    rng = np.random.default_rng(7)
    mean = rng.normal(size=m.shape[1]).astype(np.float32)
    x = rng.normal(size=(batch, m.shape[1])).astype(np.float32)
    model = binary.TP(jnp.asarray(mean), m, jnp.zeros(0))
    if slab is not None:
        assert tt.plan(m).block < batch
    xc = x.astype(np.float64) - mean
    proj = xc @ _dense64(m.cores).T
    # Float32 rounding of any exact regrouping is bounded by a small multiple of eps · (|x − mean| |R|ᵀ),
    # |R| being the dense matrix of the cores' absolute values; only there may a sign differ.
    bound = np.abs(xc) @ _dense64([np.abs(np.asarray(g)) for g in m.cores]).T
    for codes in (binary.encode(model, jnp.asarray(x)), jax.jit(binary.encode)(model, jnp.asarray(x))):
        codes = np.asarray(codes)
        assert codes.dtype == np.uint8 and codes.shape == (batch, m.shape[0] // 8)
        bits = np.unpackbits(codes, axis=1, bitorder="little").astype(bool)
        tie = np.abs(proj) <= 1e-6 * bound
        assert np.all((bits == (proj >= 0)) | tie) and tie.mean() < 1e-3
    leading = np.asarray(binary.encode(model, jnp.asarray(x[:6].reshape(2, 3, -1))))  # leading dims kept
    np.testing.assert_array_equal(leading.reshape(6, -1), codes[:6])


def test_itq_encode_matches_dense_sign_and_zero_is_positive():
    x = _data()
    model = binary.itq_fit(jnp.asarray(x), 16, key=jax.random.key(4), iters=3)
    r = np.asarray(model.projection)
    want = np.packbits((x - np.asarray(model.mean)) @ r.T >= 0, axis=1, bitorder="little")
    np.testing.assert_array_equal(np.asarray(binary.encode(model, jnp.asarray(x))), want)
    at_mean = binary.encode(model, model.mean[None, :])  # projection exactly 0 → every bit is 1
    np.testing.assert_array_equal(np.asarray(at_mean), np.full((1, 2), 255, np.uint8))


def test_fit_bad_inputs():
    x = jnp.asarray(_data())
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="bits"):
        binary.itq_fit(x, 12, key=key)
    with pytest.raises(ValueError, match="bits"):
        binary.itq_fit(x, 0, key=key)
    with pytest.raises(ValueError, match="x must have a floating dtype"):
        binary.itq_fit(jnp.ones((10, 16), jnp.int32), 8, key=key)
    with pytest.raises(ValueError, match="x must have rank 2"):
        binary.itq_fit(x[0], 8, key=key)
    kw = {"key": key, "rank": 2}
    with pytest.raises(ValueError, match="in_modes"):
        binary.tp_fit(x, 16, in_modes=(2, 2, 2), out_modes=(2, 4, 2), **kw)
    with pytest.raises(ValueError, match="out_modes"):
        binary.tp_fit(x, 16, in_modes=(2, 4, 2), out_modes=(2, 2, 2), **kw)
    with pytest.raises(ValueError, match="rank"):
        binary.tp_fit(x, 16, in_modes=(2, 4, 2), out_modes=(2, 4, 2), key=key, rank=0)
    with pytest.raises(ValueError, match="bits"):
        binary.tp_fit(x, 12, in_modes=(2, 4, 2), out_modes=(2, 3, 2), **kw)
    with pytest.raises(ValueError, match="beta"):
        binary.tp_fit(x, 16, in_modes=(2, 4, 2), out_modes=(2, 4, 2), beta=-1.0, **kw)
    model = binary.itq_fit(x, 8, key=key, iters=1)
    with pytest.raises(ValueError, match="x must have last dimension 16"):
        binary.encode(model, jnp.ones((3, 8)))
    with pytest.raises(ValueError, match="model"):
        binary.encode(tt.init(key, (2, 2), (2, 2), 1), x)


# ---- Hong, Meng & Yuan 2018 evaluation protocol ------------------------------------------------------------


def _naive_ap(dist_row, rel_row):
    """AP by a plain loop: walk the ranking (stable ties), precision at each relevant item."""
    order = sorted(range(len(dist_row)), key=lambda j: (dist_row[j], j))
    hits, total = 0, 0.0
    for rank, j in enumerate(order, start=1):
        if rel_row[j]:
            hits += 1
            total += hits / rank
    return total / hits if hits else np.nan


def test_average_precision_hand_example_and_naive_loop():
    # Ranking by distance [1, 0, 2, 3] is items 1, 0, 2, 3; relevant 0 and 2 sit at ranks 2 and 3.
    ap = binary_eval.average_precision(np.array([[1, 0, 2, 3]]), np.array([[True, False, True, False]]))
    assert ap[0] == pytest.approx((1 / 2 + 2 / 3) / 2)
    # Ties go to the lower index: distances [1, 1, 0], relevant {1} → ranks 2, 3 → item 1 at rank 3.
    ap = binary_eval.average_precision(np.array([[1, 1, 0]]), np.array([[False, True, False]]))
    assert ap[0] == pytest.approx(1 / 3)
    rng = np.random.default_rng(5)
    dist = rng.integers(0, 4, size=(6, 15))
    rel = rng.random((6, 15)) < 0.3
    rel[0] = False
    got = binary_eval.average_precision(dist, rel)
    want = np.array([_naive_ap(dist[i], rel[i]) for i in range(6)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.isnan(got[0])


def test_hamming_map_and_ground_truth_small_case():
    # Two queries, four database codes of 8 bits; Hamming distances from query 0: 0, 1, 2, 8.
    db = np.array([[0b00000000], [0b00000001], [0b00000011], [0b11111111]], np.uint8)
    queries = np.array([[0b00000000], [0b11111111]], np.uint8)
    relevant = np.array([[False, True, False, True], [False, False, False, False]])
    # Query 0: ranks 1..4 = items 0, 1, 2, 3; relevant at ranks 2 and 4 → (1/2 + 2/4)/2; query 1 left out.
    assert binary_eval.hamming_map(jnp.asarray(queries), jnp.asarray(db), relevant) == pytest.approx(0.5)
    pts = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0], [0.0, 6.0]])
    gt = binary_eval.ground_truth(pts[:1], pts, 5.0)
    np.testing.assert_array_equal(gt, [[True, True, True, False]])
    # Radius = mean distance to the k-th neighbour (self excluded), by a naive loop.
    x = np.random.default_rng(6).normal(size=(30, 3))
    dists = [sorted(np.linalg.norm(x[i] - x[j]) for j in range(30) if j != i)[4] for i in range(30)]
    assert binary_eval.radius(x, k=5) == pytest.approx(np.mean(dists), rel=1e-9)


def test_binary_eval_cli_writes_table_and_json(tmp_path, capsys):
    x = _data(n=140, d=16, seed=7)
    np.savez(tmp_path / "feats.npz", features=x)
    out = tmp_path / "report.json"
    report = binary_eval.main(["--data", f"npz:{tmp_path / 'feats.npz'}", "--quick", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "| bits | method | mAP |" in printed and "| TP |" in printed
    saved = json.loads(out.read_text())
    assert saved["rows"] == json.loads(json.dumps(report["rows"]))
    assert [r["bits"] for r in saved["rows"]] == [8, 8, 16, 16, 32, 32]
    assert saved["in_modes"] == [4, 4] and saved["n_queries"] == 14
    assert all(0.0 < r["map"] <= 1.0 for r in saved["rows"])
    assert [r["params"] for r in saved["rows"] if r["method"] == "ITQ"] == [8 * 16, 16 * 16, 32 * 16]
    tp = [r for r in saved["rows"] if r["method"] == "TP"]
    for r in tp:
        shape = jax.eval_shape(lambda r=r: tt.init(jax.random.key(0), r["out_modes"], (4, 4), r["tt_ranks"]))
        assert r["params"] == tt.num_params(shape)
    with pytest.raises(ValueError, match="data"):
        binary_eval.load_features("nothing")
