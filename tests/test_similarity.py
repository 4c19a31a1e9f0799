"""geojax.similarity against naive numpy double loops, pinned values and edge-case gradients."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from geojax import similarity as sim


def _loop(f, a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return np.array([[f(x, y) for y in b] for x in a])


def _cos(x, y):
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


REFERENCES = {
    "dot": lambda x, y: float(x @ y),
    "cosine": _cos,
    "neg_arc_length": lambda x, y: 1.0 - math.acos(max(-1.0, min(1.0, _cos(x, y)))) / math.pi,
    "neg_euclidean": lambda x, y: -float(np.linalg.norm(x - y)),
    "neg_sq_euclidean": lambda x, y: -float(np.sum((x - y) ** 2)),
}


def _torus_ref(p):
    def f(x, y):
        total = 0.0
        for u, v in zip(x, y, strict=True):
            d = abs(u - v) % 1.0
            total += min(d, 1.0 - d) ** p
        return -total

    return f


class TestAgainstLoops(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.product(name=sorted(REFERENCES), shape=[(5, 7, 3), (1, 4, 16), (9, 2, 5)])
    def test_vector_similarities(self, name, shape):
        n, m, d = shape
        rng = np.random.default_rng(n * 100 + m)
        a = rng.normal(size=(n, d)).astype(np.float32)
        b = rng.normal(size=(m, d)).astype(np.float32)
        got = self.variant(sim.get(name))(jnp.asarray(a), jnp.asarray(b))
        assert got.shape == (n, m) and got.dtype == jnp.float32
        np.testing.assert_allclose(got, _loop(REFERENCES[name], a, b), rtol=2e-5, atol=2e-5)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(1, 2)
    def test_torus(self, p):
        rng = np.random.default_rng(p)
        a = rng.uniform(-2, 2, size=(6, 5)).astype(np.float32)
        b = rng.uniform(-2, 2, size=(4, 5)).astype(np.float32)
        got = self.variant(lambda x, y: sim.torus(x, y, p=p))(jnp.asarray(a), jnp.asarray(b))
        np.testing.assert_allclose(got, _loop(_torus_ref(p), a, b), atol=2e-5)


def test_torus_wraparound_pinned():
    # 250 vs 5 on the uint8 circle is 11 steps: (250/256, 5/256) turns are 11/256 apart.
    got = sim.torus(jnp.array([[250 / 256]]), jnp.array([[5 / 256]]))
    np.testing.assert_allclose(-got, [[11 / 256]], atol=1e-6)


def test_bf16_inputs_accumulate_in_fp32():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(4, 256)).astype(np.float32)
    out = sim.dot(jnp.asarray(a, jnp.bfloat16), jnp.asarray(a, jnp.bfloat16))
    assert out.dtype == jnp.float32
    ref = a.astype(jnp.bfloat16).astype(np.float64) @ a.astype(jnp.bfloat16).astype(np.float64).T
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def _manifold_ref(ca, qa, cb, qb, no_overlap):
    out = np.empty((len(ca), len(cb)))
    for i in range(len(ca)):
        for j in range(len(cb)):
            w = qa[i] * qb[j]
            if w.sum() == 0:
                out[i, j] = no_overlap
                continue
            d0 = np.linalg.norm(ca[i] - cb[j], axis=-1)
            out[i, j] = (w * d0).sum() / w.sum()
    return out


@pytest.mark.parametrize("no_overlap", [math.inf, 7.5])
def test_manifold_distance(no_overlap):
    rng = np.random.default_rng(6)
    ca = rng.normal(size=(5, 3, 2)).astype(np.float32)
    cb = rng.normal(size=(4, 3, 2)).astype(np.float32)
    qa = rng.dirichlet(np.ones(3), size=5).astype(np.float32)
    qb = rng.dirichlet(np.ones(3), size=4).astype(np.float32)
    qa[0] = [1, 0, 0]
    qb[1] = [0, 0.5, 0.5]  # no chart shared with qa[0]
    got = jax.jit(lambda *x: sim.manifold_distance(*x, no_overlap=no_overlap))(ca, qa, cb, qb)
    ref = _manifold_ref(ca, qa, cb, qb, no_overlap)
    assert got[0, 1] == no_overlap
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_manifold_distance_gradients_finite_at_identical_points_and_no_overlap():
    c = jnp.zeros((2, 2, 3))
    q = jnp.array([[1.0, 0.0], [0.0, 1.0]])

    def f(c, q):
        d = sim.manifold_distance(c, q, c, q, no_overlap=0.0)
        return jnp.sum(d)

    for g in jax.grad(f, argnums=(0, 1))(c, q):
        assert np.all(np.isfinite(g))


@pytest.mark.parametrize("name", sorted(REFERENCES) + ["torus"])
def test_gradients_finite_at_identical_points_and_zero_vectors(name):
    f = sim.get(name)
    rng = np.random.default_rng(7)
    x = jnp.asarray(rng.normal(size=(3, 4)).astype(np.float32))
    for a in (x, jnp.zeros((3, 4)), jnp.concatenate([x[:1], x[:1], -x[:1]])):
        ga, gb = jax.grad(lambda u, v: jnp.sum(f(u, v)), argnums=(0, 1))(a, a)
        assert np.all(np.isfinite(ga)) and np.all(np.isfinite(gb)), name


def test_arc_length_at_plus_minus_one():
    x = jnp.array([[1.0, 0.0], [-1.0, 0.0]])
    s = sim.neg_arc_length(x, x)
    np.testing.assert_allclose(s, [[1.0, 0.0], [0.0, 1.0]], atol=1e-3)
    g = jax.grad(lambda u: jnp.sum(sim.neg_arc_length(u, x)))(x)
    assert np.all(np.isfinite(g))


def test_vmap_over_a_batch_of_sets():
    rng = np.random.default_rng(8)
    a = jnp.asarray(rng.normal(size=(3, 5, 4)).astype(np.float32))
    b = jnp.asarray(rng.normal(size=(3, 6, 4)).astype(np.float32))
    for name in sim.names():
        batched = jax.vmap(sim.get(name))(a, b)
        for i in range(3):
            np.testing.assert_allclose(batched[i], sim.get(name)(a[i], b[i]), rtol=1e-6, atol=1e-6)


def _o(*shape):
    return jnp.ones(shape)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sim.cosine(jnp.ones((3,)), jnp.ones((2, 3))), "a must have rank 2"),
        (lambda: sim.cosine(jnp.ones((2, 3)), jnp.ones((2, 4))), "same last dimension"),
        (lambda: sim.dot(jnp.ones((2, 3), jnp.int32), jnp.ones((2, 3))), "a must have a floating dtype"),
        (lambda: sim.neg_euclidean(jnp.ones((0, 3)), jnp.ones((2, 3))), "a must be a non-empty"),
        (lambda: sim.torus(jnp.ones((2, 3)), jnp.ones((2, 3)), p=3), "p must be one of"),
        (lambda: sim.get("hamming"), "similarity must be one of"),
        (lambda: sim.manifold_distance(_o(2, 3, 2), _o(2, 2), _o(2, 3, 2), _o(2, 3)), "q_a must have shape"),
        (lambda: sim.manifold_distance(_o(2, 3, 2), _o(2, 3), _o(2, 3, 1), _o(2, 3)), "agree in charts"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------------------------------------
# squared distances: exact for identical rows, accurate for near neighbours, at matmul speed


def _np_sq(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum((a[:, None, :] - b[None, :, :]) ** 2, axis=-1)


def _offset_rows(rng, n, d=64, offset=100.0, spread=3.0):
    """Unnormalised fp32 rows far from the origin: ‖a‖² ≈ 6e5, where the plain Gram expansion loses ~0.1."""
    return (offset + spread * rng.normal(size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("name", ["neg_euclidean", "neg_sq_euclidean"])
def test_identical_rows_exactly_zero_and_near_neighbours_accurate(name):
    rng = np.random.default_rng(11)
    a = _offset_rows(rng, 40)
    b = _offset_rows(rng, 70)
    b[:10] = a[:10]  # exact duplicates across the two sets
    b[20] = a[20] + np.float32(1e-3) * rng.normal(size=64).astype(np.float32)  # a near neighbour
    f = jax.jit(sim.get(name))
    got, self_sim = np.asarray(f(a, b), np.float64), np.asarray(f(a, a))
    want = _np_sq(a, b)
    want = -np.sqrt(want) if name == "neg_euclidean" else -want
    assert np.all(got[np.arange(10), np.arange(10)] == 0.0) and np.all(np.diag(self_sim) == 0.0)
    # every entry, the near pair included, carries only the round-off of its differences
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


def test_many_near_duplicates_take_the_all_pairs_path():
    """Two tight far-apart clusters: every within-cluster pair needs the differences (more flagged tiles
    than the tile path holds), so every pair is recomputed; values and gradients stay exact."""
    rng = np.random.default_rng(12)
    centres = np.array([[1e3] * 8, [-1e3] * 8], np.float32)
    x = (centres[np.arange(96) % 2] + 1e-3 * rng.normal(size=(96, 8))).astype(np.float32)
    got = np.asarray(jax.jit(sim.neg_euclidean)(x, x), np.float64)
    np.testing.assert_allclose(got, -np.sqrt(_np_sq(x, x)), rtol=2e-6, atol=0)
    assert np.all(np.diag(got) == 0.0)


def test_gradient_of_a_near_pair_comes_from_its_differences():
    """∂(−‖a − b‖)/∂a = −(a − b)/‖a − b‖, a unit vector even 1e-4 apart at norm 1e3 (the expansion's
    gradient would carry errors of order 1e3 · 6e-8 / 1e-4 ≈ 1 there)."""
    rng = np.random.default_rng(13)
    a = _offset_rows(rng, 5, d=16, offset=250.0)
    b = a + np.float32(1e-4) * rng.normal(size=a.shape).astype(np.float32)
    grad = jax.jit(jax.grad(lambda u: jnp.trace(sim.neg_euclidean(u, b))))(a)
    diff = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    unit = diff / np.linalg.norm(diff, axis=1, keepdims=True)
    np.testing.assert_allclose(grad, -unit, rtol=1e-3, atol=1e-3)


def test_manifold_distance_mean_squared_is_the_neurve_form():
    """chart_distance='mean_squared' with no_overlap=1: neurve's Σ q q ‖Δ‖²/d / Σ q q (its pdist_mfld)."""
    rng = np.random.default_rng(14)
    ca, cb = rng.normal(size=(5, 3, 2)).astype(np.float32), rng.normal(size=(4, 3, 2)).astype(np.float32)
    qa = rng.dirichlet(np.ones(3), size=5).astype(np.float32)
    qb = rng.dirichlet(np.ones(3), size=4).astype(np.float32)
    qa[0], qb[1] = [1, 0, 0], [0, 0.5, 0.5]
    got = sim.manifold_distance(ca, qa, cb, qb, chart_distance="mean_squared", no_overlap=1.0)
    want = np.empty((5, 4))
    for i in range(5):
        for j in range(4):
            w = np.float64(qa[i]) * qb[j]
            msd = np.mean((np.float64(ca[i]) - cb[j]) ** 2, axis=-1)
            want[i, j] = 1.0 if w.sum() == 0 else (w * msd).sum() / w.sum()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="chart_distance"):
        sim.manifold_distance(ca, qa, cb, qb, chart_distance="squared")
