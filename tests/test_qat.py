"""Quantisation-aware torus heads (models.GeometryHead qat_bits / qat_noise): the forward pass gives the
b-bit codes, the backward pass the straight-through gradient, evaluation mode rounds, and the head works
under a data-parallel shard_map step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from geojax import manifolds, models, quantize

H = np.random.default_rng(0).normal(size=(12, 10)).astype(np.float32)


def head(geometry, **kw):
    return models.GeometryHead(10, 8, geometry=geometry, rngs=nnx.Rngs(0), **kw)


def raw_angles(h, geometry):
    """Angles in turns of the float head's output (raw turns of torus_c, pair angles of torus_n)."""
    raw = h.out(nnx.relu(h.hidden(jnp.asarray(H))))
    return raw if geometry == "torus_c" else manifolds.clifford_to_angles(manifolds.torus_l2p(raw))


@pytest.mark.parametrize("geometry", ["torus_c", "torus_n"])
@pytest.mark.parametrize("bits", [8, 4, 2])
def test_forward_is_the_codes(geometry, bits):
    q = head(geometry, qat_bits=bits)
    z = np.asarray(q(jnp.asarray(H)))
    codes = quantize.torus_codes(raw_angles(head(geometry), geometry), bits)  # same weights (same seed)
    np.testing.assert_array_equal(quantize.torus_codes(manifolds.clifford_to_angles(z), bits), codes)
    grid = np.asarray(quantize.torus_unpack(codes, bits), np.float32) / (1 << bits)
    np.testing.assert_allclose(z, manifolds.torus_clifford(grid), atol=1e-6)


@pytest.mark.parametrize("geometry", ["torus_c", "torus_n"])
def test_gradient_is_straight_through(geometry):
    """d loss / d weights = (Jacobian of the raw → angle map)ᵀ · (Jacobian of the Clifford map at the
    *rounded* angles)ᵀ · cotangent: rounding itself passes the gradient unchanged."""
    bits = 2
    width = models.embedding_width(geometry, 8)
    w = np.random.default_rng(1).normal(size=(12, width)).astype(np.float32)
    q = head(geometry, qat_bits=bits)
    graphdef, params = nnx.split(q, nnx.Param)

    def loss(p):
        return jnp.sum(nnx.merge(graphdef, p)(jnp.asarray(H)) * w)

    got = jax.grad(loss)(params)

    def angles(p):
        return raw_angles(nnx.merge(graphdef, p), geometry)

    t, pull_angles = jax.vjp(angles, params)
    rounded = jnp.round(t * (1 << bits)) / (1 << bits)
    _, pull_clifford = jax.vjp(manifolds.torus_clifford, rounded)
    (want,) = pull_angles(pull_clifford(jnp.asarray(w))[0])
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert max(float(jnp.abs(a).max()) for a in jax.tree.leaves(got)) > 0.0  # not round's zero gradient


def test_noise_in_training_rounding_in_evaluation():
    bits = 4
    q = head("torus_c", qat_bits=bits, qat_noise=True)
    t = np.asarray(raw_angles(head("torus_c"), "torus_c"))
    train_z = np.asarray(q(jnp.asarray(H)))
    turns = np.asarray(manifolds.clifford_to_angles(train_z))
    gap = (turns - t + 0.5) % 1.0 - 0.5
    assert np.abs(gap).max() <= 0.5 / (1 << bits) + 1e-5  # within half a grid step …
    off_grid = np.abs(turns * (1 << bits) - np.round(turns * (1 << bits)))
    assert off_grid.max() > 1e-2  # … but not on the grid
    model = models.EmbeddingModel(
        models.MLP(10, hidden=(16,), rngs=nnx.Rngs(1)),
        geometry="torus_n",
        dim=8,
        qat_bits=bits,
        qat_noise=True,
        rngs=nnx.Rngs(2),
    )
    model.eval()
    assert model.head.deterministic
    z = model(jnp.asarray(H)).embedding
    turns = np.asarray(manifolds.clifford_to_angles(z)) * (1 << bits)
    np.testing.assert_allclose(turns, np.round(turns), atol=1e-4)


def test_bad_options():
    with pytest.raises(ValueError, match="torus"):
        head("sphere", qat_bits=4)
    with pytest.raises(ValueError, match="qat_bits"):
        head("torus_c", qat_bits=3)
    with pytest.raises(ValueError, match="qat_noise needs qat_bits"):
        head("torus_c", qat_noise=True)
    enc = models.MLP(10, hidden=(16,), rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="atlas"):
        models.EmbeddingModel(enc, geometry="atlas", dim=2, charts=2, qat_bits=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="qat_noise needs qat_bits"):
        models.EmbeddingModel(enc, geometry="atlas", dim=2, charts=2, qat_noise=True, rngs=nnx.Rngs(0))


@pytest.mark.slow
def test_data_parallel_gradient_equals_single_device():
    """Per-device gradients of a batch shard, mean-reduced across devices, equal the whole-batch gradient."""
    n_dev = min(4, jax.device_count())
    if n_dev < 2:
        pytest.skip("needs several devices (tests/conftest.py asks for 4 host devices)")
    model = models.EmbeddingModel(
        models.MLP(10, hidden=(16,), rngs=nnx.Rngs(1)),
        geometry="torus_n",
        dim=8,
        qat_bits=4,
        rngs=nnx.Rngs(2),
    )
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(8 * n_dev, 10)), jnp.float32)

    def loss(p, xb):
        z = nnx.merge(graphdef, p, rest)(xb).embedding
        return jnp.mean(jnp.sum(z[:, :4], axis=1) ** 2)

    whole = jax.grad(loss)(params, x)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:n_dev]), ("d",))
    spec = jax.sharding.PartitionSpec

    @jax.jit
    def sharded(p, xs):
        def per_device(p, xb):
            return jax.lax.pmean(jax.grad(loss)(p, xb), "d")

        return jax.shard_map(
            per_device, mesh=mesh, in_specs=(spec(), spec("d")), out_specs=spec(), check_vma=False
        )(p, xs)

    got = sharded(params, x)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(whole), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
