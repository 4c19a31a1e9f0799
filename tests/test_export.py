"""python -m train.export: a trained run's packed codes, labels and jax.export encoder, read back without
the training code (numpy reader, deserialised encoder, the C search)."""

import json
import os

import jax
import numpy as np
import pytest

from geojax import manifolds, quantize, search
from train import export
from train.app import config, loop, report
from train.csearch import clib, reader


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("run") / "torus")
    cfg = config.make(
        dataset="digits", dim=16, width=32, steps=20, batch_size=64, ema=0.5, workdir=workdir, progress=False
    )
    loop.train(cfg)
    return workdir


@pytest.mark.slow
def test_export_round_trip(run_dir, tmp_path):
    out = str(tmp_path / "export")
    manifest = export.main([run_dir, "--out", out, "--bits", "4"])
    assert manifest["bits"] == 4 and manifest["angles"] == 8 and manifest["weights"] == "ema"
    with open(os.path.join(out, "manifest.json")) as f:
        assert json.load(f) == manifest

    run = export.load_run(run_dir)  # a finished run: loaded, not trained further
    assert int(run.state["step"]) == 20 and "ema" in run.state
    ds = run.dataset
    # The reference file: the training split's 4-bit codes and labels, as the library computes them.
    ref = report.embed(run.graphdef, run.state, ds.train_x, batch=256).embedding  # EMA weights
    want = np.asarray(quantize.torus_codes(manifolds.clifford_to_angles(ref), 4))
    codes = reader.read_codes(os.path.join(out, "codes.gjt"))
    assert (codes.bits, codes.dim, codes.header["geometry"]) == (4, 8, "torus_n")
    np.testing.assert_array_equal(codes.codes, want)
    np.testing.assert_array_equal(codes.labels, ds.train_y)

    # The deserialised encoder (any batch size) and the run-directory encoder give the same embeddings.
    encode = export.load_encoder(out)
    for n in (1, 7):
        z, c = encode(np.asarray(ds.test_x[:n], np.float32))
        z_ref = report.embed(run.graphdef, run.state, ds.test_x[:n], batch=8).embedding
        np.testing.assert_allclose(np.asarray(z), z_ref, atol=1e-5)
        np.testing.assert_array_equal(
            np.asarray(c), quantize.torus_codes(manifolds.clifford_to_angles(z_ref), 4)
        )
    direct = export.run_encoder(run_dir, bits=4)
    np.testing.assert_array_equal(np.asarray(direct(ds.test_x[:5])[1]), np.asarray(encode(ds.test_x[:5])[1]))

    # End to end on integers: the C search over the exported file equals torus_topk.
    _, queries = encode(np.asarray(ds.test_x[:20], np.float32))
    _, want_i = search.torus_topk(np.asarray(queries), codes.codes, 5, bits=4)
    if clib.compiler() is not None:
        _, got_i = clib.Library(str(tmp_path)).topk(np.asarray(queries), codes.codes, 5, bits=4)
        np.testing.assert_array_equal(got_i, np.asarray(want_i))


def test_export_rejects_missing_run(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        export.load_run(str(tmp_path))


def test_exported_encoder_is_independent_of_the_model_code(tmp_path):
    """A jax.export artefact holds the computation: it runs after the Python function is gone."""
    w = np.arange(6, dtype=np.float32).reshape(3, 2)

    def f(x):
        z = x @ w
        return z, quantize.torus_codes(z, 4)

    n = jax.export.symbolic_shape("n")[0]
    blob = jax.export.export(jax.jit(f))(jax.ShapeDtypeStruct((n, 3), np.float32)).serialize()
    (tmp_path / export.ENCODER_FILE).write_bytes(bytes(blob))
    del f
    x = np.random.default_rng(0).uniform(size=(5, 3)).astype(np.float32)
    z, c = export.load_encoder(str(tmp_path))(x)
    np.testing.assert_allclose(np.asarray(z), x @ w, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(c), quantize.torus_codes(x @ w, 4))
