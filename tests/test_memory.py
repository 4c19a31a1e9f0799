"""geojax.memory: the ring buffer against a Python deque, its key rows as constants, and its validation."""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from geojax import losses, memory
from geojax.similarity import cosine


def _batch(rng, n, start):
    """n rows numbered start … start + n − 1: an atlas-like pytree (coords [n, 2, 3], q [n, 2]) and labels."""
    ids = np.arange(start, start + n)
    rows = {
        "coords": (ids[:, None, None] + rng.normal(size=(n, 2, 3))).astype(np.float32),
        "q": np.broadcast_to(ids[:, None], (n, 2)).astype(np.float32),
    }
    return rows, ids.astype(np.int32)


@pytest.mark.parametrize("size", [5, 8])
def test_enqueue_order_and_wraparound_match_a_deque(size):
    """Batches of varying sizes, some longer than the memory: the slots, oldest first, hold exactly what
    deque(maxlen=M) holds after appending the same rows one by one; head and size follow."""
    rng = np.random.default_rng(size)
    mem = memory.init(size, _batch(rng, 1, 0)[0])
    update = jax.jit(memory.update)
    reference: deque = deque(maxlen=size)
    written = advanced = 0
    for n in (3, 1, 4, 9, 2, 5, 5, 12, 1):
        rows, labels = _batch(rng, n, written)
        mem = update(mem, rows, labels)
        for i in range(n):
            reference.append(({k: v[i] for k, v in rows.items()}, labels[i]))
        written, advanced = written + n, advanced + min(n, size)  # a longer batch leaves its last M rows
        got_rows, got_labels, filled = memory.ordered(mem)
        count = len(reference)
        assert int(mem.size) == count and filled.tolist() == [True] * count + [False] * (size - count)
        assert int(mem.head) == advanced % size
        np.testing.assert_array_equal(got_labels[:count], [y for _, y in reference])
        for key in rows:
            np.testing.assert_array_equal(got_rows[key][:count], np.stack([r[key] for r, _ in reference]))
        # the filled slots are [0, size) before the memory is full
        assert memory.valid(mem).tolist() == [i < count for i in range(size)]


def test_keys_are_batch_then_memory_as_constants():
    rng = np.random.default_rng(0)
    z, y = rng.normal(size=(4, 3)).astype(np.float32), np.array([0, 1, 0, 2], np.int32)
    mem = memory.update(memory.init(6, z), rng.normal(size=(4, 3)).astype(np.float32), np.array([1, 1, 2, 0]))
    rows, key_labels, key_valid = memory.keys(mem, z, y)
    np.testing.assert_array_equal(rows, np.concatenate([z, mem.rows]))
    assert key_labels.tolist() == [0, 1, 0, 2, 1, 1, 2, 0, 0, 0]
    assert key_valid.tolist() == [True] * 8 + [False] * 2

    def loss(z, stored):
        keys, kl, kv = memory.keys(mem._replace(rows=stored), z, y)
        return losses.supcon(cosine(z, keys), y, key_labels=kl, self_index=jnp.arange(4), key_valid=kv)

    g_batch, g_memory = jax.grad(loss, argnums=(0, 1))(jnp.asarray(z), mem.rows)
    assert np.abs(np.asarray(g_batch)).max() > 0
    np.testing.assert_array_equal(g_memory, 0.0)  # memory rows are constants


def test_update_stores_constants_in_the_memory_dtype():
    mem = memory.init(4, jnp.zeros((1, 2), jnp.float32))

    def stored(z):
        return jnp.sum(memory.update(mem, z, jnp.array([3, 4])).rows)

    np.testing.assert_array_equal(jax.grad(stored)(jnp.ones((2, 2))), 0.0)
    half = memory.update(mem, jnp.ones((2, 2), jnp.bfloat16), jnp.array([3, 4], jnp.int8))
    assert half.rows.dtype == jnp.float32 and half.labels.dtype == jnp.int32


def test_vmap_gives_each_replica_its_own_memory():
    """Several seeds stack their state on a leading axis: each replica's memory evolves alone."""
    mem = jax.tree.map(lambda x: jnp.stack([x, x]), memory.init(3, jnp.zeros((1, 1))))
    rows = jnp.array([[[1.0], [2.0]], [[5.0], [6.0]]])
    labels = jnp.array([[1, 2], [5, 6]])
    out = jax.vmap(memory.update)(mem, rows, labels)
    assert out.labels.tolist() == [[1, 2, 0], [5, 6, 0]]
    assert out.size.tolist() == [2, 2]


def test_bad_arguments_raise_value_error_naming_the_argument():
    mem = memory.init(4, jnp.zeros((1, 3)))
    cases = [
        (lambda: memory.init(0, jnp.zeros((1, 3))), "size"),
        (lambda: memory.init(2.5, jnp.zeros((1, 3))), "size"),
        (lambda: memory.init(4, jnp.zeros(())), "rows"),
        (lambda: memory.init(4, {}), "rows"),
        (lambda: memory.update(mem, jnp.zeros((2, 4)), jnp.arange(2)), "rows"),
        (lambda: memory.update(mem, {"z": jnp.zeros((2, 3))}, jnp.arange(2)), "rows"),
        (lambda: memory.update(mem, jnp.zeros((2, 3)), jnp.arange(3)), "labels"),
        (lambda: memory.update(mem, jnp.zeros((2, 3)), jnp.zeros(2)), "labels"),
        (lambda: memory.keys(mem, jnp.zeros((2, 3)), jnp.arange(2)[:, None]), "labels"),
        (lambda: memory.keys(mem, {"a": jnp.zeros((2, 3)), "b": jnp.zeros((3, 3))}, jnp.arange(2)), "rows"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()


# pytorch-metric-learning's loss with the same hyper-parameters, on its CosineSimilarity, and geojax's.
def _pml_losses(pml):
    cos = pml.distances.CosineSimilarity()
    return {
        "supcon": (
            pml.losses.SupConLoss(temperature=0.1),
            lambda s, y, **k: losses.supcon(s, y, temperature=0.1, **k),
        ),
        "contrastive": (
            pml.losses.ContrastiveLoss(pos_margin=0.8, neg_margin=0.1, distance=cos),
            lambda s, y, **k: losses.contrastive(s, y, pos_margin=0.8, neg_margin=0.1, **k),
        ),
        "triplet": (
            pml.losses.TripletMarginLoss(margin=0.3, distance=cos),
            lambda s, y, **k: losses.triplet(s, y, margin=0.3, **k),
        ),
    }


@pytest.mark.parametrize("name", ["supcon", "contrastive", "triplet"])
def test_same_value_as_pml_cross_batch_memory_through_filling_and_wraparound(name):
    """PML's CrossBatchMemory enqueues the batch *before* its loss, into M + B slots, and drops each anchor's
    own new row; geojax reads [batch; memory of M] and enqueues after. So they compare each anchor with the
    same keys: fed the same batches (B = 6, M = 10, so PML's 16 slots wrap around mid-batch), every step's
    loss is the same."""
    torch = pytest.importorskip("torch")
    pml = pytest.importorskip("pytorch_metric_learning")
    import pytorch_metric_learning.distances  # noqa: F401
    import pytorch_metric_learning.losses  # noqa: F401

    theirs, ours = _pml_losses(pml)[name]
    b, m, d = 6, 10, 5
    wrapper = pml.losses.CrossBatchMemory(theirs, embedding_size=d, memory_size=m + b)
    mem = memory.init(m, jnp.zeros((1, d)))

    @jax.jit
    def step(mem, z, y):
        keys, key_labels, key_valid = memory.keys(mem, z, y)
        kw = dict(key_labels=key_labels, self_index=jnp.arange(b), key_valid=key_valid)
        return ours(cosine(z, keys), y, **kw), memory.update(mem, z, y)

    rng = np.random.default_rng(3)
    for t in range(6):
        z = rng.normal(size=(b, d)).astype(np.float32)
        y = rng.integers(0, 3, b).astype(np.int64)
        want = float(wrapper(torch.from_numpy(z), torch.from_numpy(y)))
        got, mem = step(mem, jnp.asarray(z), jnp.asarray(y, jnp.int32))
        np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}")
