"""Memory-bounded softmax losses: equal to the plain form (value and gradients), and never hold [N, N]."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import losses
from geojax.similarity import cosine, neg_euclidean

PAIRS = [
    (losses.supcon, losses.supcon_blocked),
    (losses.sincere, losses.sincere_blocked),
    (losses.info_nce, losses.info_nce_blocked),
]
IDS = ["supcon", "sincere", "info_nce"]


def _data(n, d=8, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(n, d)), jnp.float32), jnp.asarray(
        rng.integers(0, classes, n), jnp.int32
    )


@pytest.mark.parametrize(
    "plain,blocked,sim_fn,block",
    [(*PAIRS[0], cosine, 8), (*PAIRS[1], neg_euclidean, 16), (*PAIRS[2], cosine, 16)],
    ids=IDS,
)
def test_blocked_equals_plain_value_and_gradient(plain, blocked, sim_fn, block):
    # 37 anchors in blocks of 8 or 16: the last anchor block and the last key block are padded.
    emb, labels = _data(37)
    want = jax.jit(jax.value_and_grad(lambda e: plain(sim_fn(e, e), labels, temperature=0.3)))
    got = jax.jit(
        jax.value_and_grad(lambda e: blocked(e, labels, temperature=0.3, similarity=sim_fn, block_size=block))
    )
    (v1, g1), (v2, g2) = want(emb), got(emb)
    np.testing.assert_allclose(v2, v1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g2, g1, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("plain,blocked,self_index", [(*PAIRS[0], True), (*PAIRS[2], False)], ids=IDS[::2])
def test_blocked_rectangular_keys(plain, blocked, self_index):
    """Anchors against a separate key set, with and without self columns."""
    emb, labels = _data(6, seed=1)
    keys, key_labels = _data(21, seed=2)
    cols = jnp.array([4, 0, 20, 9, 13, 7])
    keys = keys.at[cols].set(emb)
    key_labels = key_labels.at[cols].set(labels)
    si = cols if self_index else None
    want = jax.jit(plain)(cosine(emb, keys), labels, key_labels=key_labels, self_index=si)
    got = jax.jit(partial(blocked, block_size=4))(
        emb, labels, key_embeddings=keys, key_labels=key_labels, self_index=si
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("plain,blocked", PAIRS, ids=IDS)
def test_blocked_base_temperature_equals_plain(plain, blocked):
    emb, labels = _data(13, seed=3)
    want = plain(cosine(emb, emb), labels, temperature=0.2, base_temperature=0.07)
    got = blocked(emb, labels, temperature=0.2, base_temperature=0.07, block_size=4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    unscaled = blocked(emb, labels, temperature=0.2, block_size=4)
    np.testing.assert_allclose(got, unscaled * 0.2 / 0.07, rtol=1e-5)


def test_blocked_edge_batch_by_similarity_name():
    """Identical embeddings of one class under 'neg_euclidean' (√ at 0): finite value and gradients."""
    emb, _ = _data(10)
    same, labels = jnp.broadcast_to(emb[0], emb.shape), jnp.zeros(10, jnp.int32)
    step = jax.jit(
        jax.value_and_grad(partial(losses.supcon_blocked, similarity="neg_euclidean", block_size=4))
    )
    value, grad = step(same, labels)
    np.testing.assert_allclose(value, np.log(9), rtol=1e-5)  # every s = 0: log(n − 1)
    assert np.all(np.isfinite(grad))


def test_blocked_gradient_never_materialises_the_full_matrix():
    """Compiled temporaries of fwd+bwd stay far below one [N, N] fp32 matrix (the plain form needs more)."""
    n = 2048
    emb, labels = jnp.ones((n, 16)), jnp.arange(n) % 10
    blocked = jax.jit(jax.grad(partial(losses.supcon_blocked, labels=labels, block_size=128)))
    plain = jax.jit(jax.grad(lambda e: losses.supcon(cosine(e, e), labels)))
    full = n * n * 4
    temp_blocked = blocked.lower(emb).compile().memory_analysis().temp_size_in_bytes
    temp_plain = plain.lower(emb).compile().memory_analysis().temp_size_in_bytes
    assert temp_plain >= full
    assert temp_blocked < full / 8


def test_one_matrix_lse_equals_one_block_of_the_running_form_bit_for_bit():
    # On their own, the one-pass log-sum-exps (mask first) give the exact bits of one block folded into the
    # running state, values and gradients, with an empty row and column and large values. (Inside a jitted
    # train step XLA may fuse them differently: the losses whose committed runs were trained with the running
    # form keep it, and train.reproduce.same_code checks those runs.)
    from geojax.losses._lse import column_lse, row_lse, running_row_lse

    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(scale=30.0, size=(9, 7)), jnp.float32)
    mask = jnp.asarray(rng.random((9, 7)) < 0.6).at[4].set(False).at[:, 2].set(False)
    weights = jnp.asarray(rng.normal(size=9), jnp.float32)

    for got, want, w in [
        (lambda v: row_lse(v, mask), lambda v: running_row_lse(v, mask), weights),
        (lambda v: column_lse(v, mask, None), lambda v: running_row_lse(v.T, mask.T), weights[:7]),
    ]:
        (v1, g1), (v2, g2) = (
            jax.jit(jax.value_and_grad(lambda v, f=f, w=w: jnp.sum(w * f(v))))(x) for f in (got, want)
        )
        assert np.asarray(v1).tobytes() == np.asarray(v2).tobytes()
        assert np.asarray(g1).tobytes() == np.asarray(g2).tobytes()
    assert row_lse(x, mask)[4] == np.float32(-1e30) and column_lse(x, mask, None)[2] == np.float32(-1e30)


def test_segment_lse_is_the_column_lse_of_its_one_hot_matrix():
    # one entry per row, in column segments[i]: the O(n) form gives the column log-sum-exp of that matrix,
    # values and gradients, with an empty segment (−1e30, zero gradient) and values far from 0
    from geojax.losses._lse import column_lse, segment_lse

    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.normal(scale=40.0, size=11), jnp.float32)
    segments = jnp.asarray(rng.choice([0, 1, 3, 4], size=11), jnp.int32).at[:4].set(jnp.arange(4) % 2 * 4)
    hot = segments[:, None] == jnp.arange(5)
    weights = jnp.asarray(rng.normal(size=5), jnp.float32)

    def by_segment(v):
        return jnp.sum(weights * segment_lse(v, segments, 5, None))

    def by_column(v):
        return jnp.sum(weights * column_lse(jnp.where(hot, v[:, None], 7.0), hot, None))

    (v1, g1), (v2, g2) = (jax.jit(jax.value_and_grad(f))(x) for f in (by_segment, by_column))
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-7)
    assert segment_lse(x, segments, 5, None)[2] == np.float32(-1e30)
