"""The train step with a cross-batch memory (``memory=M``): equal to the loss on [batch; memory rows] computed
by hand with the memory's rows as constants (value and gradient, on 1 and 4 devices); the whole batch enqueued
after the loss, gathered in device order, from ``memory_warmup`` on; each seed its own memory; a resumed run
equal to an uninterrupted one; bad keys refused before any work."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from geojax import losses, memory, parallel
from geojax.similarity import cosine, manifold_distance
from train.app import cli, config, data, loop, optim, program, step

# SupCon on the sphere, an MLP; plain SGD (the update is the gradient: a wrong gradient shows), no clipping,
# no KoLeo, no τ/τ_base factor: the objective is exactly losses.supcon on the cosine similarity.
MODEL = dict(dataset="digits", encoder="mlp", width=16, geometry="sphere", dim=4, memory=24)
BATCHES = dict(batch_size=8, views=2, augment="none", steps=4)
OBJECTIVE = dict(koleo=0.0, base_temperature=None)
SGD = dict(optimizer="sgd", momentum=0.0, lr=1.0, warmup=0, clip=None)
CFG = {**MODEL, **BATCHES, **OBJECTIVE, **SGD}
FILLED = 13  # rows in the memory before the step: 11 empty slots, masked


def _prefilled(state):
    """The state with FILLED random unit rows (labels 0–9) enqueued into its memory."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(FILLED, 4)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    labels = rng.integers(0, 10, FILLED).astype(np.int32)
    return {**state, "memory": memory.update(state["memory"], rows, labels)}


def _batch(cfg):
    ds = data.load("digits")
    feed = program.host_feed(
        data.Batches.of(cfg), data.label_tables(ds.train_y), ds.train_x, [(0, 1)], processes=1
    )
    return jax.tree.map(lambda x: x[0], next(feed)), ds.image_shape


def _by_hand(cfg, graphdef, state, batch):
    """(loss, new params, z): supcon of the batch's views against [their embeddings; the filled memory rows as
    constants], one SGD step on its gradient; z [2n, D] the views' embeddings, view-major."""
    x = jnp.tile(data.to_unit(jnp.asarray(batch["x"])), (2, 1, 1, 1))  # augment=none: two identical views
    y = jnp.tile(jnp.asarray(batch["y"]), 2)
    stored = np.asarray(state["memory"].rows)[:FILLED]
    stored_labels = np.asarray(state["memory"].labels)[:FILLED]

    def loss(params):
        z = nnx.merge(graphdef, params, state["rest"], copy=True)(x).embedding
        keys = jnp.concatenate([z, stored])
        key_labels = jnp.concatenate([y, stored_labels])
        value = losses.supcon(cosine(z, keys), y, key_labels=key_labels, self_index=jnp.arange(len(y)))
        return value, z

    tx = optim.make_optimizer(cfg)

    @jax.jit
    def sgd_step(params):
        (value, z), grads = jax.value_and_grad(loss, has_aux=True)(params)
        updates, _ = tx.update(grads, tx.init(params), params)
        return value, jax.tree.map(jnp.add, params, updates), z

    return *sgd_step(state["params"]), y


def _close(a, b, tol=1e-5, msg=""):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(u, v, rtol=tol, atol=tol, err_msg=msg)


def test_one_step_with_memory_equals_the_loss_on_batch_and_memory_rows_by_hand():
    cfg = config.make(**CFG)
    batch, shape = _batch(cfg)
    graphdef, state = step.init_state(cfg, shape, axis_name=None)
    state = _prefilled(state)
    value, params, z, y = _by_hand(cfg, graphdef, state, batch)
    new, metrics = jax.jit(step.make_step(cfg, graphdef, optim.make_optimizer(cfg), axis_name=None))(
        state, batch
    )
    np.testing.assert_allclose(metrics["loss"], value, rtol=1e-5)
    _close(new["params"], params)
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), params, state["params"])
    assert max(jax.tree.leaves(moved)) > 1e-3  # the step moves the parameters
    # enqueued after the loss: the memory now ends with the batch's 16 view rows (view-major on one device)
    want = memory.update(state["memory"], z, y)
    _close(new["memory"], want, msg="memory")
    assert int(new["memory"].size) == 24 and int(new["memory"].head) == (FILLED + 16) % 24
    # memory_warmup: before step 1 nothing is enqueued (the loss still reads what the memory holds)
    late = dataclasses.replace(cfg, memory_warmup=1)
    held, metrics = jax.jit(step.make_step(late, graphdef, optim.make_optimizer(late), axis_name=None))(
        state, batch
    )
    np.testing.assert_allclose(metrics["loss"], value, rtol=1e-5)
    _close(held["memory"], state["memory"], tol=0, msg="warm-up")


def test_an_atlas_memory_holds_charts_and_memberships_and_the_step_reads_them():
    """Korman 2021's MTriplet (batch-all triplet on −d_M, eq. 7): the memory stores what d_M compares, the
    chart coordinates and memberships; one step equals the triplet loss on [batch; memory rows] by hand."""
    keep = (
        "dataset",
        "encoder",
        "width",
        "batch_size",
        "augment",
        "optimizer",
        "lr",
        "clip",
        "steps",
        "memory",
    )
    cfg = config.make(
        **{k: CFG[k] for k in keep},
        preset="mtriplet",
        dim=4,
        charts=3,
        mmd=0.0,
        membership=0.0,
        sampler="random",
        epochs=None,
    )
    batch, shape = _batch(cfg)
    graphdef, state = step.init_state(cfg, shape, axis_name=None)
    assert jax.tree.map(jnp.shape, state["memory"].rows) == {"coords": (24, 3, 4), "q": (24, 3)}
    rng = np.random.default_rng(1)
    coords = rng.normal(size=(FILLED, 3, 4)).astype(np.float32)
    q = jax.nn.softmax(rng.normal(size=(FILLED, 3)).astype(np.float32))
    labels = rng.integers(0, 10, FILLED).astype(np.int32)
    state = {**state, "memory": memory.update(state["memory"], {"coords": coords, "q": q}, labels)}
    x, y = data.to_unit(jnp.asarray(batch["x"])), jnp.asarray(batch["y"])
    tx = optim.make_optimizer(cfg)

    @jax.jit
    def by_hand(params):
        def loss(params):
            out = nnx.merge(graphdef, params, state["rest"], copy=True)(x)
            kc, kq = jnp.concatenate([out.coords, coords]), jnp.concatenate([out.q, q])
            sim = -manifold_distance(out.coords, out.q, kc, kq, no_overlap=1e3)
            kl = jnp.concatenate([y, labels])
            return losses.triplet(sim, y, margin=0.2, key_labels=kl, self_index=jnp.arange(8)), out

        (value, out), grads = jax.value_and_grad(loss, has_aux=True)(params)
        return value, jax.tree.map(jnp.add, params, tx.update(grads, tx.init(params), params)[0]), out

    value, params, out = by_hand(state["params"])
    new, metrics = jax.jit(step.make_step(cfg, graphdef, tx, axis_name=None))(state, batch)
    assert float(value) > 0
    np.testing.assert_allclose(metrics["loss"], value, rtol=1e-5)
    _close(new["params"], params)
    enqueued = memory.update(state["memory"], {"coords": out.coords, "q": out.q}, y)
    _close(new["memory"], enqueued, msg="atlas memory")


@pytest.mark.multidevice
def test_one_step_with_memory_on_4_devices_equals_the_loss_by_hand():
    """Each device's anchors against every device's rows and the memory: the same loss and update as by hand
    on the whole batch; every device enqueues the global batch gathered in device order (device k's views of
    its images, view-major), so every replica of the memory is the same."""
    cfg = config.make(**CFG)
    batch, shape = _batch(cfg)
    plain, _ = step.init_state(cfg, shape, axis_name=None)
    graphdef, state = step.init_state(cfg, shape)
    state = _prefilled(state)
    value, params, z, y = _by_hand(cfg, plain, state, batch)
    per_device = step.make_step(cfg, graphdef, optim.make_optimizer(cfg))
    new, metrics = parallel.data_parallel(per_device, mesh=parallel.make_mesh(4))(state, batch)
    np.testing.assert_allclose(metrics["loss"], value, rtol=1e-5)
    _close(new["params"], params)
    n = 8 // 4  # images per device
    order = [v * 8 + k * n + i for k in range(4) for v in range(2) for i in range(n)]
    _close(
        new["memory"], memory.update(state["memory"], z[np.asarray(order)], y[np.asarray(order)]), msg="order"
    )
    for shard in new["memory"].rows.addressable_shards:  # every device holds the same memory
        np.testing.assert_array_equal(shard.data, new["memory"].rows.addressable_shards[0].data)


def test_resumed_run_with_memory_equals_an_uninterrupted_one_and_each_seed_has_its_own(tmp_path):
    kw = dict(
        CFG, steps=5, batch_size=16, memory=40, memory_warmup=1, lr=0.05, checkpoint_every=2, log_every=1
    )
    kw.update(progress=False, eval_batch=512, seed=1)  # on every device (4 under the tests), state donated
    ref = loop.train(config.make(workdir=str(tmp_path / "a"), **kw)).state
    cfg = config.make(workdir=str(tmp_path / "b"), **kw)
    assert int(loop.train(cfg, stop_at=3).state["step"]) == 3  # last checkpoint at step 2
    resumed = loop.train(cfg).state
    _close(resumed, ref, tol=1e-6)
    # 4 enqueues of 32 rows (steps 1–4; step 0 is the warm-up) into 40 slots
    assert int(ref["memory"].size) == 40 and int(ref["memory"].head) == 128 % 40
    # two seeds in one program: replica 1 is the single run of seed 1, its own batches and its own memory
    pair = loop.train(config.make(workdir=str(tmp_path / "c"), **{**kw, "seed": 0, "seeds": 2})).state
    _close(step.replica(pair, 1), ref, tol=1e-5)
    assert not np.allclose(pair["memory"].rows[0], pair["memory"].rows[1])


@pytest.mark.parametrize(
    "args,match",
    [
        (
            ["loss=simo", "memory=64"],
            r"memory applies to loss=supcon\|sincere\|info_nce\|contrastive\|triplet",
        ),
        (["memory=-8"], "memory must be a non-negative integer, got -8"),
        (["memory_warmup=100"], "memory_warmup applies to memory=a positive size, not memory=0"),
        (["memory=8", "memory_warmup=-1"], "memory_warmup must be a non-negative integer"),
    ],
)
def test_bad_memory_keys_are_refused_before_any_work(args, match, capsys, tmp_path):
    with pytest.raises(ValueError, match=match):
        config.from_args(args)
    assert cli.main([*args, f"workdir={tmp_path / 'run'}"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "memory" in errors[0]
    assert not (tmp_path / "run").exists()
