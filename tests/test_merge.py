"""The (distance, id) top-k behind every index's last step (geojax.search.merge) against numpy's lexsort:
ties at the k-th distance and below it, shared empty slots, negative zeros and infinities, the whole int32
range of keys (which a float comparison of their bits would misorder), each path (two top_k calls, the
counting order, the sort of long answers, short rows)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax.search import merge
from geojax.search.placement import NO_ID


def lexsort_positions(keys, ids, k):
    return np.stack([np.lexsort((ids[r], keys[r]))[:k] for r in range(len(keys))])


def draw(rng, kind, q, n):
    if kind == "few-ints":  # many ties, at and below the k-th distance
        d = rng.integers(0, 4, (q, n)).astype(np.int32)
    elif kind == "int32-range":
        d = rng.integers(-(2**31), 2**31 - 1, (q, n), dtype=np.int64).astype(np.int32)
    elif kind == "float-edges":
        values = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, 3e38, 1e-40, -1e-40], np.float32)
        d = rng.choice(values, (q, n))
    else:
        d = rng.standard_normal((q, n)).astype(np.float32)
    ids = np.stack([rng.choice(2**31 - 1, n, replace=False) for _ in range(q)]).astype(np.int32)
    return d, ids


@pytest.mark.parametrize("kind", ["few-ints", "int32-range", "float-edges", "normal"])
@pytest.mark.parametrize(("n", "k"), [(20, 7), (150, 10), (150, 1), (150, 150), (300, 100)])
def test_select_equals_lexsort(kind, n, k):
    rng = np.random.default_rng(n * 1000 + k)
    d, ids = draw(rng, kind, 6, n)
    keys = np.asarray(merge.order_bits(jnp.asarray(d)))
    want = lexsort_positions(keys, ids, k)
    np.testing.assert_array_equal(np.asarray(merge.select_topk(jnp.asarray(d), jnp.asarray(ids), k)), want)
    unordered = np.asarray(merge.select_topk(jnp.asarray(d), jnp.asarray(ids), k, ordered=False))
    np.testing.assert_array_equal(np.sort(unordered, axis=1), np.sort(want, axis=1))
    md, mi = merge.merge_topk(jnp.asarray(d), jnp.asarray(ids), k)
    np.testing.assert_array_equal(np.asarray(mi), np.take_along_axis(ids, want, axis=1))
    np.testing.assert_array_equal(np.asarray(md), np.take_along_axis(d, want, axis=1))


def test_order_bits_is_the_numeric_order():
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [rng.standard_normal(500) * 10.0 ** rng.integers(-40, 38, 500), [np.inf, -np.inf, 0.0]]
    )
    x = x.astype(np.float32)
    keys = np.asarray(merge.order_bits(jnp.asarray(x)))
    np.testing.assert_array_equal(np.argsort(keys, kind="stable"), np.argsort(x, kind="stable"))


def test_shared_empty_slots_fill_the_end():
    # Three real rows and five empty slots (largest distance, one id): every real row first, by id at the
    # tie, then empties, none repeated.
    d = jnp.array([[5, 2**31 - 1, 2, 2**31 - 1, 2, 2**31 - 1, 2**31 - 1, 2**31 - 1]], jnp.int32)
    ids = jnp.array([[4, NO_ID, 9, NO_ID, 1, NO_ID, NO_ID, NO_ID]], jnp.int32)
    dd, ii = merge.merge_topk(d, ids, 6)
    np.testing.assert_array_equal(np.asarray(ii[0]), [1, 9, 4, NO_ID, NO_ID, NO_ID])
    np.testing.assert_array_equal(np.asarray(dd[0, :3]), [2, 2, 5])
    assert len(set(np.asarray(merge.select_topk(d, ids, 8)[0]).tolist())) == 8


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_top_k_of_int32_keys_is_the_integer_order(platform):
    # On a CPU the keys pass through float32 bit patterns (NaN patterns included); elsewhere as they are.
    # Either way: the k largest by integer value, ties to the lower position, the values given back exactly.
    rng = np.random.default_rng(5)
    keys = rng.integers(-(2**31), 2**31 - 1, (5, 300), dtype=np.int64).astype(np.int32)
    keys[:, 100:140] = keys[:, :40]  # ties
    keys[0, :3] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max, -1]
    v, j = merge.top_k(jnp.asarray(keys), 60, platform=platform)
    want = np.argsort(-keys.astype(np.int64), axis=1, kind="stable")[:, :60]
    np.testing.assert_array_equal(np.asarray(j), want)
    np.testing.assert_array_equal(np.asarray(v), np.take_along_axis(keys, want, axis=1))


def test_the_path_follows_the_platform_given_not_the_default_backend(monkeypatch):
    # A CPU index in a process whose default backend is a GPU ranks with top_k: the platform passed wins.
    calls = []
    largest = merge._largest
    monkeypatch.setattr(merge, "_largest", lambda v, k: calls.append(k) or largest(v, k))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    d, ids = draw(np.random.default_rng(2), "few-ints", 4, 150)
    want = lexsort_positions(d, ids, 10)
    got = merge.select_topk(jnp.asarray(d), jnp.asarray(ids), 10)  # None: the (patched) default, a sort
    np.testing.assert_array_equal(np.asarray(got), want)
    assert calls == []
    got = merge.select_topk(jnp.asarray(d), jnp.asarray(ids), 10, platform="cpu")
    np.testing.assert_array_equal(np.asarray(got), want)
    assert calls
