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
pytestmark = pytest.mark.multidevice


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


MESH = jax.make_mesh((4,), (AXIS,), devices=jax.devices()[:4]) if jax.device_count() >= 4 else None


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


# A cross-batch memory of 6 rows, two of them empty slots: constant keys after the batch's (geojax.memory).
MEMORY = _data(n=6, seed=3)
MEMORY_VALID = jnp.array([True, True, False, True, False, True])


def _with_memory(fn):
    """The loss with keys [the whole batch; MEMORY], on one device and per device (gathered keys first)."""

    def extend(keys, key_labels):
        return (
            jnp.concatenate([keys, MEMORY[0]]),
            jnp.concatenate([key_labels, MEMORY[1]]),
            jnp.concatenate([jnp.ones(len(key_labels), bool), MEMORY_VALID]),
        )

    def single(e, y):
        keys, key_labels, valid = extend(e, y)
        return fn(cosine(e, keys), y, key_labels=key_labels, self_index=jnp.arange(len(y)), key_valid=valid)

    def local(e, y):
        keys, kw = _gathered(e, y)
        keys, kw["key_labels"], valid = extend(keys, kw["key_labels"])
        return fn(cosine(e, keys), y, key_valid=valid, **kw)

    return single, local


# name: ((single-device loss, per-device loss), whether gradients are compared too)
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
    "supcon_memory": (_with_memory(losses.supcon), True),
    "info_nce_memory": (_with_memory(losses.info_nce), False),
    "contrastive_memory": (_with_memory(partial(losses.contrastive, pos_margin=0.8, neg_margin=0.1)), False),
    "triplet_memory": (_with_memory(partial(losses.triplet, margin=0.3)), True),
    "lifted_structured_memory": (_with_memory(partial(losses.lifted_structured, neg_margin=0.5)), True),
}


def _stacked(names, which):
    """One function returning the vector of the named losses (one compilation for all of them)."""
    fns = [CASES[name][0][which] for name in names]
    return lambda e, y: jnp.stack([fn(e, y) for fn in fns])


LABELS = {
    "random": _data()[1],
    # devices hold different numbers of anchors with positives: a per-device mean would be wrong
    "uneven": jnp.array([0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 1, 8, 9, 10, 2], jnp.int32),
}


def test_four_devices_equal_one_device_for_every_loss():
    names = list(CASES)
    emb = _data()[0]
    single, sharded = jax.jit(_stacked(names, 0)), _on_mesh(_stacked(names, 1))
    with jax.set_mesh(MESH):
        for kind, labels in LABELS.items():
            want, got = single(emb, labels), sharded(emb, labels)
            for name, w, g in zip(names, want, got, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{name}, {kind} labels")


def test_four_devices_gradients_equal_one_device():
    """Gradient of a randomly weighted sum of the losses (one compilation; a wrong gradient in any of them
    changes it)."""
    names = [name for name, (_, grad) in CASES.items() if grad]
    weights = jnp.asarray(np.random.default_rng(7).uniform(0.5, 2.0, len(names)), jnp.float32)
    emb, labels = _data()

    def weighted(which):
        stacked = _stacked(names, which)
        return lambda e, y: jnp.dot(weights, stacked(e, y))

    want = jax.jit(jax.grad(weighted(0)))(emb, labels)
    sharded = jax.grad(_on_mesh(weighted(1)))
    with jax.set_mesh(MESH):
        np.testing.assert_allclose(sharded(emb, labels), want, rtol=1e-5, atol=1e-6, err_msg=str(names))
