"""train.evaluate on synthetic clustered embeddings: every Table 3 row, the ranking similarity, the files,
the CLI and the plots (train.helpers.plots)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiers import default_tier

from geojax import manifolds, quantize, search
from train import evaluate
from train.helpers import plots


def clustered(rng, n_per, classes, d, spread):
    centres = rng.normal(size=(classes, d))
    labels = np.repeat(np.arange(classes), n_per).astype(np.int32)
    return (centres[labels] + spread * rng.normal(size=(len(labels), d))).astype(np.float32), labels


@pytest.fixture(scope="module")
def torus_run():
    rng = np.random.default_rng(0)
    x, y = clustered(rng, 40, 8, 16, 0.15)  # 320 rows, 16 Clifford coordinates = 8 angles
    z = np.asarray(manifolds.torus_l2p(x))
    order = rng.permutation(len(y))
    z, y = z[order], y[order]
    return {
        "query": z[:64],
        "query_labels": y[:64],
        "reference": z[64:],
        "reference_labels": y[64:],
        "geometry": "torus_n",
    }


def test_torus_report_rows_and_consistency(torus_run):
    rep = evaluate.quantised_report(**torus_run, key=jax.random.key(0), pq_iters=4)
    rows = {row["method"]: row for row in rep["rows"]}
    names = ["float32", "8-bit", "4-bit", "2-bit", "1-bit"] + [name for name, _, _ in evaluate.PQ_CONFIGS]
    assert list(rows) == names
    assert rows["float32"]["p_at_1"] > 0.95
    assert rows["8-bit"]["p_at_1"] > 0.9
    # Table 3 columns: torusN 8-bit codes are D/2 bytes; PQ bits m·nbits, codebook 2^nbits·(D/2 angles).
    assert rows["8-bit"]["bits_per_vector"] == 8 * 8
    assert rows["4-bit"]["bits_per_vector"] == 4 * 8 and rows["2-bit"]["bits_per_vector"] == 2 * 8
    assert rows["1-bit"]["bits_per_vector"] == 16
    assert (rows["PQ(4,2)"]["m"], rows["PQ(4,2)"]["nbits"], rows["PQ(4,2)"]["bits_per_vector"]) == (2, 4, 8)
    assert rows["PQ(4,2)"]["codebook_size"] == 16 * 8
    assert rows["PQ(8,16)"]["note"].startswith("skipped")  # 16 sub-spaces cannot split 8 angles
    assert rows["PQ(8,1)"]["p_at_1"] is not None  # 256 centroids ≤ 256 reference rows
    # PQ on the flat angles must rank by *closeness*: 8 separated clusters, chance is 1/8.
    assert rows["PQ(8,4)"]["p_at_1"] > 0.8 and rows["PQ(8,1)"]["p_at_1"] > 0.8
    for row in rep["rows"]:
        if row["p_at_1"] is not None:
            assert 0.0 <= row["map_at_r"] <= 1.0 and set(row["recall_at_k"]) == {1, 2, 4, 8}
            assert row["recall_at_k"][1] == pytest.approx(row["p_at_1"])
    # The 8-bit row's P@1 is the one the search kernel gives (same ranking, ties to the lower index).
    qc = quantize.torus_uint8(manifolds.clifford_to_angles(torus_run["query"]))
    rc = quantize.torus_uint8(manifolds.clifford_to_angles(torus_run["reference"]))
    _, nn = search.torus_topk(qc, rc, 1)
    p1 = np.mean(torus_run["reference_labels"][np.asarray(nn)[:, 0]] == torus_run["query_labels"])
    assert rows["8-bit"]["p_at_1"] == pytest.approx(p1)
    # So are the 4- and 2-bit rows' (packed codes, the b-bit scan); 4 bits still separate the clusters.
    for b in (4, 2):
        qb = quantize.torus_codes(manifolds.clifford_to_angles(torus_run["query"]), b)
        rb = quantize.torus_codes(manifolds.clifford_to_angles(torus_run["reference"]), b)
        _, nn = search.torus_topk(qb, rb, 1, bits=b)
        p1 = np.mean(torus_run["reference_labels"][np.asarray(nn)[:, 0]] == torus_run["query_labels"])
        assert rows[f"{b}-bit"]["p_at_1"] == pytest.approx(p1)
    assert rows["4-bit"]["p_at_1"] > 0.8


@pytest.mark.parametrize("geometry", default_tier(["torus_n", "sphere"], keep=("torus_n",)))
def test_pq_is_fitted_on_the_8_bit_values(torus_run, geometry, monkeypatch):
    """Stowell 2026 §5: PQ is trained on the 8-bit quantised values. Every row PQ sees is an 8-bit value (a
    multiple of 1/256 turn on the torus, a grid cell centre elsewhere), and each PQ row's P@1 is that of a
    naive ranking of the queries' 8-bit values against the reconstructions of that fit."""
    run = dict(torus_run, geometry=geometry)
    if geometry == "sphere":
        run["query"], run["reference"] = manifolds.sphere(run["query"]), manifolds.sphere(run["reference"])
    seen = []
    fit = quantize.pq_fit
    monkeypatch.setattr(quantize, "pq_fit", lambda x, **kw: seen.append(np.asarray(x)) or fit(x, **kw))
    key = jax.random.key(2)
    rep = evaluate.quantised_report(**run, key=key, pq_iters=3, ks=(1,))
    if geometry == "torus_n":
        turns = (
            np.asarray(manifolds.clifford_to_angles(run["query"])),
            np.asarray(manifolds.clifford_to_angles(run["reference"])),
        )
        q8, r8 = (np.round(256 * t) % 256 / 256 for t in turns)  # the uint8 codes' angles

        def dist(a, b):  # squared wraparound distance of turns
            delta = np.abs(a[:, None] - b[None]) % 1
            return (np.minimum(delta, 1 - delta) ** 2).sum(-1)
    else:
        grid = quantize.grid_fit(run["reference"], nbits=8)
        q8, r8 = (
            np.asarray(quantize.grid_decode(grid, quantize.grid_encode(grid, x)))
            for x in (run["query"], run["reference"])
        )

        def dist(a, b):
            return ((a[:, None] - b[None]) ** 2).sum(-1)

    fitted = [(i, name, m, nbits) for i, (name, m, nbits) in enumerate(evaluate.PQ_CONFIGS)]
    fitted = [f for f in fitted if r8.shape[1] % f[2] == 0 and len(r8) >= 1 << f[3]]
    assert len(seen) == len(fitted) >= 2
    for x in seen:
        np.testing.assert_allclose(x, r8, atol=1e-6)
    rows = {row["method"]: row for row in rep["rows"]}
    for i, name, m, nbits in fitted:
        pq = fit(jnp.asarray(r8), m=m, nbits=nbits, key=jax.random.fold_in(key, i), iters=3)
        recon = np.asarray(quantize.pq_decode(pq, quantize.pq_encode(pq, jnp.asarray(r8))))
        nearest = np.argmin(dist(q8, recon), axis=1)  # ties to the lower index
        p1 = np.mean(run["reference_labels"][nearest] == run["query_labels"])
        assert rows[name]["p_at_1"] == pytest.approx(p1, abs=1e-6), name


def test_sphere_report_and_writers(tmp_path):
    rng = np.random.default_rng(1)
    x, y = clustered(rng, 50, 6, 16, 0.1)
    x = np.asarray(manifolds.sphere(x))
    rep = evaluate.quantised_report(
        x[::2], y[::2], x[1::2], y[1::2], geometry="sphere", key=jax.random.key(1), pq_iters=3
    )
    rows = {row["method"]: row for row in rep["rows"]}
    assert rows["float32"]["p_at_1"] > 0.95 and rows["8-bit"]["p_at_1"] > 0.9
    assert rows["8-bit"]["bits_per_vector"] == 128 and rows["8-bit"]["codebook_size"] == 32
    assert rows["PQ(8,16)"]["note"].startswith("skipped")  # 150 rows < 256 centroids
    assert rows["PQ(4,4)"]["p_at_1"] is not None and rows["PQ(4,4)"]["codebook_size"] == 16 * 16
    evaluate.write_json([rep], str(tmp_path / "r.json"))
    evaluate.write_markdown([rep], str(tmp_path / "r.md"))
    plots.plot_quantised([rep, rep], str(tmp_path / "r.png"))
    back = json.loads((tmp_path / "r.json").read_text())
    assert back[0]["rows"][0]["method"] == "float32"
    md = (tmp_path / "r.md").read_text()
    assert md.count("\n") == 2 + len(rep["rows"]) and "| sphere | 16 | 8-bit | 128 | 32 |" in md
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_cli_reads_workdirs(tmp_path, torus_run, capsys):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        np.savez(tmp_path / name / "embeddings.npz", **{k: np.asarray(v) for k, v in torus_run.items()})
    # Same shapes and iterations as test_torus_report_rows_and_consistency: the compiled steps are reused.
    evaluate.main([str(tmp_path / "a"), str(tmp_path / "b"), "--pq-iters", "4"])
    out = capsys.readouterr().out
    assert out.count("| torus_n | 16 | float32 |") == 2
    for ext in ("json", "md", "png"):
        assert (tmp_path / "a" / f"report_quantised.{ext}").exists()
    assert not (tmp_path / "b" / "report_quantised.json").exists()


def test_bad_inputs(tmp_path):
    x = np.zeros((4, 6), np.float32)
    y = np.zeros(4, np.int32)
    with pytest.raises(ValueError, match="geometry"):
        evaluate.quantised_report(x, y, x, y, geometry="hyperbolic", key=jax.random.key(0))
    with pytest.raises(ValueError, match="query"):
        evaluate.quantised_report(x[:, :5], y, x, y, geometry="sphere", key=jax.random.key(0))
    with pytest.raises(ValueError, match="even"):
        evaluate.quantised_report(x[:, :5], y, x[:, :5], y, geometry="torus_n", key=jax.random.key(0))
    with pytest.raises(ValueError, match="embeddings.npz"):
        evaluate.main([str(tmp_path)])


def _scale_classes(rng):
    """Two classes along the same directions at norms 1 and 3: cosine cannot tell them apart, distance can."""
    directions = rng.normal(size=(8, 16))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    labels = np.repeat([0, 1], 80).astype(np.int32)
    pick = rng.integers(0, 8, size=len(labels))
    x = directions[pick] * np.where(labels == 1, 3.0, 1.0)[:, None] + 0.02 * rng.normal(
        size=(len(labels), 16)
    )
    return x.astype(np.float32), labels


def test_float_row_ranks_by_the_trained_similarity():
    x, y = _scale_classes(np.random.default_rng(3))
    q, qy, r, ry = x[::2], y[::2], x[1::2], y[1::2]

    def naive_p1(scores):  # a numpy scan: label of the best reference row, ties to the lower index
        return float(np.mean(ry[np.argmax(scores, axis=1)] == qy))

    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    cosine = naive_p1(unit(q) @ unit(r).T)
    euclid = naive_p1(-((q[:, None, :] - r[None, :, :]) ** 2).sum(-1))
    assert euclid > 0.95 and cosine < 0.8  # the data tells the two rankings apart

    def float_row(**kw):
        rep = evaluate.quantised_report(q, qy, r, ry, key=jax.random.key(0), pq_iters=2, **kw)
        return rep["rows"][0]

    default = float_row(geometry="euclidean")  # no recorded similarity: Euclidean, as before
    assert default["note"] == "neg_euclidean" and default["p_at_1"] == pytest.approx(euclid)
    trained = float_row(geometry="euclidean", similarity="cosine")
    assert trained["note"] == "cosine" and trained["p_at_1"] == pytest.approx(cosine)
    # Unit-norm geometries rank by cosine whatever they were trained with (geojax.similarity).
    sphere = float_row(geometry="sphere", similarity="neg_euclidean")
    assert sphere["note"] == "cosine" and sphere["p_at_1"] == pytest.approx(cosine)


def test_load_run_reads_the_trained_similarity(tmp_path, torus_run):
    arrays = {k: np.asarray(v) for k, v in torus_run.items()}
    np.savez(tmp_path / "embeddings.npz", **arrays)
    assert "similarity" not in evaluate.load_run(str(tmp_path))
    np.savez(tmp_path / "embeddings.npz", **arrays, similarity=np.array("torus"))
    run = evaluate.load_run(str(tmp_path))
    assert run["similarity"] == "torus" and run["geometry"] == "torus_n"


def test_plot_curve(tmp_path):
    rows = [{"step": s, "loss": 1.0 / s, "supcon": 2.0 / s, "lr": 0.1, "time": 0.0} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plots.plot_curve(str(tmp_path / "metrics.jsonl"), str(tmp_path / "curve.png"))
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "empty.jsonl").write_text("")
    plots.plot_curve(str(tmp_path / "empty.jsonl"), str(tmp_path / "none.png"))
    assert not (tmp_path / "none.png").exists()


def test_pareto_frontier():
    pts = [(64, 0.9, "a"), (16, 0.5, "b"), (32, 0.4, "c"), (32, 0.7, "d"), (128, 0.85, "e"), (16, 0.6, "f")]
    # Fewer bits first; a point joins only when it beats every point with fewer or equal bits.
    assert plots.pareto_frontier(pts) == [(16, 0.6), (32, 0.7), (64, 0.9)]
    assert plots.pareto_frontier([]) == []
