"""Tensor-train matrices (Hong, Meng & Yuan 2018, §3): dense form, matvec, TT-SVD, ALS, parameter counts."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import tt


def _naive_dense(m: tt.TTMatrix) -> np.ndarray:
    """Hong, Meng & Yuan 2018, eq. 2, entry by entry: R(s, l) = G_1[ν_1(s), μ_1(l)] ⋯ G_t[ν_t(s), μ_t(l)]
    (row-major ν, μ)."""
    cores = [np.asarray(g, np.float64) for g in m.cores]
    out = [g.shape[1] for g in cores]
    inn = [g.shape[2] for g in cores]
    dense = np.zeros((int(np.prod(out)), int(np.prod(inn))))
    for s, nu in enumerate(itertools.product(*map(range, out))):
        for col, mu in enumerate(itertools.product(*map(range, inn))):
            prod = np.eye(1)
            for g, i, j in zip(cores, nu, mu, strict=True):
                prod = prod @ g[:, i, j, :]
            dense[s, col] = prod[0, 0]
    return dense


def test_to_dense_matches_eq2_and_matvec_matches_dense():
    m = tt.init(jax.random.key(0), (2, 3, 2), (3, 2, 4), [1, 3, 4, 1])
    assert m.out_modes == (2, 3, 2) and m.in_modes == (3, 2, 4) and m.ranks == (1, 3, 4, 1)
    dense = _naive_dense(m)
    np.testing.assert_allclose(np.asarray(tt.to_dense(m)), dense, rtol=1e-5, atol=1e-6)
    x = np.random.default_rng(0).normal(size=(2, 3, 24)).astype(np.float32)  # batched leading dims
    y = tt.matvec(m, jnp.asarray(x))
    assert y.shape == (2, 3, 12)
    np.testing.assert_allclose(np.asarray(y), x @ dense.T, rtol=1e-4, atol=1e-5)
    jitted = jax.jit(tt.matvec)(m, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(y), rtol=1e-6, atol=1e-6)
    mapped = jax.vmap(tt.matvec, in_axes=(None, 0))(m, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(mapped), np.asarray(y), rtol=1e-6, atol=1e-6)


def test_merge_cores_blocked_and_fused_matvec_equal_dense():
    m = tt.init(jax.random.key(1), (2, 3, 2, 2), (3, 2, 4, 2), 3)
    dense = _naive_dense(m)
    for group, cores, params in [(2, 2, 6 * 6 * 3 + 3 * 4 * 8), (3, 2, 12 * 24 * 3 + 3 * 4)]:
        merged = tt.merge_cores(m, group)
        assert len(merged.cores) == cores and tt.num_params(merged) == params
        np.testing.assert_allclose(np.asarray(tt.to_dense(merged)), dense, rtol=1e-4, atol=1e-5)
    x = np.random.default_rng(4).normal(size=(7, 48)).astype(np.float32)
    blocked = tt.matvec(m, jnp.asarray(x), block=3)  # 7 rows: two full blocks and a remainder
    np.testing.assert_allclose(np.asarray(blocked), x @ dense.T, rtol=1e-4, atol=1e-5)
    fused = tt.matvec_fused(m, jnp.asarray(x.reshape(7, 1, 48)), interpret=True)  # odd sizes are padded
    assert fused.shape == (7, 1, 24)
    np.testing.assert_allclose(np.asarray(fused)[:, 0], x @ dense.T, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "out_modes,in_modes,ranks,groups",
    [
        ((2, 3, 2), (3, 2, 4), [1, 3, 4, 1], [(1, 2), (2, 1), (3,)]),  # three cores
        ((2, 1, 3, 2, 2), (2, 3, 1, 2, 2), [1, 2, 3, 3, 2, 1], [(2, 1, 2), (1, 3, 1), (1, 1, 1, 2)]),  # five
        ((4, 2, 2, 4), (2, 4, 4, 2), 3, [(2, 1, 1), (1, 2, 1), (2, 2)]),
    ],
)
def test_grouped_and_slabbed_matvec_equal_dense(out_modes, in_modes, ranks, groups):
    m = tt.init(jax.random.key(5), out_modes, in_modes, ranks)
    dense = _naive_dense(m)
    x = np.random.default_rng(5).normal(size=(11, dense.shape[1])).astype(np.float32)
    want = x.astype(np.float64) @ dense.T
    for sizes in groups:
        merged = tt.merge_cores(m, sizes)
        assert len(merged.cores) == len(sizes) and merged.shape == m.shape
        np.testing.assert_allclose(np.asarray(tt.to_dense(merged)), dense, rtol=1e-4, atol=1e-5)
        for block in (None, 1, 4, 11, 64):  # 11 rows in slabs of 4: the last slab overlaps the one before
            y = tt.matvec(merged, jnp.asarray(x), block=block)
            np.testing.assert_allclose(np.asarray(y), want, rtol=1e-4, atol=1e-4)
    plan = tt.plan(m)
    assert sum(plan.groups) == len(m.cores) and plan.block >= 1
    y = tt.matvec(tt.merge_cores(m, plan.groups), jnp.asarray(x), block=plan.block)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-4, atol=1e-4)


def test_plan_of_the_paper_shape():
    # 4096 → 4096 bits, 6 cores of 4×4, rank 4 (Hong, Meng & Yuan 2018, Table 2): merged ends, 32-row slabs.
    m = jax.eval_shape(lambda: tt.init(jax.random.key(0), (4,) * 6, (4,) * 6, 4))
    assert tt.plan(m) == tt.Plan((2, 1, 1, 2), 32)
    groups = tt._compositions(6)  # the groupings searched: every split of 6 cores into adjacent runs
    assert len(groups) == 32 and len(set(groups)) == 32 and all(sum(g) == 6 for g in groups)


def test_map_rows_slabs_and_overlap():
    x = jnp.asarray(np.random.default_rng(6).normal(size=(10, 3)).astype(np.float32))
    calls = []

    def fn(rows):
        calls.append(rows.shape[0])
        return jnp.stack([rows.sum(1), rows.max(1)], axis=1)

    want = np.stack([np.asarray(x).sum(1), np.asarray(x).max(1)], axis=1)
    for block in (1, 3, 4, 10, 20):  # 10 rows in slabs of 3 and 4: the last slab overlaps
        np.testing.assert_allclose(np.asarray(tt.map_rows(fn, x, block)), want, rtol=1e-6)
    # fn only ever sees slabs of exactly ``block`` rows, or all rows when N ≤ block.
    assert set(calls) == {1, 3, 4, 10}
    # A pytree of outputs, of different dtypes, slab by slab.
    idx, top = tt.map_rows(lambda rows: (jnp.argmax(rows, 1), rows.max(1)), x, 4)
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(x).argmax(1))
    np.testing.assert_array_equal(np.asarray(top), np.asarray(x).max(1))
    with pytest.raises(ValueError, match="keep the number of rows"):
        tt.map_rows(lambda rows: rows[:1], x, 4)
    with pytest.raises(ValueError, match="keep the number of rows"):
        tt.map_rows(lambda rows: (rows, rows[:1]), x, 4)


def test_tt_svd_exact_at_full_rank():
    a = np.random.default_rng(1).normal(size=(12, 24)).astype(np.float32)
    m = tt.tt_svd(jnp.asarray(a), (2, 3, 2), (3, 2, 4), 1000)
    # Unfolding sizes: (2·3) × (6·8) → 6; (6·6) × 8 → 8.
    assert m.ranks == (1, 6, 8, 1)
    np.testing.assert_allclose(np.asarray(tt.to_dense(m)), a, rtol=1e-4, atol=1e-5)


def test_tt_svd_recovers_a_low_rank_tt():
    src = tt.init(jax.random.key(2), (2, 2, 3), (2, 3, 2), [1, 2, 3, 1])
    dense = np.asarray(tt.to_dense(src))
    m = tt.tt_svd(jnp.asarray(dense), (2, 2, 3), (2, 3, 2), [1, 2, 3, 1])
    np.testing.assert_allclose(np.asarray(tt.to_dense(m)), dense, rtol=1e-4, atol=1e-5)
    # The leading core of TT-SVD has orthonormal columns (left singular vectors).
    g = np.asarray(m.cores[0]).reshape(-1, 2)
    np.testing.assert_allclose(g.T @ g, np.eye(2), atol=1e-5)
    # One rank less cannot be exact.
    lower = tt.tt_svd(jnp.asarray(dense), (2, 2, 3), (2, 3, 2), [1, 2, 2, 1])
    assert np.abs(np.asarray(tt.to_dense(lower)) - dense).max() > 1e-3


def _count(out_modes, in_modes, rank):
    """Σ_k r_{k-1} b_k d_k r_k with r_0 = r_t = 1."""
    r = [1] + [rank] * (len(out_modes) - 1) + [1]
    return sum(r[k] * b * d * r[k + 1] for k, (b, d) in enumerate(zip(out_modes, in_modes, strict=True)))


# Hong, Meng & Yuan 2018, Table 1 (4096 → 1024 bits) and Table 2 (4096 → b bits, 6 cores of input 4^6,
# rank 4). Table 2's shape row lists five output modes; the sixth is 4 (it is what makes the products equal
# b and the counts equal the table).
TABLE_1 = [
    ((32, 32), (64, 64), {1: 4096, 2: 8192, 4: 16384, 8: 32768, 16: 65536}),
    ((4, 8, 8, 4), (8, 8, 8, 8), {1: 192, 2: 640, 4: 2304, 8: 8704, 16: 33792}),
    ((2, 4, 4, 4, 4, 2), (4,) * 6, {1: 80, 2: 288, 4: 1088, 8: 4224, 16: 16640}),
    ((2, 2, 2, 4, 4, 2, 2, 2), (2, 2, 4, 4, 4, 4, 2, 2), {1: 64, 2: 240, 4: 928}),
]
TABLE_2 = [
    ((2, 4, 4, 4, 4, 4), 1120),
    ((4, 4, 4, 4, 4, 4), 1152),
    ((8, 4, 4, 4, 4, 4), 1216),
    ((8, 8, 4, 4, 4, 4), 1472),
    ((8, 8, 8, 4, 4, 4), 1728),
]


@pytest.mark.parametrize("out_modes,in_modes,counts", TABLE_1)
def test_num_params_table_1(out_modes, in_modes, counts):
    for rank, want in counts.items():
        m = jax.eval_shape(lambda r=rank: tt.init(jax.random.key(0), out_modes, in_modes, r))
        assert tt.num_params(m) == want == _count(out_modes, in_modes, rank)


def test_num_params_table_2():
    for out_modes, want in TABLE_2:
        m = jax.eval_shape(lambda o=out_modes: tt.init(jax.random.key(0), o, (4,) * 6, 4))
        assert m.shape == (int(np.prod(out_modes)), 4096)
        assert tt.num_params(m) == want


def test_als_sweep_full_rank_is_least_squares_and_low_rank_decreases():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(24, 200)).astype(np.float32)  # X [d, n], the paper's layout
    z = rng.normal(size=(12, 200)).astype(np.float32)
    gram, cross = jnp.asarray(x @ x.T), jnp.asarray(z @ x.T)
    start = jnp.asarray(rng.normal(size=(12, 24)).astype(np.float32))

    def loss(m):
        return float(np.sum((np.asarray(tt.to_dense(m), np.float64) @ x - z) ** 2))

    sweep = jax.jit(tt.als_sweep)
    full = sweep(tt.tt_svd(start, (2, 3, 2), (3, 2, 4), 1000), gram, cross)
    r_ls = np.linalg.lstsq(x.T.astype(np.float64), z.T.astype(np.float64), rcond=None)[0].T
    best = float(np.sum((r_ls @ x - z) ** 2))
    assert loss(full) == pytest.approx(best, rel=1e-4)
    m = tt.tt_svd(start, (2, 3, 2), (3, 2, 4), 2)
    history = [loss(m)]
    for _ in range(4):
        m = sweep(m, gram, cross)
        assert m.ranks == (1, 2, 2, 1)
        history.append(loss(m))
    assert all(b <= a * (1 + 1e-5) for a, b in zip(history, history[1:], strict=False))
    assert history[-1] < 0.5 * history[0] and history[-1] > best


def test_balanced_modes():
    assert tt.balanced_modes(4096, 6) == (4, 4, 4, 4, 4, 4)
    assert tt.balanced_modes(784, 4) == (7, 7, 4, 4)
    assert tt.balanced_modes(8192, 6) == (8, 4, 4, 4, 4, 4)
    assert tt.balanced_modes(7, 2) == (7, 1)


def test_bad_inputs():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="in_modes"):
        tt.init(key, (2, 2), (2, 0), 2)
    with pytest.raises(ValueError, match="out_modes and in_modes"):
        tt.init(key, (2, 2), (2, 2, 2), 2)
    with pytest.raises(ValueError, match="ranks"):
        tt.init(key, (2, 2), (2, 2), 0)
    with pytest.raises(ValueError, match="ranks"):
        tt.init(key, (2, 2), (2, 2), [2, 2, 1])
    m = tt.init(key, (2, 2), (2, 3), 2)
    with pytest.raises(ValueError, match="x must have last dimension 6"):
        tt.matvec(m, jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="block"):
        tt.matvec(m, jnp.ones((3, 6)), block=0)
    with pytest.raises(ValueError, match="x must have last dimension 6"):
        tt.matvec_fused(m, jnp.ones((3, 4)), interpret=True)
    with pytest.raises(ValueError, match="group"):
        tt.merge_cores(m, 0)
    with pytest.raises(ValueError, match="sum to the number of cores 2"):
        tt.merge_cores(m, (1, 2))
    with pytest.raises(ValueError, match="block"):
        tt.map_rows(lambda rows: rows, jnp.ones((3, 6)), 0)
    with pytest.raises(ValueError, match="dense must have shape"):
        tt.tt_svd(jnp.ones((4, 5)), (2, 2), (2, 3), 2)
    with pytest.raises(ValueError, match="gram"):
        tt.als_sweep(m, jnp.ones((5, 5)), jnp.ones((4, 6)))
    with pytest.raises(ValueError, match="m must have ranks"):
        tt.als_sweep(tt.init(key, (2, 2), (2, 3), 9), jnp.ones((6, 6)), jnp.ones((4, 6)))
