"""geojax.manifolds against closed forms, pinned numbers (docs/conventions.md) and numpy references."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from geojax import manifolds


def _np_clifford(t):
    t = np.asarray(t, np.float64)
    d = t.shape[-1]
    out = np.empty(t.shape[:-1] + (2 * d,))
    for k in range(d):
        out[..., 2 * k] = np.cos(2 * np.pi * t[..., k])
        out[..., 2 * k + 1] = np.sin(2 * np.pi * t[..., k])
    return out / np.sqrt(d)


def _np_l2p(x):
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    d = x.shape[-1]
    for k in range(0, d, 2):
        n = np.sqrt(x[..., k] ** 2 + x[..., k + 1] ** 2)[..., None]
        out[..., k : k + 2] = x[..., k : k + 2] / n
    return out * np.sqrt(2.0 / d)


class TestPinned:
    def test_l2p_example(self):
        z = manifolds.torus_l2p(jnp.array([3.0, 4.0, 0.0, -2.0]))
        np.testing.assert_allclose(z, np.sqrt(0.5) * np.array([0.6, 0.8, 0.0, -1.0]), atol=1e-6)
        np.testing.assert_allclose(manifolds.clifford_to_angles(z), [0.147584, 0.75], atol=1e-6)

    def test_clifford_layout(self):
        z = manifolds.torus_clifford(jnp.array([0.0, 0.25]))
        np.testing.assert_allclose(z, np.sqrt(0.5) * np.array([1.0, 0.0, 0.0, 1.0]), atol=1e-6)


class TestAgainstNumpy(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((5, 3), (2, 4, 6), (1,))
    def test_clifford(self, *shape):
        t = np.random.default_rng(0).uniform(-2, 2, size=shape).astype(np.float32)
        z = self.variant(manifolds.torus_clifford)(jnp.asarray(t))
        np.testing.assert_allclose(z, _np_clifford(t), atol=2e-6)
        np.testing.assert_allclose(np.linalg.norm(z, axis=-1), 1.0, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters((5, 4), (3, 2, 8), (2,))
    def test_l2p(self, *shape):
        x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
        z = self.variant(manifolds.torus_l2p)(jnp.asarray(x))
        np.testing.assert_allclose(z, _np_l2p(x), atol=2e-6)
        np.testing.assert_allclose(np.linalg.norm(z, axis=-1), 1.0, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_sphere(self):
        x = np.random.default_rng(2).normal(size=(7, 5)).astype(np.float32)
        z = self.variant(manifolds.sphere)(jnp.asarray(x))
        np.testing.assert_allclose(z, x / np.linalg.norm(x, axis=-1, keepdims=True), atol=1e-6)


def test_round_trips():
    t = jnp.asarray(np.random.default_rng(3).uniform(-3, 3, size=(50, 6)).astype(np.float32))
    back = manifolds.clifford_to_angles(manifolds.torus_clifford(t))
    err = np.abs(np.asarray(back) - np.mod(np.asarray(t), 1.0))
    np.testing.assert_array_less(np.minimum(err, 1.0 - err), 1e-5)
    z = manifolds.torus_clifford(t)
    np.testing.assert_allclose(manifolds.torus_l2p(z), z, atol=1e-6)  # identity on Clifford vectors
    assert manifolds.angles_to_clifford is manifolds.torus_clifford


def test_wrap_stays_below_one():
    t = jnp.array([-1e-9, -0.0, 1.0, 2.5, -0.25], jnp.float32)
    w = np.asarray(manifolds.wrap(t))
    assert np.all(w >= 0.0) and np.all(w < 1.0)
    np.testing.assert_allclose(w[2:], [0.0, 0.5, 0.75])
    a = np.asarray(manifolds.clifford_to_angles(jnp.array([1.0, -1e-12])))
    assert 0.0 <= a[0] < 1.0


def test_vmap_and_zero_gradients():
    x = jnp.zeros((3, 4))
    for f in (manifolds.sphere, manifolds.torus_l2p):
        g = jax.grad(lambda v, f=f: jnp.sum(f(v) * jnp.arange(4.0)))(x)
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(jax.vmap(f)(x[None] + 1.0)[0], f(x + 1.0), atol=1e-7)


def test_atlas_split_and_code():
    rng = np.random.default_rng(4)
    n, charts, dim = 6, 3, 2
    h = rng.normal(size=(n, charts * dim + charts)).astype(np.float32)
    coords, q = manifolds.atlas_split(jnp.asarray(h), charts=charts, dim=dim)
    np.testing.assert_allclose(coords, h[:, : charts * dim].reshape(n, charts, dim))
    logits = h[:, charts * dim :]
    ref_q = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(q, ref_q, rtol=1e-5)
    code, chart = manifolds.atlas_code(coords, q)
    for i in range(n):
        c = int(np.argmax(ref_q[i]))
        assert int(chart[i]) == c
        np.testing.assert_allclose(code[i], 1 / (1 + np.exp(-coords[i, c])), rtol=1e-5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: manifolds.torus_l2p(jnp.ones((2, 3))), "x.shape"),
        (lambda: manifolds.clifford_to_angles(jnp.ones((2, 5))), "z.shape"),
        (lambda: manifolds.sphere(jnp.ones((2, 3), jnp.int32)), "x must have a floating dtype"),
        (lambda: manifolds.sphere(jnp.float32(1.0)), "x must have rank"),
        (lambda: manifolds.atlas_split(jnp.ones((2, 7)), charts=2, dim=2), "h.shape"),
        (lambda: manifolds.atlas_split(jnp.ones((2, 6)), charts=0, dim=2), "charts"),
        (lambda: manifolds.atlas_code(jnp.ones((2, 3, 2)), jnp.ones((2, 4))), "q must have shape"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_clifford_scale_is_unit_norm_for_any_dimension():
    for d in (1, 2, 7):
        z = manifolds.torus_clifford(jnp.full((d,), 0.3))
        assert math.isclose(float(jnp.linalg.norm(z)), 1.0, rel_tol=1e-6)


def test_clifford_to_angles_gradient_finite_at_a_zero_pair_and_exact_elsewhere():
    """A zero pair has angle 0 and gradient 0; other pairs, down to 1e-30, get atan2's own gradient
    (y, −x)/(2π(x² + y²)), computed here in float64."""
    z = jnp.array([0.0, 0.0, 1e-30, -2e-30, 0.6, 0.8, -3.0, 0.5], jnp.float32)
    angles = manifolds.clifford_to_angles(z)
    grad = jax.grad(lambda v: jnp.sum(manifolds.clifford_to_angles(v)))(z)
    assert float(angles[0]) == 0.0 and np.all(np.asarray(grad[:2]) == 0.0)
    pairs = np.asarray(z, np.float64).reshape(-1, 2)[1:]
    x, y = pairs[:, 0], pairs[:, 1]
    want = np.stack([-y, x], axis=1) / (2 * np.pi * (x * x + y * y))[:, None]
    np.testing.assert_allclose(grad[2:], want.ravel(), rtol=1e-5)
