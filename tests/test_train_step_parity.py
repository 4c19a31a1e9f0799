"""The PyTorch twin of the train step (benchmarks.train_step) computes what geojax's step computes, so the
benchmark times the same work: from the same weights and batch (fp32, CPU) the same loss, the same gradients
and the same updated weights, with the clipping active. Four recipes: Stowell 2026's CIFAR one (ResNet-18
with batch norm, SupCon × τ/τ_base + KoLeo, SGD, element-wise clipping) at a small width, and the digits one
(AdamW, global-norm clipping) with the MLP and with the small CNN, and the CPU recipe (the small CNN with
batch norm on the sphere)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import train_step as bench
from train.app import config, optim, step

torch = pytest.importorskip("torch")


RECIPES = {
    "resnet18": (
        dict(preset="supcon_torus_n_cifar10", epochs=None, steps=10, ema=None, width=4, precision="fp32"),
        (32, 32, 3),
    ),
    "mlp": (dict(preset="supcon_torus_n", width=32, warmup=0), (6, 6, 3)),  # lr at step 0: the rate
    # the small CNN on one channel (tap_conv), 12 → 6 → 3 before the dense layer: the flattening order counts
    "cnn": (dict(preset="supcon_torus_n", encoder="cnn", width=4, warmup=0), (12, 12, 1)),
    # the CPU recipe for 28×28 images (benchmarks.memory): the small CNN with batch norm, sphere D = 16
    "cnn_bn_sphere": (
        dict(preset="supcon_sphere_cpu", width=4, warmup=0, epochs=None, steps=10),
        (12, 12, 1),
    ),
}


def _case(name: str) -> bench.Case:
    overrides, shape = RECIPES[name]
    cfg = config.make(dataset="digits", augment="none", batch_size=8, **overrides)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (8, *shape), dtype=np.uint8)
    labels = np.array([0, 1, 2, 0, 1, 2, 0, 3], np.int32)  # label 3 has no other image: only its other view
    return bench.Case(name, cfg, images, labels)


def _batch(case: bench.Case) -> dict[str, jax.Array]:
    return {"x": jnp.asarray(case.images), "y": jnp.asarray(case.labels), "pos": jnp.arange(len(case.labels))}


def _geojax_grads(case: bench.Case, state: step.State, graphdef) -> tuple[float, dict]:
    loss = step.make_loss(case.cfg, graphdef, axis_name=None)
    (total, _), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(
        state["params"], state["rest"], _batch(case), jax.random.key(0)
    )
    return float(total), grads


def _as_torch(case: bench.Case, tree) -> dict[str, np.ndarray]:
    """A geojax parameter-shaped tree in the PyTorch twin's names and layouts."""
    twin = bench.torch_model(case.cfg, case.images.shape[1:])
    bench.load_params(twin, tree)
    return {name: p.detach().numpy() for name, p in twin.named_parameters()}


def _close(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], rtol: float, scale: float) -> None:
    assert ours.keys() == theirs.keys()
    for name in ours:
        np.testing.assert_allclose(theirs[name], ours[name], rtol=rtol, atol=scale, err_msg=name)


@pytest.mark.parametrize("name", RECIPES)
def test_same_loss_and_gradients(name):
    case = _case(name)
    graphdef, state = step.init_state(case.cfg, case.images.shape[1:], axis_name=None)
    total, grads = _geojax_grads(case, state, graphdef)
    twin = bench.torch_step(case, "cpu", params=state["params"])
    loss = twin.batch_loss(torch.arange(8))
    loss.backward()
    assert loss.item() == pytest.approx(total, rel=1e-5)
    ours = _as_torch(case, grads)
    theirs = {n: p.grad.numpy() for n, p in twin.model.named_parameters()}
    _close(ours, theirs, rtol=1e-3, scale=1e-4 * max(np.abs(g).max() for g in ours.values()))


@pytest.mark.parametrize("name", RECIPES)
def test_same_step_with_active_clipping(name):
    case = _case(name)
    graphdef, state = step.init_state(case.cfg, case.images.shape[1:], axis_name=None)
    _, grads = _geojax_grads(case, state, graphdef)
    flat = np.concatenate([np.abs(np.asarray(g)).ravel() for g in jax.tree.leaves(grads)])
    # clip a quarter of the elements (element-wise) or to half the global norm
    clip = np.quantile(flat, 0.75) if case.cfg.clip_mode == "value" else 0.5 * np.linalg.norm(flat)
    case = dataclasses.replace(case, cfg=dataclasses.replace(case.cfg, clip=float(clip)))
    one = jax.jit(step.make_step(case.cfg, graphdef, optim.make_optimizer(case.cfg), axis_name=None))
    new, metrics = one(state, _batch(case))
    twin = bench.torch_step(case, "cpu", params=state["params"])
    loss = twin.step(torch.arange(8))
    assert loss.item() == pytest.approx(float(metrics["loss"]), rel=1e-5)
    before = _as_torch(case, state["params"])
    moved = {n: w - before[n] for n, w in _as_torch(case, new["params"]).items()}
    theirs = {n: p.detach().numpy() - before[n] for n, p in twin.model.named_parameters()}
    largest = max(np.abs(m).max() for m in moved.values())
    assert largest > 0
    _close(moved, theirs, rtol=1e-3, scale=1e-3 * largest)
