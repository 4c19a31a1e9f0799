"""Batch normalisation (Ioffe & Szegedy 2015) whose training pass reads the activations once each way.

:class:`FusedBatchNorm` is ``nnx.BatchNorm`` (the same variables, running averages and evaluation mode, so
checkpoints and ``model.eval()`` carry over) with the training-mode forward and backward of
:func:`batch_norm_train`: the forward takes E[x] and E[x²] in one reduction over the activations, the backward
takes Σ dy and Σ dy·x̂ in one reduction over (dy, x) and then forms dx element-wise — the closed-form gradient
of Ioffe & Szegedy 2015 (§3, the backpropagation equations), instead of differentiating through the mean and
the variance, which reads the activations again per term.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax


def _global_mean(values: jax.Array, axis_name: str | None) -> jax.Array:
    return values if axis_name is None else lax.pmean(values, axis_name)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _train(x, scale, bias, epsilon, axis_name):
    return _train_fwd(x, scale, bias, epsilon, axis_name)[0]


def _train_fwd(x, scale, bias, epsilon, axis_name):
    axes = tuple(range(x.ndim - 1))
    xf = x.astype(jnp.float32)
    moments = _global_mean(jnp.stack([jnp.mean(xf, axes), jnp.mean(xf * xf, axes)]), axis_name)
    mean, var = moments[0], jnp.maximum(moments[1] - moments[0] ** 2, 0.0)
    rstd = lax.rsqrt(var + epsilon)
    y = ((xf - mean) * (rstd * scale) + bias).astype(x.dtype)
    return (y, mean, var), (xf, mean, rstd, scale)


def _train_bwd(epsilon, axis_name, res, cotangents):
    xf, mean, rstd, scale = res
    dy = cotangents[0].astype(jnp.float32)  # the mean and variance leave through stop_gradient
    axes = tuple(range(xf.ndim - 1))
    xhat = (xf - mean) * rstd
    sums = jnp.stack([jnp.sum(dy, axes), jnp.sum(dy * xhat, axes)])  # this device's Σ dy, Σ dy·x̂
    count = xf.size // xf.shape[-1]
    means = _global_mean(sums / count, axis_name)
    dx = (scale * rstd) * (dy - means[0] - xhat * means[1])
    return dx.astype(cotangents[0].dtype), sums[1], sums[0]


_train.defvjp(_train_fwd, _train_bwd)


def batch_norm_train(
    x: jax.Array,
    scale: jax.Array,
    bias: jax.Array,
    *,
    epsilon: float = 1e-5,
    axis_name: str | None = None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Batch norm in training mode over every axis but the last (Ioffe & Szegedy 2015, Algorithm 1).

    y = (x − μ) / √(σ² + ε) · scale + bias, with μ and σ² = E[x²] − μ² (clipped at 0) the batch's, over the
    devices of ``axis_name`` too; statistics and gradients in float32. The gradient w.r.t. x is the closed
    form dx = scale / √(σ² + ε) · (dy − mean(dy) − x̂ · mean(dy · x̂)) (means over the global batch); those
    w.r.t. scale and bias are this device's Σ dy · x̂ and Σ dy, as autodiff gives them.

    Args:
        x: [..., C] activations (float).
        scale: [C] float32.
        bias: [C] float32.
        epsilon: added to the variance.
        axis_name: the named axis (shard_map / pmap) the statistics are averaged over; None: this batch only.

    Returns:
        (y [..., C] in x's dtype, μ [C], σ² [C]); μ and σ² carry no gradient (for the running averages).
    """
    y, mean, var = _train(x, scale, bias, epsilon, axis_name)
    return y, lax.stop_gradient(mean), lax.stop_gradient(var)


class FusedBatchNorm(nnx.BatchNorm):
    """``nnx.BatchNorm`` over the last axis whose training mode runs :func:`batch_norm_train`.

    Same arguments, variables (``scale``, ``bias``, ``mean``, ``var``) and evaluation mode as
    ``nnx.BatchNorm``; the running averages update as there (``momentum``). Masks and feature axes other
    than the last are not offered.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax.models import FusedBatchNorm
        >>> bn = FusedBatchNorm(3, momentum=0.9, use_running_average=False, rngs=nnx.Rngs(0))
        >>> y = bn(jnp.arange(12.0).reshape(4, 3))
        >>> [round(float(v), 4) for v in y.mean(0)], [round(float(v), 4) for v in bn.mean[...]]
        ([0.0, 0.0, 0.0], [0.45, 0.55, 0.65])
    """

    def __call__(self, x: jax.Array, use_running_average: bool | None = None, *, mask=None) -> jax.Array:
        running = self.use_running_average if use_running_average is None else use_running_average
        if (
            running is not False
            or mask is not None
            or self.axis != -1
            or self.scale is None
            or self.bias is None
        ):
            return super().__call__(x, use_running_average, mask=mask)
        y, mean, var = batch_norm_train(
            x.astype(self.dtype or x.dtype),
            self.scale[...],
            self.bias[...],
            epsilon=self.epsilon,
            axis_name=self.axis_name,
        )
        self.mean[...] = self.momentum * self.mean[...] + (1 - self.momentum) * mean
        self.var[...] = self.momentum * self.var[...] + (1 - self.momentum) * var
        return y
