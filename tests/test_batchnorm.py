"""FusedBatchNorm and batch_norm_train against flax's nnx.BatchNorm, against the textbook formula in float64
numpy, and across devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax import lax

from geojax import models, parallel
from geojax.models import FusedBatchNorm, batch_norm_train


def _inputs(seed: int = 0, shape=(8, 5, 5, 6)):
    rng = np.random.default_rng(seed)
    x = rng.normal(2.0, 3.0, size=shape).astype(np.float32)
    scale = rng.normal(1.0, 0.3, size=shape[-1]).astype(np.float32)
    bias = rng.normal(size=shape[-1]).astype(np.float32)
    w = rng.normal(size=shape).astype(np.float32)  # a loss Σ w·y² that makes dy depend on y
    return x, scale, bias, w


def _numpy_grad(x, scale, bias, w, eps=1e-5):
    """Value and gradients of Σ w·y², y the batch norm of x (float64), by the chain rule through μ and σ²
    written out (Ioffe & Szegedy 2015, §3)."""
    x, scale, bias, w = (a.astype(np.float64) for a in (x, scale, bias, w))
    axes = tuple(range(x.ndim - 1))
    m = x.size // x.shape[-1]
    mu = x.mean(axes)
    var = ((x - mu) ** 2).mean(axes)
    xhat = (x - mu) / np.sqrt(var + eps)
    y = xhat * scale + bias
    dy = 2 * w * y
    dxhat = dy * scale
    dvar = np.sum(dxhat * (x - mu), axes) * -0.5 * (var + eps) ** -1.5
    dmu = np.sum(-dxhat / np.sqrt(var + eps), axes) + dvar * np.sum(-2 * (x - mu), axes) / m
    dx = dxhat / np.sqrt(var + eps) + dvar * 2 * (x - mu) / m + dmu / m
    return np.sum(w * y**2), dx, np.sum(dy * xhat, axes), np.sum(dy, axes)


def test_values_and_gradients_equal_the_chain_rule_in_float64():
    x, scale, bias, w = _inputs()

    def loss(x, scale, bias):
        y, _, _ = batch_norm_train(x, scale, bias)
        return jnp.sum(w * y**2)

    value, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(x, scale, bias)
    want, *want_grads = _numpy_grad(x, scale, bias, w)
    np.testing.assert_allclose(value, want, rtol=1e-5)
    for got, ref in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_the_module_equals_flax_batch_norm_in_training_and_evaluation():
    x, _, _, w = _inputs(1)
    ours = FusedBatchNorm(6, momentum=0.9, rngs=nnx.Rngs(0))
    theirs = nnx.BatchNorm(6, momentum=0.9, rngs=nnx.Rngs(0))
    assert jax.tree.structure(nnx.state(ours)) == jax.tree.structure(nnx.state(theirs))  # checkpoints carry

    def loss(module, x):
        return jnp.sum(w * module(x) ** 2)

    for step in range(3):  # the running averages follow flax's
        got = nnx.value_and_grad(loss, argnums=(0, 1))(ours, x + step)
        want = nnx.value_and_grad(loss, argnums=(0, 1))(theirs, x + step)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        for a, b in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * float(jnp.abs(b).max()))
    np.testing.assert_allclose(ours.mean[...], theirs.mean[...], rtol=1e-6)
    np.testing.assert_allclose(ours.var[...], theirs.var[...], rtol=1e-5)
    ours.eval()
    theirs.eval()
    np.testing.assert_allclose(ours(x), theirs(x), rtol=1e-5, atol=1e-5)


def test_gradient_is_finite_for_a_constant_channel():
    x = jnp.ones((4, 3))  # variance 0: the normalised value is 0, the gradient finite
    grads = jax.grad(lambda x, s, b: jnp.sum(batch_norm_train(x, s, b)[0] ** 2), argnums=(0, 1, 2))(
        x, jnp.ones(3), jnp.zeros(3)
    )
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)


def test_four_devices_equal_one_device_on_the_global_batch():
    """Synchronised over the devices, the statistics and dx are the global batch's; scale and bias get
    each device's own sums, which add up to the global gradient."""
    x, scale, bias, w = _inputs(2, shape=(16, 3, 3, 5))

    def grads(params, batch, axis_name):
        def loss(x, scale, bias):
            return jnp.sum(batch[1] * batch_norm_train(x, scale, bias, axis_name=axis_name)[0] ** 2)

        return jax.grad(loss, argnums=(0, 1, 2))(batch[0], *params)

    def per_device(params, batch):
        dx, dscale, dbias = grads(params, batch, parallel.AXIS)
        return lax.all_gather(dx, parallel.AXIS, tiled=True), *(
            lax.psum(g, parallel.AXIS) for g in (dscale, dbias)
        )

    got = parallel.data_parallel(per_device, mesh=parallel.make_mesh(4))((scale, bias), (x, w))
    want = grads((scale, bias), (x, w), None)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_encoders_take_it_by_name():
    cnn = models.encoder("cnn", input_shape=(12, 12, 1), width=4, norm="fused_batch", rngs=nnx.Rngs(0))
    assert isinstance(cnn.norms[0], FusedBatchNorm)
    assert cnn(jnp.ones((2, 12, 12, 1))).shape == (2, 32)
    with pytest.raises(ValueError, match="norm"):
        models.encoder("cnn", input_shape=(12, 12, 1), width=4, norm="fused", rngs=nnx.Rngs(0))
