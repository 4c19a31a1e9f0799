"""Distributed form: 4 fake devices with all-gathered keys equal one device on the whole batch."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geojax import losses
from geojax.similarity import cosine

AXIS = "data"


def _data(n=16, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(n, d)), jnp.float32), jnp.asarray(
        rng.integers(0, classes, n), jnp.int32
    )


def _gathered(e, y):
    """Local anchors, gathered keys and labels, and each anchor's own global column."""
    keys = lax.all_gather(e, AXIS, tiled=True)
    key_labels = lax.all_gather(y, AXIS, tiled=True)
    self_index = lax.axis_index(AXIS) * e.shape[0] + jnp.arange(e.shape[0])
    return keys, dict(key_labels=key_labels, self_index=self_index, axis_name=AXIS)


MESH = jax.make_mesh((4,), (AXIS,))


def _on_mesh(local):
    """The per-device loss under shard_map, as a function of the whole batch (sharded over 4 devices)."""
    mapped = jax.jit(jax.shard_map(local, mesh=MESH, in_specs=(P(AXIS), P(AXIS)), out_specs=P()))

    def run(e, y):
        return mapped(*jax.device_put((e, y), NamedSharding(MESH, P(AXIS))))

    return run


def _sim_loss(fn):
    def single(e, y):
        return fn(cosine(e, e), y)

    def local(e, y):
        keys, kw = _gathered(e, y)
        return fn(cosine(e, keys), y, **kw)

    return single, local


def _simo():
    def local(e, y):
        keys, kw = _gathered(e, y)
        return losses.simo(e, y, key_embeddings=keys, **kw)

    return losses.simo, local


def _blocked(fn):
    def local(e, y):
        keys, kw = _gathered(e, y)
        return fn(e, y, key_embeddings=keys, block_size=3, **kw)

    return partial(fn, block_size=3), local


CASES = {
    "supcon": (_sim_loss(losses.supcon), True),
    "sincere": (_sim_loss(losses.sincere), False),
    "info_nce": (_sim_loss(losses.info_nce), False),
    "contrastive": (_sim_loss(partial(losses.contrastive, pos_margin=0.8, neg_margin=0.1)), False),
    "triplet_all": (_sim_loss(partial(losses.triplet, margin=0.3)), True),
    "triplet_all_mean": (_sim_loss(partial(losses.triplet, margin=0.3, reduction="mean")), False),
    "triplet_hard": (_sim_loss(partial(losses.triplet, margin=0.3, mining="hard")), True),
    "triplet_semihard": (_sim_loss(partial(losses.triplet, margin=0.3, mining="semihard")), False),
    "lifted_structured": (_sim_loss(partial(losses.lifted_structured, neg_margin=0.5)), True),
    "simo": (_simo(), True),
    "supcon_blocked": (_blocked(losses.supcon_blocked), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_four_devices_equal_one_device(name):
    (single, local), check_grad = CASES[name]
    emb, labels = _data()
    sharded = _on_mesh(local)
    with jax.set_mesh(MESH):
        _compare(single, sharded, emb, labels, check_grad)


def _compare(single, sharded, emb, labels, check_grad):
    if check_grad:
        (v1, g1), (v4, g4) = (
            jax.jit(jax.value_and_grad(single))(emb, labels),
            jax.value_and_grad(sharded)(emb, labels),
        )
        np.testing.assert_allclose(g4, g1, rtol=1e-5, atol=1e-6)
    else:
        v1, v4 = jax.jit(single)(emb, labels), sharded(emb, labels)
    np.testing.assert_allclose(v4, v1, rtol=1e-5, atol=1e-6)


def test_anchor_count_normalisation_is_global():
    """Devices hold different numbers of anchors with positives: a per-device mean would be wrong."""
    emb, _ = _data()
    labels = jnp.array([0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 1, 8, 9, 10, 2], jnp.int32)
    single, local = _sim_loss(losses.supcon)
    with jax.set_mesh(MESH):
        _compare(single, _on_mesh(local), emb, labels, check_grad=False)
