"""geojax.parallel on 4 fake CPU devices: collectives, and one train step on 4 devices == on 1 device."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from geojax import parallel
from train.app import config, data, optim, program, step

pytestmark = pytest.mark.multidevice


def test_gather_and_self_index_layout():
    def step(state, batch):
        x = batch["x"]
        return {
            "keys": parallel.gather(x),
            "cols": parallel.gather(parallel.self_index(x.shape[0])),
            "mean": parallel.pmean(jnp.mean(x)),
        }

    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    for mode in parallel.MODES:
        out = parallel.data_parallel(step, mode=mode, mesh=parallel.make_mesh(4))({}, {"x": x})
        np.testing.assert_array_equal(out["keys"], x)  # device k's rows at k·n … k·n + n − 1
        np.testing.assert_array_equal(out["cols"], np.arange(8))
        assert float(out["mean"]) == pytest.approx(x.mean())


def test_gather_gradient_sums_every_devices_cotangent():
    # f = Σ_a Σ_k w·x_a·x_k² over the global batch; its gradient needs each device's keys to receive the
    # cotangents of all anchors (all_gather's transpose), then pmean across devices.
    x = np.linspace(-1, 1, 8, dtype=np.float32)

    def local(w, batch):
        def f(w):
            z = w * batch["x"]
            keys = parallel.gather(z)
            return jax.lax.psum(jnp.sum(z[:, None] * keys[None, :] ** 2), parallel.AXIS)

        return parallel.pmean(jax.grad(f)(w))

    want = 3 * 1.3**2 * np.sum(x) * np.sum(x**2)  # d/dw of w³ Σ_a x_a Σ_k x_k²
    for mode in parallel.MODES:
        got = parallel.data_parallel(local, mode=mode, mesh=parallel.make_mesh(4))(jnp.float32(1.3), {"x": x})
        assert float(got) == pytest.approx(want, rel=1e-5)


def test_data_parallel_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        parallel.data_parallel(lambda s, b: s, mode="vmap")
    run = parallel.data_parallel(lambda s, b: s, mesh=parallel.make_mesh(4))
    with pytest.raises(ValueError, match="divisible"):
        run({}, {"x": np.zeros((6, 2))})
    with pytest.raises(ValueError, match="n_devices"):
        parallel.make_mesh(jax.device_count() + 1)


def test_runner_lowers_its_jitted_program_under_shard_map_only():
    x, mesh = jnp.arange(8.0), parallel.make_mesh(1)
    run = parallel.data_parallel(lambda s, b: parallel.global_sum(jnp.sum(b)), mesh=mesh)
    assert float(run({}, x)) == 28.0
    placed = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
    assert "reduce" in run.lower({}, placed).as_text()
    pmapped = parallel.data_parallel(lambda s, b: parallel.global_sum(jnp.sum(b)), mode="pmap")
    with pytest.raises(ValueError, match="shard_map"):
        pmapped.lower({}, x)


CASES = {
    # torus_n + SupCon + KoLeo on an MLP (the default recipe, tiny)
    "supcon_koleo": dict(encoder="mlp", width=16, dim=4, batch_size=8),
    # atlas: batch-all triplet on −d_M with ℓ_Z and ℓ_J, batch-norm CNN (synchronised statistics)
    "mtriplet_bn": dict(
        preset="mtriplet",
        encoder="cnn",
        width=4,
        norm="batch",
        charts=3,
        dim=2,
        batch_size=8,
        prior_samples=16,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_step_on_4_devices_equals_1_device(case):
    # Plain SGD: the update is linear in the gradient, so a gradient off by any factor shows (Adam's first
    # step, g/|g|, would hide one).
    cfg = config.make(**CASES[case], optimizer="sgd", momentum=0.0, lr=1.0, warmup=0, steps=4)
    ds = data.load("digits")
    graphdef, state = step.init_state(cfg, ds.image_shape)
    tx = optim.make_optimizer(cfg)
    calls = [(0, 1)]
    feed = program.host_feed(
        data.Batches.of(cfg), data.label_tables(ds.train_y), ds.train_x, calls, processes=1
    )
    batch = jax.tree.map(lambda x: x[0], next(feed))
    # Reference: the same step with no parallel machinery at all (plain square-form losses, whole batch).
    plain_graphdef, _ = step.init_state(cfg, ds.image_shape, axis_name=None)
    ref_state, ref_metrics = jax.jit(step.make_step(cfg, plain_graphdef, tx, axis_name=None))(state, batch)
    per_device = step.make_step(cfg, graphdef, tx)
    moved = jax.tree.leaves(
        jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), ref_state["params"], state["params"])
    )
    assert max(moved) > 1e-4  # the step does change the parameters
    for mode in parallel.MODES:
        new, metrics = parallel.data_parallel(per_device, mode=mode, mesh=parallel.make_mesh(4))(state, batch)
        for a, b in zip(jax.tree.leaves(new["params"]), jax.tree.leaves(ref_state["params"]), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5, err_msg=mode)
        for a, b in zip(jax.tree.leaves(new["rest"]), jax.tree.leaves(ref_state["rest"]), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5, err_msg=mode)
        for k in ref_metrics:
            np.testing.assert_allclose(
                metrics[k], ref_metrics[k], rtol=1e-5, atol=1e-6, err_msg=f"{mode} {k}"
            )


def test_state_is_plain_nnx_split():
    cfg = config.make(width=8, dim=4)
    graphdef, state = step.init_state(cfg, (8, 8, 1))
    model = nnx.merge(graphdef, state["params"], state["rest"])
    assert isinstance(model(jnp.zeros((2, 8, 8, 1))).embedding, jax.Array)


@pytest.mark.parametrize(
    "sampler,labels", [("random", "class"), ("m_per_class", "class"), ("class_subsampled", "instance")]
)
def test_device_feed_draws_the_host_feeds_batches(sampler, labels):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (90, 6, 6, 1), dtype=np.uint8)  # held on the devices as uint8
    tables = data.label_tables(rng.integers(0, 6, 90))
    per_class = {"m_per_class": 4} if sampler == "m_per_class" else {}
    cfg = config.make(sampler=sampler, labels=labels, batch_size=16, seed=3, **per_class)
    batches = data.Batches.of(cfg)

    def record(state, batch):  # a step that returns the global batch it was given
        return {"step": state["step"] + 1}, {
            k: parallel.gather(v).astype(jnp.float32) for k, v in batch.items()
        }

    mesh = parallel.make_mesh(4)
    run = program.distribute(program.make_call(record, length=1, batches=batches), mesh=mesh)
    state = step.replicate({"step": jnp.int32(5)}, mesh)
    on_devices = step.replicate({"images": images, **tables}, mesh)
    host = program.host_feed(batches, tables, images, [(5, 1), (6, 1), (7, 1)], processes=1)
    for want in host:
        state, got = run(state, on_devices, {})
        for key in ("x", "y", "pos"):
            np.testing.assert_array_equal(got[key], want[key][0], err_msg=key)
    assert int(state["step"]) == 8


def test_k_steps_per_call_equal_k_single_steps_on_4_devices():
    cfg = config.make(
        encoder="mlp", width=16, dim=4, batch_size=8, optimizer="sgd", lr=0.5, warmup=0, steps=6
    )
    ds = data.load("digits")
    graphdef, state = step.init_state(cfg, ds.image_shape)
    one = step.make_step(cfg, graphdef, optim.make_optimizer(cfg))
    mesh = parallel.make_mesh(4)
    batches = data.Batches.of(cfg)
    on_devices = step.replicate({"images": ds.train_x, **data.label_tables(ds.train_y)}, mesh)
    single = program.distribute(program.make_call(one, length=1, batches=batches), mesh=mesh)
    triple = program.distribute(program.make_call(one, length=3, batches=batches), mesh=mesh)
    # each its own copy: run donates (deletes) the state it is given
    a, b = (step.replicate(jax.tree.map(jnp.copy, state), mesh) for _ in range(2))
    losses = []
    for _ in range(3):
        a, m = single(a, on_devices, {})
        losses.append(float(m["loss"]))
    b, mean = triple(b, on_devices, {})
    assert int(a["step"]) == int(b["step"]) == 3
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert float(mean["loss"]) == pytest.approx(np.mean(losses), rel=1e-5)  # metrics: the mean of the 3
    moved = [
        float(jnp.max(jnp.abs(x - y)))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(state), strict=True)
    ]
    assert max(moved) > 1e-3
