"""The metric-learning losses on 4 fake devices equal one device on the whole batch (value and gradients),
and the ring form of the sigmoid loss equals its gathered form, in memory that does not grow with devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geojax import losses, miners, parallel
from geojax.similarity import cosine

AXIS = "data"
pytestmark = pytest.mark.multidevice
MESH = jax.make_mesh((4,), (AXIS,), devices=jax.devices()[:4]) if jax.device_count() >= 4 else None
CLASSES = 5


def _data(n=16, d=6, seed=0):
    rng = np.random.default_rng(seed)
    emb = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    proxies = jnp.asarray(rng.normal(size=(2 * CLASSES, d)), jnp.float32)  # 2 sub-centres per class
    return emb, proxies


LABELS = {
    "random": jnp.asarray(np.random.default_rng(1).integers(0, CLASSES, 16), jnp.int32),
    # devices hold different numbers of each class, and class 4 sits on one device only
    "uneven": jnp.array([0, 0, 0, 0, 1, 2, 3, 4, 1, 1, 2, 3, 0, 2, 3, 1], jnp.int32),
}


def _proxy_losses(e, proxies, y, axis_name):
    sim = cosine(e, proxies[::2])
    return [
        losses.proxy_anchor(sim, y, margin=0.2, alpha=16.0, axis_name=axis_name),
        losses.proxy_nca(2 * sim - 2, y, scale=3.0, axis_name=axis_name),
        losses.normalized_softmax(sim, y, temperature=0.2, axis_name=axis_name),
        losses.arcface(cosine(e, proxies), y, margin=0.4, scale=10.0, sub_centers=2, axis_name=axis_name),
        losses.cosface(sim, y, margin=0.3, scale=12.0, axis_name=axis_name),
    ]


def _pair_losses(sim, y, kw):
    """MS and Circle with and without the MS miner's masks, and the sigmoid loss with learnable values."""
    pos, neg = miners.multi_similarity(
        sim, y, epsilon=0.2, **{k: v for k, v in kw.items() if k != "axis_name"}
    )
    return [
        losses.multi_similarity(sim, y, alpha=3.0, beta=20.0, base=0.3, **kw),
        losses.multi_similarity(sim, y, alpha=3.0, beta=20.0, base=0.3, pos_mask=pos, neg_mask=neg, **kw),
        losses.circle(sim, y, margin=0.3, gamma=30.0, **kw),
        losses.circle(sim, y, margin=0.3, gamma=30.0, pos_mask=pos, neg_mask=neg, **kw),
        losses.sigmoid(sim, y, scale=4.0, bias=-1.5, **kw),
    ]


def single(e, proxies, y, weights):
    return jnp.dot(weights, jnp.stack(_proxy_losses(e, proxies, y, None) + _pair_losses(cosine(e, e), y, {})))


def per_device(e, proxies, y, weights):
    keys = lax.all_gather(e, AXIS, tiled=True)
    kw = dict(key_labels=lax.all_gather(y, AXIS, tiled=True), self_index=parallel.self_index(len(y), AXIS))
    pair = _pair_losses(cosine(e, keys), y, {**kw, "axis_name": AXIS})
    return jnp.dot(weights, jnp.stack(_proxy_losses(e, proxies, y, AXIS) + pair))


def _sharded(fn, argnums):
    mapped = jax.shard_map(fn, mesh=MESH, in_specs=(P(AXIS), P(), P(AXIS), P()), out_specs=P())

    def run(e, proxies, y, weights):
        split = NamedSharding(MESH, P(AXIS))
        return mapped(jax.device_put(e, split), proxies, jax.device_put(y, split), weights)

    return jax.jit(jax.value_and_grad(run, argnums=argnums))


def test_four_devices_equal_one_device_for_every_new_loss():
    """Each loss alone (a one-hot weight vector) and a random weighting of all: values and the gradients
    w.r.t. the embeddings and the proxies."""
    emb, proxies = _data()
    count = len(_proxy_losses(emb, proxies, LABELS["random"], None)) + 5
    one = jax.jit(jax.value_and_grad(single, argnums=(0, 1)))
    four = _sharded(per_device, (0, 1))
    weightings = [np.eye(count)[i] for i in range(count)] + [np.random.default_rng(2).uniform(0.5, 2, count)]
    with jax.set_mesh(MESH):
        for kind, labels in LABELS.items():
            for i, w in enumerate(weightings):
                w = jnp.asarray(w, jnp.float32)
                (v1, g1), (v4, g4) = one(emb, proxies, labels, w), four(emb, proxies, labels, w)
                msg = f"{kind} labels, weighting {i}"
                np.testing.assert_allclose(v4, v1, rtol=1e-5, atol=1e-6, err_msg=msg)
                for a, b in zip(g4, g1, strict=True):
                    np.testing.assert_allclose(
                        a, b, rtol=1e-4, atol=1e-5 * float(jnp.abs(b).max()), err_msg=msg
                    )


# ----------------------------------------------------------------------------------------------------------
# the ring form of the sigmoid loss


def _ring(e, texts, y, params):
    """Per device: the ring form; ``texts`` None: the keys are the anchors (square form)."""
    return losses.sigmoid_ring(
        e,
        y,
        scale=jnp.exp(params[0]),
        bias=params[1],
        key_embeddings=texts,
        key_labels=None if texts is None else y,
        axis_name=AXIS,
    )


def _gathered(e, texts, y, params):
    """Per device: ``sigmoid`` on the all-gathered keys, each anchor's own global column left out in the
    square form; every column counts in the image–text form."""
    keys = e if texts is None else texts
    kw = {"self_index": parallel.self_index(len(y), AXIS)} if texts is None else {}
    sim = cosine(e, lax.all_gather(keys, AXIS, tiled=True))
    key_labels = lax.all_gather(y, AXIS, tiled=True)
    return losses.sigmoid(
        sim, y, scale=jnp.exp(params[0]), bias=params[1], key_labels=key_labels, axis_name=AXIS, **kw
    )


@pytest.mark.parametrize("form", ["square", "image_text"])
def test_ring_equals_gathered_value_and_gradients(form):
    """Values and gradients w.r.t. the embeddings (images and texts) and the learned scale and bias."""
    image_text = form == "image_text"
    emb, texts = _data(seed=3)[0], _data(seed=4)[0]
    labels = jnp.arange(16) if image_text else LABELS["uneven"]
    params = jnp.array([np.log(10.0), -10.0], jnp.float32) * 0.3

    def sharded(local):
        def per_device(e, t, y, p):
            return local(e, t if image_text else None, y, p)

        mapped = jax.shard_map(
            per_device, mesh=MESH, in_specs=(P(AXIS), P(AXIS), P(AXIS), P()), out_specs=P()
        )

        def run(e, t, y, p):
            split = NamedSharding(MESH, P(AXIS))
            return mapped(*jax.device_put((e, t, y), split), p)

        return jax.jit(jax.value_and_grad(run, argnums=(0, 1, 3)))

    with jax.set_mesh(MESH):
        (v_ring, g_ring), (v_gathered, g_gathered) = (
            sharded(fn)(emb, texts, labels, params) for fn in (_ring, _gathered)
        )
    np.testing.assert_allclose(v_ring, v_gathered, rtol=1e-5)
    for a, b in zip(g_ring, g_gathered, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * max(float(jnp.abs(b).max()), 1e-6))
    # and one device on the whole batch
    sim = cosine(emb, texts if image_text else emb)
    kw = {"key_labels": labels} if image_text else {}
    want = losses.sigmoid(sim, labels, scale=jnp.exp(params[0]), bias=params[1], **kw)
    np.testing.assert_allclose(v_ring, want, rtol=1e-5)


@pytest.mark.parametrize("mode", parallel.MODES)
def test_ring_in_a_data_parallel_step(mode):
    """The application's convention: the gradient inside the per-device step, then pmean (shard_map without
    replication checks, or pmap), equals one device's gradient of the whole batch."""
    emb, _ = _data(seed=5)
    labels = LABELS["random"]
    params = {"w": jnp.linspace(0.5, 1.5, 6), "t": jnp.float32(1.2), "b": jnp.float32(-2.0)}

    def loss(p, e, y, axis_name):
        return losses.sigmoid_ring(e * p["w"], y, scale=jnp.exp(p["t"]), bias=p["b"], axis_name=axis_name)

    def step(p, batch):
        value, grad = jax.value_and_grad(loss)(p, *batch, AXIS)
        return value, parallel.pmean(grad, AXIS)

    value, grad = parallel.data_parallel(step, mode=mode, mesh=MESH)(params, (emb, labels))
    want, want_grad = jax.value_and_grad(lambda p: losses.sigmoid(
        cosine(emb * p["w"], emb * p["w"]), labels, scale=jnp.exp(p["t"]), bias=p["b"]))(params)  # fmt: skip
    np.testing.assert_allclose(value, want, rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-4, atol=1e-6, err_msg=k)


def _compiled_temporary_bytes(fn, devices, n_local=256, d=32):
    mesh = jax.make_mesh((devices,), (AXIS,), devices=jax.devices()[:devices])
    split = NamedSharding(mesh, P(AXIS))
    e = jax.ShapeDtypeStruct((n_local * devices, d), jnp.float32, sharding=split)
    y = jax.ShapeDtypeStruct((n_local * devices,), jnp.int32, sharding=split)
    mapped = jax.shard_map(
        lambda e, y: fn(e, None, y, jnp.zeros(2)), mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P()
    )
    with jax.set_mesh(mesh):
        stats = jax.jit(jax.grad(mapped)).lower(e, y).compile().memory_analysis()
    if stats is None:
        pytest.skip("no memory analysis on this backend")
    return stats.temp_size_in_bytes


def test_ring_memory_does_not_grow_with_the_devices():
    """fwd+bwd temporary memory per device, 256 anchors each: the gathered form's grows with the global batch
    (an [n, n·devices] matrix), the ring's does not."""
    ring = {k: _compiled_temporary_bytes(_ring, k) for k in (2, 4)}
    gathered = {k: _compiled_temporary_bytes(_gathered, k) for k in (2, 4)}
    assert gathered[4] > 1.5 * gathered[2]
    assert ring[4] <= 1.1 * ring[2]
    assert ring[4] < gathered[4] / 2


def test_ring_takes_a_scale_that_varies_over_the_devices():
    """A scale sharded over the devices (each holding the same value) gives the replicated scale's loss."""
    emb, _ = _data(seed=6)
    labels = LABELS["random"]

    def per_device(e, y, t):
        return losses.sigmoid_ring(e, y, scale=t[0], bias=-1.0, axis_name=AXIS)

    mapped = jax.jit(
        jax.shard_map(per_device, mesh=MESH, in_specs=(P(AXIS), P(AXIS), P(AXIS)), out_specs=P())
    )
    with jax.set_mesh(MESH):
        got = mapped(*jax.device_put((emb, labels, jnp.full(4, 3.0)), NamedSharding(MESH, P(AXIS))))
    want = losses.sigmoid(cosine(emb, emb), labels, scale=3.0, bias=-1.0)
    np.testing.assert_allclose(got, want, rtol=1e-5)
