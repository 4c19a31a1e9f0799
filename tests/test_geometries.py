"""Geometry records (geojax.geometries): the built-in records agree with the projections they name, and a
geometry registered in this file alone (a sphere of radius 2) is built, ranked and trained from the command
line like the shipped ones, with the keys its record allows and no others."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from geojax import geometries, manifolds, models, similarity
from train.app import cli, config
from train.app import model as app_model
from train.app.errors import UsageError

RADIUS = 2.0


def scaled_sphere(x: jax.Array) -> jax.Array:
    """The sphere of radius 2: L2 normalisation, then × 2."""
    return RADIUS * manifolds.sphere(x)


TOY = geometries.Geometry("sphere_r2", project=scaled_sphere, summary="the sphere of radius 2")


@pytest.fixture
def toy_geometry():
    app_model.register_geometry(TOY)
    yield TOY
    app_model.unregister_geometry(TOY.name)
    assert TOY.name not in geometries.names()


def test_the_built_in_records_are_the_manifolds_names_and_their_kinds():
    assert geometries.names() == manifolds.GEOMETRIES
    assert tuple(n for n in geometries.names() if geometries.get(n).is_torus) == manifolds.TORUS_GEOMETRIES
    vectors = tuple(n for n in geometries.names() if not geometries.get(n).is_atlas)
    assert vectors == manifolds.VECTOR_GEOMETRIES
    assert [n for n in geometries.names() if "mixed" in geometries.get(n).projections] == ["atlas"]
    assert [n for n in geometries.names() if geometries.get(n).even_dim] == ["torus_n"]


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _clifford(t: np.ndarray) -> np.ndarray:
    """Stowell 2026 eq. 2: (cos 2πt_k, sin 2πt_k) pairs of D turns, scaled to unit norm."""
    pairs = np.stack([np.cos(2 * np.pi * t), np.sin(2 * np.pi * t)], -1)
    return pairs.reshape(len(t), -1) / np.sqrt(t.shape[1])


def _pairwise_unit(x: np.ndarray) -> np.ndarray:
    """Stowell 2026 eq. 3: each adjacent pair normalised, the whole scaled to unit norm."""
    pairs = _unit(x.reshape(len(x), -1, 2))
    return pairs.reshape(len(x), -1) / np.sqrt(pairs.shape[1])


@pytest.mark.parametrize(
    ("name", "reference", "width"),
    [
        ("euclidean", lambda x: x, 6),
        ("sphere", _unit, 6),
        ("torus_c", _clifford, 12),
        ("torus_n", _pairwise_unit, 6),
    ],
)
def test_each_vector_record_projects_as_its_paper_says_and_declares_its_width(name, reference, width):
    raw = np.random.default_rng(0).normal(size=(3, 6)).astype(np.float32)
    g = geometries.get(name)
    np.testing.assert_allclose(np.asarray(g.project(jnp.asarray(raw))), reference(raw), atol=1e-6)
    assert g.width(6) == width == models.embedding_width(name, 6)
    unit = np.allclose(np.linalg.norm(reference(raw), axis=-1), 1.0)
    assert g.unit_norm == unit


@pytest.mark.parametrize("name", ["torus_c", "torus_n"])
def test_a_torus_records_angles_are_the_angles_of_its_embedding(name):
    """The Clifford embedding of the record's flat angles is the record's projection (what QAT and the torus
    quantisers rely on); a wrong pairing or unit breaks it."""
    raw = jnp.asarray(np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32))
    g = geometries.get(name)
    np.testing.assert_allclose(manifolds.torus_clifford(g.angles(raw)), g.project(raw), atol=1e-5)


def test_bad_records_and_registrations_are_refused():
    with pytest.raises(ValueError, match="output must be one of"):
        geometries.Geometry("x", output="cloud")
    with pytest.raises(ValueError, match="an atlas geometry has no flat angles"):
        geometries.Geometry("x", output="atlas", unit_norm=True)
    with pytest.raises(ValueError, match="'sphere' is registered already"):
        geometries.register(geometries.Geometry("sphere"))
    with pytest.raises(ValueError, match="geometry must be one of .*'atlas'.*, got 'hyperbolic'"):
        geometries.get("hyperbolic")
    with pytest.raises(ValueError, match="geometry must be a vector geometry"):
        models.embedding_width("atlas", 4)


def test_a_registered_geometry_builds_a_model_and_ranks_by_its_training_similarity(toy_geometry):
    trunk = models.encoder("mlp", input_shape=(4, 4, 1), width=16, rngs=nnx.Rngs(0))
    model = models.EmbeddingModel(trunk, geometry=TOY.name, dim=8, rngs=nnx.Rngs(0))
    z = model(jnp.asarray(np.random.default_rng(2).normal(size=(3, 4, 4, 1)), jnp.float32)).embedding
    np.testing.assert_allclose(np.linalg.norm(z, axis=-1), RADIUS, rtol=1e-6)
    # not unit-norm: ranked by the similarity it was trained with, as euclidean embeddings are
    assert similarity.retrieval_similarity(TOY.name, "neg_sq_euclidean") == "neg_sq_euclidean"
    assert similarity.retrieval_similarity("sphere", "neg_sq_euclidean") == "cosine"
    with pytest.raises(ValueError, match="qat_bits needs a torus geometry"):
        models.EmbeddingModel(trunk, geometry=TOY.name, dim=8, qat_bits=8, rngs=nnx.Rngs(0))


def test_a_geometry_registered_here_trains_from_the_command_line(toy_geometry, tmp_path, capsys):
    workdir = tmp_path / "toy"
    args = ["preset=supcon", f"geometry={TOY.name}", "dim=8", "koleo=0.1", "steps=2", "batch_size=64"]
    assert cli.main([*args, "progress=false", "log_every=1", f"workdir={workdir}"]) == 0
    capsys.readouterr()
    saved = json.load(open(workdir / "config.json"))
    assert saved["geometry"] == TOY.name and saved["koleo"] == 0.1
    with np.load(os.path.join(workdir, "embeddings.npz")) as z:
        np.testing.assert_allclose(np.linalg.norm(z["reference"], axis=-1), RADIUS, rtol=1e-5)
        assert str(z["geometry"]) == TOY.name
    report = json.load(open(workdir / "report.json"))
    assert 0.0 <= report["precision_at_1"] <= 1.0 and report["circular_variance"] is not None


def test_a_registered_geometry_gets_the_keys_its_record_allows_and_no_others(toy_geometry):
    with pytest.raises(UsageError, match="charts applies to geometry=atlas"):
        config.from_args([f"geometry={TOY.name}", "charts=4"])
    with pytest.raises(UsageError, match="qat_bits applies to geometry=torus_c"):
        config.from_args([f"geometry={TOY.name}", "qat_bits=8"])
    with pytest.raises(UsageError, match="similarity='torus'.*needs a torus geometry"):
        config.from_args([f"geometry={TOY.name}", "similarity=torus"])
    with pytest.raises(UsageError, match="projection='mixed' needs a geometry that allows it"):
        config.from_args([f"geometry={TOY.name}", "projection=mixed"])
    assert config.from_args([f"geometry={TOY.name}", "head=linear", "koleo=0.5"]).koleo == 0.5
    # help lists it with the vector geometries that KoLeo applies to
    assert str(config.KEYS["koleo"].when) == f"geometry=euclidean|sphere|torus_c|torus_n|{TOY.name}"


def test_an_unregistered_geometry_is_refused_by_the_command_line_once_gone(toy_geometry):
    app_model.unregister_geometry(TOY.name)
    try:
        with pytest.raises(UsageError, match="geometry must be one of"):
            config.from_args([f"geometry={TOY.name}"])
    finally:
        app_model.register_geometry(TOY)
