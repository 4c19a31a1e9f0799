"""Never a plausible number from bad input: host-side entry points of metrics, quantize, search, tt and binary
reject NaN / ±inf (and out-of-range codes) with a ValueError that names the argument and counts the bad
rows; the jit-able kernels propagate NaN instead, and traced arguments pass unchecked."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geojax import binary, metrics, quantize, search, similarity, tt

RNG = np.random.default_rng(0)
X = RNG.normal(size=(12, 8)).astype(np.float32)
LABELS = np.arange(12) % 3
KEY = jax.random.key(0)
COORDS = RNG.normal(size=(12, 3, 2)).astype(np.float32)
MEMBERSHIP = np.asarray(jax.nn.softmax(RNG.normal(size=(12, 3)), axis=1), np.float32)
PQ = quantize.PQ(codebooks=RNG.normal(size=(4, 8, 2)).astype(np.float32), objective=np.zeros((4, 0)))
CODES = RNG.integers(0, 8, (12, 4)).astype(np.uint8)
GRID = quantize.Grid(lo=X.min(0), hi=X.max(0), nbits=3)
GRID_CODES = RNG.integers(0, 8, (12, 8)).astype(np.uint8)
DENSE = RNG.normal(size=(4, 6)).astype(np.float32)  # [∏ out_modes, ∏ in_modes] for modes (2, 2), (2, 3)
TT = tt.tt_svd(DENSE, (2, 2), (2, 3), 2)
GRAM = (DENSE.T @ DENSE).astype(np.float32)
CROSS = RNG.normal(size=(4, 6)).astype(np.float32)
TP_MODES = dict(in_modes=(2, 4), out_modes=(2, 4), rank=2)


def neg_manifold_distance(a, b):
    return -similarity.manifold_distance(a[0], a[1], b[0], b[1])


@functools.cache
def fitted(kind: str):
    if kind == "itq":
        return binary.itq_fit(X, 8, key=KEY, iters=2)
    return binary.tp_fit(X, 8, key=KEY, iters=1, **TP_MODES)


# (argument name in the message, clean value, call with the argument replaced)
HOST = {
    "precision_at_1/query": ("query", X, lambda x: metrics.precision_at_1(x, LABELS)),
    "precision_at_1/reference": ("reference", X, lambda x: metrics.precision_at_1(X, LABELS, x, LABELS)),
    "recall_at_k/query": ("query", X, lambda x: metrics.recall_at_k(x, LABELS, X, LABELS)),
    "map_at_r/reference": ("reference", X, lambda x: metrics.map_at_r(X, LABELS, x, LABELS)),
    "mean_average_precision/query": ("query", X, lambda x: metrics.mean_average_precision(x, LABELS)),
    "knn_accuracy/query": ("query", X, lambda x: metrics.knn_accuracy(x, LABELS, k=3)),
    "nearest_neighbors/query": ("query", X, lambda x: metrics.nearest_neighbors(x, X)),
    "nearest_neighbors/reference": ("reference", X, lambda x: metrics.nearest_neighbors(X, x, k=2)),
    "atlas/coords": (
        "query[0]",
        COORDS,
        lambda c: metrics.map_at_r((c, MEMBERSHIP), LABELS, similarity=neg_manifold_distance),
    ),
    "atlas/membership": (
        "reference[1]",
        MEMBERSHIP,
        lambda q: metrics.precision_at_1(
            (COORDS, MEMBERSHIP), LABELS, (COORDS, q), LABELS, similarity=neg_manifold_distance
        ),
    ),
    "few_shot_accuracy/query": (
        "query",
        X,
        lambda x: metrics.few_shot_accuracy(x, LABELS, key=KEY, ways=2, queries=1, episodes=2),
    ),
    "few_shot_accuracy/reference": (
        "reference",
        X,
        lambda x: metrics.few_shot_accuracy(X, LABELS, x, LABELS, key=KEY, ways=2, queries=1, episodes=2),
    ),
    "torus_uint8": ("t", X, quantize.torus_uint8),
    "torus_uint8/vector": ("t", X[0], quantize.torus_uint8),
    "grid_fit": ("x", X, quantize.grid_fit),
    "grid_encode/x": ("x", X, lambda x: quantize.grid_encode(GRID, x)),
    "grid_encode/grid.lo": (
        "grid.lo",
        GRID.lo,
        lambda lo: quantize.grid_encode(quantize.Grid(lo=lo, hi=GRID.hi, nbits=GRID.nbits), X),
    ),
    "grid_decode/grid.hi": (
        "grid.hi",
        GRID.hi,
        lambda hi: quantize.grid_decode(quantize.Grid(lo=GRID.lo, hi=hi, nbits=GRID.nbits), GRID_CODES),
    ),
    "one_bit": ("x", X, quantize.one_bit),
    "pq_fit": ("x", X, lambda x: quantize.pq_fit(x, m=2, nbits=2, key=KEY, iters=1)),
    "pq_encode/x": ("x", X, lambda x: quantize.pq_encode(PQ, x)),
    "pq_encode/pq.codebooks": (
        "pq.codebooks",
        PQ.codebooks,
        lambda c: quantize.pq_encode(quantize.PQ(codebooks=c, objective=PQ.objective), X),
    ),
    "pq_topk/queries": ("queries", X, lambda x: search.pq_topk(x, PQ, CODES, 3)),
    "pq_topk/pq.codebooks": (
        "pq.codebooks",
        PQ.codebooks,
        lambda c: search.pq_topk(X, quantize.PQ(codebooks=c, objective=PQ.objective), CODES, 3),
    ),
    "tt_svd": ("dense", DENSE, lambda a: tt.tt_svd(a, (2, 2), (2, 3), 2)),
    "als_sweep/gram": ("gram", GRAM, lambda g: tt.als_sweep(TT, g, CROSS)),
    "als_sweep/cross": ("cross", CROSS, lambda c: tt.als_sweep(TT, GRAM, c)),
    "itq_fit": ("x", X, lambda x: binary.itq_fit(x, 8, key=KEY)),
    "tp_fit": ("x", X, lambda x: binary.tp_fit(x, 8, key=KEY, **TP_MODES)),
    "encode/itq": ("x", X, lambda x: binary.encode(fitted("itq"), x)),
    "encode/tp": ("x", X, lambda x: binary.encode(fitted("tp"), x)),
}


@st.composite
def poisons(draw, shape):
    """A non-empty set of rows (axis 0), each with one entry set to NaN, +inf or −inf."""
    n, width = shape[0], int(np.prod(shape[1:]))
    rows = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))
    bad = st.sampled_from([np.nan, np.inf, -np.inf])
    return [(r, draw(st.integers(0, width - 1)), draw(bad)) for r in sorted(rows)]


def poisoned(clean, bad) -> np.ndarray:
    x = np.array(clean, copy=True)
    flat = x.reshape(x.shape[0], -1)  # a view of the copy
    for row, col, value in bad:
        flat[row, col] = value
    return x


@pytest.mark.parametrize("case", list(HOST))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_host_entry_points_reject_nonfinite_rows(case, data):
    name, clean, call = HOST[case]
    bad = data.draw(poisons(np.shape(clean)))
    x = poisoned(clean, bad)
    if data.draw(st.booleans(), label="as jax.Array"):
        x = jnp.asarray(x)
    unit = "rows" if np.ndim(clean) > 1 else "entries"
    want = f"^{re.escape(name)} must be finite: {len(bad)} of {np.shape(clean)[0]} {unit} hold NaN or ±inf"
    with pytest.raises(ValueError, match=want):
        call(x)


@pytest.mark.parametrize(
    "metric",
    [
        metrics.precision_at_1,
        metrics.recall_at_k,
        metrics.map_at_r,
        metrics.mean_average_precision,
        metrics.knn_accuracy,
    ],
)
def test_all_nan_embeddings_are_not_scored_like_zeros(metric):
    # On the old code both scored the same: NaN similarities ranked like the ties of all-zero rows.
    with pytest.raises(ValueError, match="^query must be finite: 12 of 12 rows"):
        metric(np.full_like(X, np.nan), LABELS)


# --------------------------------------------------------------------------------------------------------
# Codes outside [0, 2^nbits): rejected by the decoders and pq_topk, NaN under jit.
# --------------------------------------------------------------------------------------------------------

# Valid codes are 0 … 7 in every case (8 PQ centroids, 3-bit grid).
RANGE = {
    "pq_decode": (CODES, lambda c: quantize.pq_decode(PQ, c)),
    "grid_decode": (GRID_CODES, lambda c: quantize.grid_decode(GRID, c)),
    "pq_topk": (CODES, lambda c: search.pq_topk(X, PQ, c, 3)),
}


@pytest.mark.parametrize("case", list(RANGE))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_out_of_range_codes_are_rejected(case, data):
    clean, call = RANGE[case]
    cells = sorted(data.draw(st.sets(st.integers(0, clean.size - 1), min_size=1, max_size=clean.size)))
    values = data.draw(st.lists(st.integers(8, 255), min_size=len(cells), max_size=len(cells)))
    codes = clean.copy()
    codes.reshape(-1)[cells] = values
    if data.draw(st.booleans(), label="as jax.Array"):
        codes = jnp.asarray(codes)
    with pytest.raises(ValueError, match=rf"^codes must lie in \[0, 7\] .*: {len(cells)} entries outside"):
        call(codes)


def test_traced_out_of_range_codes_decode_to_nan_not_a_clamped_centroid():
    codes = CODES.copy()
    codes[2, 1] = 9  # PQ: 8 centroids; grid: 3 bits
    pq = np.asarray(jax.jit(quantize.pq_decode)(PQ, codes))
    assert np.isnan(pq[2, 2:4]).all() and np.isfinite(np.delete(pq, 2, axis=0)).all()
    np.testing.assert_array_equal(pq[2, :2], PQ.codebooks[0, codes[2, 0]])
    codes = GRID_CODES.copy()
    codes[5, 6] = 8
    grid = np.asarray(jax.jit(quantize.grid_decode)(GRID, codes))
    assert np.isnan(grid[5, 6]) and np.isfinite(np.delete(grid.reshape(-1), 5 * 8 + 6)).all()


# --------------------------------------------------------------------------------------------------------
# Kernels propagate NaN; traced arguments pass the host checks unread.
# --------------------------------------------------------------------------------------------------------


def test_circular_variance_propagates_nonfinite_rows():
    for value in (np.nan, np.inf):
        z = X.copy()
        z[3, 5] = value
        assert np.isnan(float(metrics.circular_variance(z)))
    zero = X.copy()
    zero[3] = 0.0
    assert np.isfinite(float(metrics.circular_variance(zero)))  # a genuine zero row is still fine


def test_sign_and_procrustes_propagate_nan():
    v = jnp.array([np.nan, 0.0, -0.0, -2.0, 3.0])
    np.testing.assert_array_equal(binary.sign(v), [np.nan, 1.0, 1.0, -1.0, 1.0])
    bad = X.copy()
    bad[0, 0] = np.nan
    assert np.isnan(np.asarray(binary.procrustes(bad, np.sign(X)))).all()


def test_pq_distances_and_matvec_propagate_nan():
    queries = X.copy()
    queries[4, 3] = np.nan
    d = np.asarray(search.pq_distances(queries, PQ, CODES))
    assert np.isnan(d[4]).all() and np.isfinite(np.delete(d, 4, axis=0)).all()
    codes = CODES.copy()
    codes[6, 0] = 200  # out of range: a NaN column, not a clamped centroid
    d = np.asarray(search.pq_distances(X, PQ, codes))
    assert np.isnan(d[:, 6]).all() and np.isfinite(np.delete(d, 6, axis=1)).all()
    x = RNG.normal(size=(3, 6)).astype(np.float32)
    x[1, 2] = np.nan
    y = np.asarray(tt.matvec(TT, x))
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()


def test_traced_pq_topk_gives_nan_distances_for_bad_input():
    search_jit = jax.jit(functools.partial(search.pq_topk, k=3, chunk=4))  # three database chunks
    d0, i0 = search.pq_topk(X, PQ, CODES, 3, chunk=4)
    queries = X.copy()
    queries[4, 3] = np.inf
    d, i = search_jit(queries, PQ, CODES)
    assert np.isnan(np.asarray(d[4])).all()
    np.testing.assert_array_equal(np.delete(np.asarray(d), 4, axis=0), np.delete(np.asarray(d0), 4, axis=0))
    np.testing.assert_array_equal(np.delete(np.asarray(i), 4, axis=0), np.delete(np.asarray(i0), 4, axis=0))
    codes = CODES.copy()
    codes[7, 2] = 8
    assert np.isnan(np.asarray(search_jit(X, PQ, codes)[0])).all()
    bad_pq = quantize.PQ(codebooks=PQ.codebooks.copy(), objective=PQ.objective)
    bad_pq.codebooks[1, 5, 0] = np.nan
    assert np.isnan(np.asarray(search_jit(X, bad_pq, CODES)[0])).all()


def test_traced_inputs_are_not_read():
    # Under jit the host checks see tracers and must let them through (binary_eval jits encode).
    np.testing.assert_array_equal(jax.jit(quantize.torus_uint8)(X), quantize.torus_uint8(X))
    np.testing.assert_array_equal(jax.jit(quantize.one_bit)(X), quantize.one_bit(X))
    np.testing.assert_array_equal(jax.jit(binary.encode)(fitted("itq"), X), binary.encode(fitted("itq"), X))
    np.testing.assert_array_equal(jax.jit(quantize.pq_encode)(PQ, X), quantize.pq_encode(PQ, X))
    d, i = jax.jit(lambda q: search.pq_topk(q, PQ, CODES, 3))(X)
    np.testing.assert_array_equal(i, search.pq_topk(X, PQ, CODES, 3)[1])
