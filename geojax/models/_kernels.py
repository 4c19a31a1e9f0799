"""The custom-gradient kernels of :class:`geojax.models.SmallCNN`: the one-channel convolution as a sum
over taps (:func:`tap_conv`) and the 2×2 max-pool whose gradient is two element-wise passes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

_NHWC = ("NHWC", "HWIO", "NHWC")


def tap_conv(
    lhs: jax.Array,
    rhs: jax.Array,
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    *,
    lhs_dilation: Sequence[int] | None = None,
    rhs_dilation: Sequence[int] | None = None,
    dimension_numbers: lax.ConvGeneralDilatedDimensionNumbers = None,
    feature_group_count: int = 1,
    precision: lax.PrecisionLike = None,
    **kwargs: Any,
) -> jax.Array:
    """``lax.conv_general_dilated`` for a one-channel, stride-1, ``"SAME"`` convolution, as a sum over taps.

    Same arguments, same values to fp32 round-off, for a one-channel, stride-1, ``"SAME"``, undilated
    NHWC/HWIO convolution with an odd kernel, computed as a sum over the kernel's taps of the shifted image
    times that tap's weights. The kernel's gradient is one matmul, [kh·kw, N·H·W] shifted images × [N·H·W, O]
    output gradients. For one input channel XLA:CPU's convolution is slow, and so is a matmul with a
    contraction of 9; the sum over taps beat both on the small CNN's first layer (docs/performance.md, the
    step profile). :class:`SmallCNN` passes it to ``nnx.Conv`` for a one-channel image.

    Args:
        lhs: [N, H, W, 1] image (NHWC).
        rhs: [kh, kw, 1, O] kernel (HWIO), kh and kw odd.
        window_strides: must be (1, 1).
        padding: must be ``"SAME"``.
        lhs_dilation: None or all ones.
        rhs_dilation: None or all ones.
        dimension_numbers: must describe NHWC / HWIO / NHWC.
        feature_group_count: must be 1.
        precision: the precision of the kernel-gradient matmul.
        **kwargs: further arguments of ``lax.conv_general_dilated``, all None (e.g. ``out_sharding``, which
            ``nnx.Conv`` passes as None).

    Returns:
        [N, H, W, O] the convolution, in the result dtype of ``lhs`` and ``rhs`` (accumulated in fp32).

    Raises:
        ValueError: any other configuration.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> import jax
        >>> x, k, dn = jnp.ones((2, 5, 5, 1)), jnp.ones((3, 3, 1, 4)), ("NHWC", "HWIO", "NHWC")
        >>> y = models.tap_conv(x, k, (1, 1), "SAME", dimension_numbers=dn)
        >>> bool(jnp.allclose(y, jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=dn)))
        True
    """
    kh, kw, c, _ = rhs.shape
    plain = (
        lhs.ndim == 4
        and c == 1
        and tuple(window_strides) == (1, 1)
        and padding == "SAME"
        and all(d == 1 for d in (*(lhs_dilation or ()), *(rhs_dilation or ())))
        and feature_group_count == 1
        and kh % 2 == 1
        and kw % 2 == 1
        and all(v is None for v in kwargs.values())  # e.g. out_sharding, which nnx.Conv passes as None
        and lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
        == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC)
    )
    if not plain:
        raise ValueError(
            "tap_conv needs a one-channel stride-1 'SAME' undilated NHWC/HWIO convolution with an odd "
            f"kernel; got lhs {lhs.shape}, rhs {rhs.shape}, strides {tuple(window_strides)}, "
            f"padding {padding!r}"
        )
    return _tap_conv(lhs, rhs, precision)


def _taps(x: jax.Array, kh: int, kw: int) -> jax.Array:
    """[N, H, W] → [kh·kw, N, H, W]: the zero-padded image shifted to each tap of a kh×kw kernel."""
    _, h, w = x.shape
    padded = jnp.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    return jnp.stack([padded[:, i : i + h, j : j + w] for i in range(kh) for j in range(kw)])


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _tap_conv(x: jax.Array, k: jax.Array, precision) -> jax.Array:
    kh, kw, _, o = k.shape
    taps = _taps(x[..., 0].astype(jnp.float32), kh, kw)  # fp32 accumulation, as a convolution's
    weights = k.reshape(kh * kw, o).astype(jnp.float32)
    out = taps[0, ..., None] * weights[0]
    for t in range(1, kh * kw):
        out = out + taps[t, ..., None] * weights[t]
    return out.astype(jnp.result_type(x, k))


def _tap_conv_fwd(x, k, precision):
    return _tap_conv(x, k, precision), (x, k)


def _tap_conv_bwd(precision, res, g):
    x, k = res
    kh, kw, _, o = k.shape
    taps = _taps(x[..., 0], kh, kw).reshape(kh * kw, -1)
    dk = jnp.matmul(taps, g.reshape(-1, o), precision=precision, preferred_element_type=jnp.float32)
    # The image's gradient (unused, so removed, when the image is data): the taps' transposes, summed.
    dx = jax.vjp(lambda x: _taps(x, kh, kw), x[..., 0])[1](jnp.einsum("nhwo,to->tnhw", g, k.reshape(-1, o)))
    return dx[0][..., None].astype(x.dtype), dk.astype(k.dtype).reshape(k.shape)


_tap_conv.defvjp(_tap_conv_fwd, _tap_conv_bwd)


@jax.custom_vjp
def max_pool_2x2(h: jax.Array) -> jax.Array:
    """2×2 max-pool, stride 2, VALID, as a reshape and a max (:class:`SmallCNN`'s pooling).

    Its gradient goes to each window's maxima, split evenly between ties (as ``jnp.max``'s), in two
    element-wise passes (ties counted over the four strided quarters of ``h``): XLA:CPU runs autodiff's
    version (a reduction counting the ties) and ``reduce_window``'s (select-and-scatter) several times slower.

    Args:
        h: [N, H, W, C] activations (an odd last row or column is dropped).

    Returns:
        [N, H // 2, W // 2, C], each window's maximum.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax.models import _kernels
        >>> _kernels.max_pool_2x2(jnp.arange(16.0).reshape(1, 4, 4, 1))[0, :, :, 0].tolist()
        [[5.0, 7.0], [13.0, 15.0]]
    """
    return _pool_windows(h).max(axis=(2, 4))


def _pool_windows(h: jax.Array) -> jax.Array:
    """[N, H, W, C] → [N, H//2, 2, W//2, 2, C]: the 2×2 windows (an odd last row or column dropped)."""
    n, hh, ww, c = h.shape
    return h[:, : hh // 2 * 2, : ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, c)


def _max_pool_2x2_fwd(h):
    out = max_pool_2x2(h)
    return out, (h, out)


def _max_pool_2x2_bwd(res, g):
    h, out = res
    n, hh, ww, c = h.shape
    quarters = [h[:, i : hh // 2 * 2 : 2, j : ww // 2 * 2 : 2] for i in range(2) for j in range(2)]
    ties = sum((q == out).astype(g.dtype) for q in quarters)
    at_max = _pool_windows(h) == out[:, :, None, :, None]
    dh = jnp.where(at_max, (g / ties)[:, :, None, :, None], 0).astype(h.dtype)
    dh = dh.reshape(n, hh // 2 * 2, ww // 2 * 2, c)
    return (jnp.pad(dh, ((0, 0), (0, hh % 2), (0, ww % 2), (0, 0))),)


max_pool_2x2.defvjp(_max_pool_2x2_fwd, _max_pool_2x2_bwd)
