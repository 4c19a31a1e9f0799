"""KoLeo, atlas MMD (Korman 2021, eq. 5), membership ℓ_J and the prior sample vs numpy references and pinned
numbers; finite gradients at the edges; data-parallel form on 4 fake devices equals one device."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geojax import regularizers

# --------------------------------------------------------------------------------------------------------
# Naive references.
# --------------------------------------------------------------------------------------------------------


def naive_koleo(x, eps=1e-8):
    x = np.asarray(x, np.float64)
    u = np.array([row / max(np.linalg.norm(row), eps) for row in x])
    total = 0.0
    for i in range(len(u)):
        best, nn = -np.inf, None
        for j in range(len(u)):
            if j != i and u[i] @ u[j] > best + 1e-12:  # strictly larger: ties keep the lower index
                best, nn = u[i] @ u[j], j
        total += np.log(np.linalg.norm(u[i] - u[nn]) + eps)
    return -total / len(u)


def naive_mmd_atlas(coords, q, prior, c=None):
    """Korman 2021 eq. 5 as written, one loop per sum (M prior points instead of N)."""
    coords, q, w = (np.asarray(a, np.float64) for a in (coords, q, prior))
    n_pts, charts, d = coords.shape
    m = len(w)
    c = d / 6 if c is None else c

    def k0(a, b):
        return c / (c + np.sum((a - b) ** 2))

    t1 = sum(
        q[j, i] * q[k, i] * k0(coords[j, i], coords[k, i])
        for j in range(n_pts)
        for k in range(n_pts)
        if j != k
        for i in range(charts)
    )
    t2 = sum(q[j, i] * k0(coords[j, i], w[k]) for j in range(n_pts) for k in range(m) for i in range(charts))
    t3 = sum(k0(w[j], w[k]) for j in range(m) for k in range(m) if j != k)
    return t1 / (n_pts * (n_pts - 1)) - 2 * t2 / (charts * n_pts * m) + t3 / (charts * m * (m - 1))


def plain_mmd(x, w, c):
    """Korman 2021 §3.2.2: U-statistics within each sample, plain mean across (vectorised, no charts)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)

    def gram(a, b):
        return c / (c + ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    kxx, kww = gram(x, x), gram(w, w)
    n, m = len(x), len(w)
    return (
        (kxx.sum() - np.trace(kxx)) / (n * (n - 1))
        - 2 * gram(x, w).mean()
        + (kww.sum() - np.trace(kww)) / (m * (m - 1))
    )


def random_atlas(rng, n=12, charts=3, d=2, m=9):
    coords = rng.normal(size=(n, charts, d)).astype(np.float32) * 2
    q = np.asarray(jax.nn.softmax(rng.normal(size=(n, charts)), axis=1), np.float32)
    prior = rng.normal(size=(m, d)).astype(np.float32) * 2
    return coords, q, prior


# --------------------------------------------------------------------------------------------------------
# KoLeo.
# --------------------------------------------------------------------------------------------------------


def test_koleo_pinned_four_points():
    x = jnp.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    assert float(regularizers.koleo(x)) == pytest.approx(-0.346574, abs=1e-6)  # −log √2


def test_koleo_vs_naive_with_ties_duplicates_and_zero_rows():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(15, 4)).astype(np.float32)
    x[3] = x[7]  # duplicate
    x[9] = 0.0  # zero row: every dot is 0, nearest is the lowest other index
    x[11], x[12] = [1, 0, 0, 0], [0, 1, 0, 0]
    x[13], x[14] = [0, 0, 1, 0], [-1, 0, 0, 0]  # 13 has exact ties (dot 0) with 11, 12 and 14
    got = regularizers.koleo(x)
    assert float(got) == pytest.approx(naive_koleo(x), rel=1e-5)
    assert float(jax.jit(regularizers.koleo)(x)) == pytest.approx(float(got), rel=1e-5)
    stacked = jax.jit(jax.vmap(regularizers.koleo))(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(stacked, float(got), rtol=1e-5)


def test_koleo_gradients_finite_at_duplicates_and_zero_rows():
    x = jnp.array([[1.0, 2.0], [1.0, 2.0], [0.0, 0.0], [-3.0, 1.0]])
    value, grad = jax.jit(jax.value_and_grad(regularizers.koleo))(x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    # the duplicate pair sits at log(eps): flat, not NaN (row 0 is also the zero row's neighbour, whose
    # term only moves it radially, which the normalisation cancels: zero up to rounding)
    np.testing.assert_allclose(grad[:2], 0.0, atol=1e-6)


def test_koleo_views_sum_the_koleo_of_each_view():
    """views=2 (DINOv2's and the torus code's per-crop KoLeo): a row's other view is never its neighbour."""
    rng = np.random.default_rng(6)
    first = rng.normal(size=(7, 5)).astype(np.float32)
    x = np.concatenate([first, first + 1e-3 * rng.normal(size=first.shape).astype(np.float32)])
    got = regularizers.koleo(x, views=2, eps=1e-6)
    assert float(got) == pytest.approx(naive_koleo(x[:7], 1e-6) + naive_koleo(x[7:], 1e-6), rel=1e-5)
    assert float(regularizers.koleo(x, eps=1e-6)) > float(got) + 5  # one set: each row's nearest is its twin


# --------------------------------------------------------------------------------------------------------
# Atlas MMD and membership.
# --------------------------------------------------------------------------------------------------------


def test_mmd_pinned_design_example():
    got = regularizers.mmd_atlas(
        jnp.array([[[0.0]], [[1.0]]]), jnp.ones((2, 1)), jnp.array([[0.0], [2.0]]), c=1.0
    )
    assert float(got) == pytest.approx(0.5 + 0.2 - 1.1, abs=1e-6)  # −0.4


@pytest.mark.parametrize("c", [None, 0.7])
def test_mmd_atlas_vs_naive_eq5(c):
    coords, q, prior = random_atlas(np.random.default_rng(1))
    got = regularizers.mmd_atlas(coords, q, prior, c=c)
    assert float(got) == pytest.approx(naive_mmd_atlas(coords, q, prior, c), rel=1e-4, abs=1e-6)


def test_mmd_one_chart_uniform_membership_is_plain_mmd():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(16, 5)).astype(np.float32)
    w = np.asarray(regularizers.sample_prior(jax.random.key(0), 11, 5))
    got = regularizers.mmd_atlas(x[:, None, :], np.ones((16, 1), np.float32), w)
    assert float(got) == pytest.approx(plain_mmd(x, w, 5 / 6), rel=1e-4, abs=1e-6)


def test_mmd_gradients_finite_with_identical_points():
    coords = jnp.zeros((6, 2, 3))  # every pair identical, and identical to a prior point
    q = jnp.full((6, 2), 0.5)
    prior = jnp.zeros((4, 3)).at[1].set(1.0)
    grads = jax.jit(jax.grad(regularizers.mmd_atlas, argnums=(0, 1)))(coords, q, prior)
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_membership_vs_numpy_and_pinned():
    rng = np.random.default_rng(3)
    q = np.asarray(jax.nn.softmax(rng.normal(size=(10, 4)), axis=1))
    want = -np.mean([sum((q[x, i] - 0.25) ** 2 for i in range(4)) for x in range(10)])
    assert float(regularizers.membership(q)) == pytest.approx(want, rel=1e-5)
    assert float(regularizers.membership(np.eye(4, dtype=np.float32))) == pytest.approx(-0.75)  # one-hot
    assert float(regularizers.membership(np.full((3, 4), 0.25, np.float32))) == 0.0  # uniform


def test_sample_prior_is_logit_of_uniform():
    w = regularizers.sample_prior(jax.random.key(1), 20000, 3)
    assert w.shape == (20000, 3) and w.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(w)))
    u = np.sort(np.asarray(jax.nn.sigmoid(w)).ravel())
    ks_stat = np.max(np.abs(u - (np.arange(1, u.size + 1) / u.size)))
    assert ks_stat < 0.015  # Kolmogorov–Smirnov distance to U(0, 1)
    assert np.mean(np.asarray(w)) == pytest.approx(0.0, abs=0.05)  # logistic: symmetric about 0


# --------------------------------------------------------------------------------------------------------
# Data parallel: 4 fake devices, local rows, gathered keys, psum'd numerators = one device on everything.
# --------------------------------------------------------------------------------------------------------


def sharded(fn, n_args):
    """fn over rows split across 4 devices (every argument sharded on its first axis)."""
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices("cpu")[:4])  # the 4 fake CPU devices
    run = jax.shard_map(fn, mesh=mesh, in_specs=(P("data"),) * n_args, out_specs=P())
    rows = NamedSharding(mesh, P("data"))
    return lambda *args: run(*(jax.device_put(a, rows) for a in args))


def test_data_parallel_equals_single_device_values_and_gradients():
    coords, q, prior = random_atlas(np.random.default_rng(4), n=16)
    x = np.random.default_rng(5).normal(size=(16, 6)).astype(np.float32)
    x[9] = x[2]  # a duplicate across devices

    cases = [
        (lambda a: regularizers.koleo(a), lambda a: regularizers.koleo(a, axis_name="data"), (x,)),
        (
            lambda a, b: regularizers.mmd_atlas(a, b, prior),
            lambda a, b: regularizers.mmd_atlas(a, b, prior, axis_name="data"),
            (coords, q),
        ),
        (lambda b: regularizers.membership(b), lambda b: regularizers.membership(b, axis_name="data"), (q,)),
    ]

    # per-view KoLeo: each device holds its 4 rows view-major (2 per view); the single-device call takes the
    # global batch reordered view-major (view 0 of every device, then view 1)
    def view_major(a):
        return a.reshape(4, 2, 2, 6).transpose(1, 0, 2, 3).reshape(16, 6)

    cases.append(
        (
            lambda a: regularizers.koleo(view_major(a), views=2),
            lambda a: regularizers.koleo(a, views=2, axis_name="data"),
            (x,),
        )
    )
    for single, local, args in cases:
        multi = sharded(local, len(args))
        argnums = tuple(range(len(args)))
        v1, g1 = jax.value_and_grad(single, argnums)(*args)
        v4, g4 = jax.jit(jax.value_and_grad(multi, argnums))(*args)
        assert float(v4) == pytest.approx(float(v1), rel=1e-5, abs=1e-7)
        for a, b in zip(g4, g1, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# --------------------------------------------------------------------------------------------------------
# Validation.
# --------------------------------------------------------------------------------------------------------

C3, Q3, W3 = np.zeros((5, 2, 3), np.float32), np.full((5, 2), 0.5, np.float32), np.zeros((4, 3), np.float32)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: regularizers.koleo(np.zeros(4, np.float32)), "x"),
        (lambda: regularizers.koleo(np.zeros((1, 4), np.float32)), "x"),
        (lambda: regularizers.koleo(np.zeros((3, 4), np.int32)), "x"),
        (lambda: regularizers.koleo(np.zeros((3, 4), np.float32), eps=0.0), "eps"),
        (lambda: regularizers.koleo(np.zeros((5, 4), np.float32), views=2), "x"),
        (lambda: regularizers.koleo(np.zeros((6, 4), np.float32), views=0), "views"),
        (lambda: regularizers.mmd_atlas(C3[0], Q3, W3), "coords"),
        (lambda: regularizers.mmd_atlas(C3, Q3[:, :1], W3), "q"),
        (lambda: regularizers.mmd_atlas(C3, Q3, W3[:, :2]), "coords and prior"),
        (lambda: regularizers.mmd_atlas(C3, Q3, W3[:1]), "prior"),
        (lambda: regularizers.mmd_atlas(C3[:1], Q3[:1], W3), "coords"),
        (lambda: regularizers.mmd_atlas(C3, Q3, W3, c=-1.0), "c"),
        (lambda: regularizers.membership(Q3[0]), "q"),
        (lambda: regularizers.sample_prior(jax.random.key(0), 0, 3), "m"),
        (lambda: regularizers.sample_prior(jax.random.key(0), 4, 2.5), "d"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        call()
