"""Flax NNX encoders and embedding heads for sphere, torus and atlas geometries (Stowell 2026; Korman 2021).

Encoders map images ``x: [N, H, W, C]`` (or flat ``[N, F]`` for the MLP) to features ``h: [N, F]``.
Heads map features to the embedding space the losses see:

- :class:`GeometryHead` — Stowell 2026's head, Linear(h, 4D) → ReLU → Linear(4D, D), then the projection of
  the chosen geometry (``euclidean`` raw, ``sphere`` L2, ``torus_c`` Clifford of D turns → 2D,
  ``torus_n`` pairwise L2 of D (even) values).
- :class:`AtlasHead` — Korman 2021's n + 1 linear heads: pre-sigmoid chart coordinates ``[N, n, d]`` and the
  softmax membership ``q: [N, n]``.
- :class:`ProjectionHead` and :class:`MixedProjection` — SimCLR's projection head (Chen et al. 2020: one
  hidden layer as wide as its input) and MSimCLR's q-weighted sum of one such head per chart,
  z = Σ_c q_c h_c(sigmoid(coords_c)) (Korman 2021, Table 1; the head sizes of its public code).

``compute_dtype`` (e.g. ``jnp.bfloat16``) sets the dtype of the layer computations; parameters stay
float32 and every head casts to float32 before its projection, so losses see float32 embeddings.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal, NamedTuple, Protocol, get_args

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax
from jax.typing import DTypeLike

from geojax import _checks, manifolds, quantize
from geojax.manifolds import GEOMETRIES, TORUS_GEOMETRIES, VECTOR_GEOMETRIES

EncoderName = Literal["mlp", "cnn", "resnet18", "resnet50"]
ProjectionName = Literal["none", "mlp", "mixed"]
ENCODERS: tuple[str, ...] = get_args(EncoderName)
#: Each encoder's own width (what ``encoder(width=None)`` builds): the MLP's hidden width; the small CNN's
#: first stage (convolutions w, 2w, then 8w dense features); the ResNets' base width, 64 as He et al. (2016)
#: and torchvision's ResNet-18 and ResNet-50 (stages 64, 128, 256, 512; the bottleneck's outputs ×4).
OWN_WIDTHS: dict[str, int] = {"mlp": 512, "cnn": 32, "resnet18": 64, "resnet50": 64}
PROJECTIONS: tuple[str, ...] = get_args(ProjectionName)


def embedding_width(geometry: str, dim: int) -> int:
    """Extrinsic width of a geometry head's output for pre-projection width ``dim`` (Stowell 2026 Tab. 1).

    torus_c maps D turns to 2D coordinates; the other vector geometries keep D.

    Args:
        geometry: one of the vector geometries ('euclidean', 'sphere', 'torus_c', 'torus_n').
        dim: D, the head's pre-projection width.

    Returns:
        2·dim for torus_c, else dim.

    Raises:
        ValueError: ``geometry`` is not a vector geometry.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> models.embedding_width("torus_c", 8), models.embedding_width("sphere", 8)
        (16, 8)
    """
    _checks.check_choice(geometry, "geometry", VECTOR_GEOMETRIES)
    return 2 * dim if geometry == "torus_c" else dim


def project(raw: jax.Array, geometry: str) -> jax.Array:
    """Apply the geometry's projection (Stowell 2026 Tab. 1) to raw head output, in float32.

    ``sphere``: L2 (:func:`geojax.manifolds.sphere`); ``torus_c``: Clifford of D turns → 2D
    (:func:`geojax.manifolds.torus_clifford`); ``torus_n``: pairwise L2 (:func:`geojax.manifolds.torus_l2p`);
    any other geometry (``euclidean``): the raw vector.

    Args:
        raw: [N, D] raw head output.
        geometry: the geometry's name.

    Returns:
        [N, D'] float32 embeddings (D' = 2D for torus_c, else D).

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> print(models.project(jnp.array([[3.0, 4.0]]), "sphere"))
        [[0.6 0.8]]
    """
    raw = raw.astype(jnp.float32)
    if geometry == "sphere":
        return manifolds.sphere(raw)
    if geometry == "torus_c":
        return manifolds.torus_clifford(raw)
    if geometry == "torus_n":
        return manifolds.torus_l2p(raw)
    return raw


class MLP(nnx.Module):
    """Multi-layer perceptron encoder: flatten → [Linear → ReLU] per hidden width.

    Called on x: [N, ...] it returns [N, F], F = ``hidden[-1]`` (also ``.features``).

    Args:
        in_features: the flattened input width (a positive int).
        hidden: the hidden widths, at least one.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``in_features`` is not a positive int or ``hidden`` is empty.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> mlp = models.MLP(12, hidden=(16,), rngs=nnx.Rngs(0))
        >>> mlp(jnp.ones((2, 2, 2, 3))).shape
        (2, 16)
    """

    def __init__(
        self,
        in_features: int,
        *,
        hidden: Sequence[int] = (512, 512),
        compute_dtype: DTypeLike | None = None,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(in_features, "in_features")
        if not hidden:
            raise ValueError("hidden must list at least one width, got ()")
        widths = (in_features, *hidden)
        self.layers = nnx.List(
            [
                nnx.Linear(a, b, dtype=compute_dtype, rngs=rngs)
                for a, b in zip(widths[:-1], widths[1:], strict=True)
            ]
        )
        self.features = widths[-1]

    def __call__(self, x: jax.Array) -> jax.Array:
        h = x.reshape(x.shape[0], -1)
        for layer in self.layers:
            h = nnx.relu(layer(h))
        return h


def _norm(kind: str, features: int, *, axis_name, compute_dtype, rngs: nnx.Rngs):
    """Normalisation layer: ``batch`` (synchronised over ``axis_name`` when given), ``group`` or ``none``."""
    if kind == "batch":
        return nnx.BatchNorm(features, momentum=0.9, axis_name=axis_name, dtype=compute_dtype, rngs=rngs)
    if kind == "group":
        return nnx.GroupNorm(features, num_groups=min(32, features), dtype=compute_dtype, rngs=rngs)
    return lambda h: h


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
    contraction of 9: a [256, 28, 28, 1] batch into 32 channels, 2×2 max-pool and ReLU, forward and backward,
    took 48 ms on one core of a 2-core AMD EPYC (AVX2), against 69 ms as an im2col matmul and 79 ms with
    ``lax.conv_general_dilated`` (jax 0.10.2). :class:`SmallCNN` passes it to ``nnx.Conv`` for a one-channel
    image.

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
def _max_pool_2x2(h: jax.Array) -> jax.Array:
    """2×2 max-pool, stride 2, VALID: [N, H, W, C] → [N, H//2, W//2, C] as a reshape and a max. Its gradient
    goes to each window's maxima, split evenly between ties (as ``jnp.max``'s), in two element-wise passes
    (ties counted over the four strided quarters of ``h``): XLA:CPU runs autodiff's version (a reduction
    counting the ties) and ``reduce_window``'s (select-and-scatter) several times slower."""
    return _pool_windows(h).max(axis=(2, 4))


def _pool_windows(h: jax.Array) -> jax.Array:
    """[N, H, W, C] → [N, H//2, 2, W//2, 2, C]: the 2×2 windows (an odd last row or column dropped)."""
    n, hh, ww, c = h.shape
    return h[:, : hh // 2 * 2, : ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, c)


def _max_pool_2x2_fwd(h):
    out = _max_pool_2x2(h)
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


_max_pool_2x2.defvjp(_max_pool_2x2_fwd, _max_pool_2x2_bwd)


class SmallCNN(nnx.Module):
    """Small CNN for 8×8 to 32×32 images: x [N, H, W, C] → [N, 8·width].

    Two stages of 3×3 conv → norm → ReLU with widths (w, 2w), each followed by a 2×2 max-pool while the
    feature map is larger than 4×4; the last map is flattened (its layout kept: where a garment's sleeve or
    collar is matters) into Linear → ReLU with 8w features: LeNet-5's conv–pool–conv–pool–dense shape (LeCun
    et al. 1998) with 3×3 kernels and max-pooling. At w = 32 on a 28×28 image it costs 4.6 M multiply-adds
    (0.2 M, 3.6 M and 0.8 M per layer). ReLU runs after the pool, which gives the same values (max and ReLU
    commute) on a quarter of the elements. A one-channel image's convolution is :func:`tap_conv` (faster on
    CPU).

    Args:
        in_channels: C (a positive int).
        image_size: the smaller image side (a positive int), which decides the pools.
        width: w, the first stage's channels (a positive int).
        norm: 'batch', 'group' or 'none'.
        axis_name: the named axis over which batch norm is synchronised; None for none.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: a size is not a positive int or ``norm`` is unknown.

    References:
        LeCun et al. 1998, "Gradient-Based Learning Applied to Document Recognition" (LeNet-5).
    """

    def __init__(
        self,
        in_channels: int,
        *,
        image_size: int,
        width: int = 32,
        norm: str = "none",
        axis_name: str | None = None,
        compute_dtype: DTypeLike | None = None,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(in_channels, "in_channels")
        _checks.check_positive_int(image_size, "image_size")
        _checks.check_positive_int(width, "width")
        _checks.check_choice(norm, "norm", ("batch", "group", "none"))
        widths = (in_channels, width, 2 * width)
        self.convs = nnx.List(
            [
                nnx.Conv(
                    a,
                    b,
                    (3, 3),
                    use_bias=norm == "none",
                    dtype=compute_dtype,
                    conv_general_dilated=tap_conv if a == 1 else lax.conv_general_dilated,
                    rngs=rngs,
                )
                for a, b in zip(widths[:-1], widths[1:], strict=True)
            ]
        )
        self.norms = nnx.List(
            [_norm(norm, b, axis_name=axis_name, compute_dtype=compute_dtype, rngs=rngs) for b in widths[1:]]
        )
        size, pools = image_size, []
        for _ in range(2):
            pools.append(size > 4)
            size = size // 2 if size > 4 else size
        self.pools = tuple(pools)
        self.dense = nnx.Linear(size * size * widths[-1], 8 * width, dtype=compute_dtype, rngs=rngs)
        self.features = 8 * width

    def __call__(self, x: jax.Array) -> jax.Array:
        h = x
        for conv, norm, pool in zip(self.convs, self.norms, self.pools, strict=True):
            h = norm(conv(h))
            h = nnx.relu(_max_pool_2x2(h) if pool else h)
        return nnx.relu(self.dense(h.reshape(h.shape[0], -1)))


class _BasicBlock(nnx.Module):
    """ResNet basic block (He et al. 2016): two 3×3 convs, identity or 1×1 projection shortcut."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int, *, norm: str, axis_name, compute_dtype, rngs):
        kw = dict(use_bias=False, dtype=compute_dtype, rngs=rngs)
        nk = dict(axis_name=axis_name, compute_dtype=compute_dtype, rngs=rngs)
        self.conv1 = nnx.Conv(cin, width, (3, 3), strides=stride, padding=1, **kw)
        self.norm1 = _norm(norm, width, **nk)
        self.conv2 = nnx.Conv(width, width, (3, 3), padding=1, **kw)
        self.norm2 = _norm(norm, width, **nk)
        self.shortcut = (
            nnx.Sequential(nnx.Conv(cin, width, (1, 1), strides=stride, **kw), _norm(norm, width, **nk))
            if stride != 1 or cin != width
            else None
        )

    def __call__(self, x):
        h = nnx.relu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        return nnx.relu(h + (x if self.shortcut is None else self.shortcut(x)))


class _Bottleneck(nnx.Module):
    """ResNet bottleneck block (He et al. 2016): 1×1 → 3×3 (stride) → 1×1 (4× width) convs."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, *, norm: str, axis_name, compute_dtype, rngs):
        kw = dict(use_bias=False, dtype=compute_dtype, rngs=rngs)
        nk = dict(axis_name=axis_name, compute_dtype=compute_dtype, rngs=rngs)
        cout = 4 * width
        self.conv1 = nnx.Conv(cin, width, (1, 1), **kw)
        self.norm1 = _norm(norm, width, **nk)
        self.conv2 = nnx.Conv(width, width, (3, 3), strides=stride, padding=1, **kw)
        self.norm2 = _norm(norm, width, **nk)
        self.conv3 = nnx.Conv(width, cout, (1, 1), **kw)
        self.norm3 = _norm(norm, cout, **nk)
        self.shortcut = (
            nnx.Sequential(nnx.Conv(cin, cout, (1, 1), strides=stride, **kw), _norm(norm, cout, **nk))
            if stride != 1 or cin != cout
            else None
        )

    def __call__(self, x):
        h = nnx.relu(self.norm1(self.conv1(x)))
        h = nnx.relu(self.norm2(self.conv2(h)))
        h = self.norm3(self.conv3(h))
        return nnx.relu(h + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nnx.Module):
    """ResNet with the CIFAR stem (3×3 conv, stride 1, no max-pool): x [N, H, W, C] → [N, 512·expansion].

    ``depth`` 18 uses basic blocks (2, 2, 2, 2); 50 uses bottleneck blocks (3, 4, 6, 3) (He et al. 2016).
    Every 3×3 conv pads one pixel on each side, as torchvision's ResNet and the papers' PyTorch code (XLA's
    'SAME' would pad a stride-2 conv 0 before and 1 after, shifting each output by a pixel). The features are
    the global average pool of the last stage (``.features`` = 8·width·expansion).

    Args:
        in_channels: C (a positive int).
        depth: 18 or 50.
        width: the base width (64 as torchvision's).
        norm: 'batch', 'group' or 'none'.
        axis_name: the named axis over which batch norm is synchronised; None for none.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``in_channels`` is not a positive int, or ``depth`` or ``norm`` is unknown.

    References:
        He et al. 2016, "Deep Residual Learning for Image Recognition" (arXiv 1512.03385).
    """

    def __init__(
        self,
        in_channels: int,
        *,
        depth: int = 18,
        width: int = 64,
        norm: str = "batch",
        axis_name: str | None = None,
        compute_dtype: DTypeLike | None = None,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(in_channels, "in_channels")
        _checks.check_choice(depth, "depth", (18, 50))
        _checks.check_choice(norm, "norm", ("batch", "group", "none"))
        block, counts = (_BasicBlock, (2, 2, 2, 2)) if depth == 18 else (_Bottleneck, (3, 4, 6, 3))
        make = functools.partial(
            block, norm=norm, axis_name=axis_name, compute_dtype=compute_dtype, rngs=rngs
        )
        self.stem = nnx.Conv(
            in_channels, width, (3, 3), padding=1, use_bias=False, dtype=compute_dtype, rngs=rngs
        )
        self.stem_norm = _norm(norm, width, axis_name=axis_name, compute_dtype=compute_dtype, rngs=rngs)
        blocks, cin = [], width
        for stage, count in enumerate(counts):
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(make(cin, width * 2**stage, stride))
                cin = width * 2**stage * block.expansion
        self.blocks = nnx.List(blocks)
        self.features = cin

    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.relu(self.stem_norm(self.stem(x)))
        for blk in self.blocks:
            h = blk(h)
        return h.mean(axis=(1, 2))


def encoder(
    name: str,
    *,
    input_shape: Sequence[int],
    width: int | None = None,
    norm: str | None = None,
    axis_name: str | None = None,
    compute_dtype: DTypeLike | None = None,
    rngs: nnx.Rngs,
) -> MLP | SmallCNN | ResNet:
    """Build an encoder by name for images of shape ``input_shape`` = (H, W, C); it has ``.features``.

    ``width`` None builds the encoder's own (:data:`OWN_WIDTHS`): an MLP of two hidden layers of 512, the
    small CNN of base 32, the ResNets of base 64 (torchvision's ResNet-18: 11,168,832 trunk parameters on
    three-channel images with the 3×3 CIFAR stem; ResNet-50: 23,500,352).

    Args:
        name: 'mlp', 'cnn', 'resnet18' or 'resnet50'.
        input_shape: (H, W, C).
        width: the encoder's width (a positive int), or None for its own.
        norm: the normalisation ('batch', 'group', 'none'); None: 'none' for the CNN, 'batch' for the ResNets
            (the MLP has none).
        axis_name: the named axis over which batch norm is synchronised; None for none.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Returns:
        The :class:`MLP`, :class:`SmallCNN` or :class:`ResNet`, mapping [N, H, W, C] → [N, features].

    Raises:
        ValueError: ``name`` is unknown, ``input_shape`` is not (H, W, C), or ``width`` is not a positive int.

    References:
        He et al. 2016, "Deep Residual Learning for Image Recognition" (arXiv 1512.03385) (ResNets).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> mlp = models.encoder("mlp", input_shape=(4, 4, 1), width=16, rngs=nnx.Rngs(0))
        >>> type(mlp).__name__, mlp.features
        ('MLP', 16)
    """
    _checks.check_choice(name, "encoder", ENCODERS)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape must be (H, W, C), got {tuple(input_shape)}")
    if width is not None:
        _checks.check_positive_int(width, "width")
    width = OWN_WIDTHS[name] if width is None else width
    h, w, c = input_shape
    if name == "mlp":
        return MLP(h * w * c, hidden=(width,) * 2, compute_dtype=compute_dtype, rngs=rngs)
    if name == "cnn":
        return SmallCNN(
            c,
            image_size=min(h, w),
            width=width,
            norm=norm or "none",
            axis_name=axis_name,
            compute_dtype=compute_dtype,
            rngs=rngs,
        )
    return ResNet(
        c,
        depth=int(name[6:]),
        width=width,
        norm=norm or "batch",
        axis_name=axis_name,
        compute_dtype=compute_dtype,
        rngs=rngs,
    )


class GeometryHead(nnx.Module):
    """Stowell 2026's head: Linear(F, 4D) → ReLU → Linear(4D, D), then the geometry projection.

    The head of Stowell's public code; h [N, F] → [N, D'] (D' = 2D for torus_c, else D). ``hidden`` replaces
    the 4D hidden width (SupContrast's head: F); ``hidden=0`` leaves one Linear(F, D) (Korman 2021's public
    code maps its trunk to the code so). ``qat_bits`` (torus geometries only; 1, 2, 4 or 8) trains through the
    b-bit torus grid of ``quantize.torus_codes``: the flat angles (the raw turns of torus_c, the pair angles
    of torus_n) pass through ``quantize.torus_fake_quantize`` before the Clifford projection, so the forward
    pass sees the grid angles and the backward pass the straight-through gradient. With ``qat_noise`` the
    training forward adds one grid step of uniform noise instead; evaluation mode (``model.eval()``, which
    sets ``deterministic``) always rounds, so the embeddings a trained model gives are exactly its codes.

    Args:
        in_features: F.
        dim: D (a positive int; even for torus_n).
        geometry: one of the vector geometries ('euclidean', 'sphere', 'torus_c', 'torus_n').
        hidden: the hidden width; None: 4·dim; 0: no hidden layer.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        qat_bits: None, or 1, 2, 4 or 8 for quantisation-aware training of a torus head.
        qat_noise: train with uniform noise instead of rounding (needs ``qat_bits``).
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``dim`` or ``hidden`` is not a positive int, ``geometry`` is unknown, ``dim`` is odd for
            torus_n, ``qat_bits`` is not 1, 2, 4 or 8 or is given for a non-torus geometry, or ``qat_noise``
            without ``qat_bits``.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1 and §5.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> head = models.GeometryHead(16, 4, geometry="torus_c", rngs=nnx.Rngs(0))
        >>> z = head(jnp.ones((2, 16)))
        >>> z.shape, bool(jnp.allclose(jnp.linalg.norm(z, axis=-1), 1.0))
        ((2, 8), True)
    """

    def __init__(
        self,
        in_features: int,
        dim: int,
        *,
        geometry: str,
        hidden: int | None = None,
        compute_dtype: DTypeLike | None = None,
        qat_bits: int | None = None,
        qat_noise: bool = False,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(dim, "dim")
        hidden = 4 * dim if hidden is None else hidden
        if hidden:
            _checks.check_positive_int(hidden, "hidden")
        _checks.check_choice(geometry, "geometry", VECTOR_GEOMETRIES)
        if geometry == "torus_n":
            _checks.check_even(dim, "dim")
        if qat_bits is not None:
            _checks.check_choice(qat_bits, "qat_bits", quantize.TORUS_BITS)
            if geometry not in TORUS_GEOMETRIES:
                raise ValueError(f"qat_bits needs a torus geometry (torus_c, torus_n), got {geometry!r}")
        elif qat_noise:
            raise ValueError("qat_noise needs qat_bits")
        self.hidden = nnx.Linear(in_features, hidden, dtype=compute_dtype, rngs=rngs) if hidden else None
        self.out = nnx.Linear(hidden or in_features, dim, dtype=compute_dtype, rngs=rngs)
        self.geometry = geometry
        self.qat_bits = qat_bits
        self.qat_noise = bool(qat_noise)
        self.deterministic = False

    def __call__(self, h: jax.Array) -> jax.Array:
        raw = self.out(h if self.hidden is None else nnx.relu(self.hidden(h)))
        if self.qat_bits is None:
            return project(raw, self.geometry)
        angles = raw.astype(jnp.float32)
        if self.geometry == "torus_n":
            angles = manifolds.clifford_to_angles(manifolds.torus_l2p(angles))
        noise = self.qat_noise and not self.deterministic
        return manifolds.torus_clifford(quantize.torus_fake_quantize(angles, self.qat_bits, noise=noise))


class AtlasHead(nnx.Module):
    """Korman 2021 §2.4: n chart heads of width d (pre-sigmoid) and a softmax membership head, as one Linear.

    h [N, F] → (coords [N, n, d] pre-sigmoid float32, q [N, n] float32 summing to 1), split by
    :func:`geojax.manifolds.atlas_split`.

    Args:
        in_features: F.
        charts: n (a positive int).
        dim: d (a positive int).
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``charts`` or ``dim`` is not a positive int.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §2.4.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> coords, q = models.AtlasHead(16, charts=3, dim=2, rngs=nnx.Rngs(0))(jnp.ones((2, 16)))
        >>> coords.shape, q.shape
        ((2, 3, 2), (2, 3))
    """

    def __init__(
        self,
        in_features: int,
        *,
        charts: int,
        dim: int,
        compute_dtype: DTypeLike | None = None,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(charts, "charts")
        _checks.check_positive_int(dim, "dim")
        self.linear = nnx.Linear(in_features, charts * dim + charts, dtype=compute_dtype, rngs=rngs)
        self.charts, self.dim = charts, dim

    def __call__(self, h: jax.Array) -> tuple[jax.Array, jax.Array]:
        return manifolds.atlas_split(self.linear(h).astype(jnp.float32), charts=self.charts, dim=self.dim)


class ProjectionHead(nnx.Module):
    """SimCLR's projection head g (Chen et al. 2020 §2.1): Linear(D, hidden) → ReLU → Linear(hidden, out).

    Both layers without bias, the hidden layer as wide as the input by default (Chen et al. 2020; Korman
    2021's public code for its SimCLR baseline: Linear(d, d) → ReLU → Linear(d, 64)). z [N, D] → [N, out].

    Args:
        in_features: D (a positive int).
        hidden: the hidden width; None: D.
        out: the output width P.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``in_features`` is not a positive int.

    References:
        Chen et al. 2020, "A Simple Framework for Contrastive Learning of Visual Representations" (arXiv
        2002.05709), §2.1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> models.ProjectionHead(8, out=4, rngs=nnx.Rngs(0))(jnp.ones((2, 8))).shape
        (2, 4)
    """

    def __init__(self, in_features: int, *, hidden: int | None = None, out: int = 64, rngs: nnx.Rngs):
        _checks.check_positive_int(in_features, "in_features")
        hidden = in_features if hidden is None else hidden
        self.hidden = nnx.Linear(in_features, hidden, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(hidden, out, use_bias=False, rngs=rngs)

    def __call__(self, z: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(z)))


class MixedProjection(nnx.Module):
    """MSimCLR projection (Korman 2021 Tab. 1): z = Σ_c q_c · h_c(sigmoid(coords_c)), one head per chart.

    Each head has :class:`ProjectionHead`'s form, Linear(d, hidden) → ReLU → Linear(hidden, out) without
    bias, hidden = d by default, as Korman 2021's public code. Called as ``(coords [N, n, d] pre-sigmoid,
    q [N, n])`` → z [N, out] float32.

    Args:
        charts: n (a positive int).
        dim: d (a positive int).
        hidden: the hidden width; None: d.
        out: the output width P.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``charts`` or ``dim`` is not a positive int.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> head = models.MixedProjection(charts=3, dim=2, out=4, rngs=nnx.Rngs(0))
        >>> head(jnp.zeros((2, 3, 2)), jnp.full((2, 3), 1 / 3)).shape
        (2, 4)
    """

    def __init__(self, *, charts: int, dim: int, hidden: int | None = None, out: int = 64, rngs: nnx.Rngs):
        _checks.check_positive_int(charts, "charts")
        _checks.check_positive_int(dim, "dim")
        hidden = dim if hidden is None else hidden
        init = nnx.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
        self.w1 = nnx.Param(init(rngs.params(), (charts, dim, hidden)))
        self.w2 = nnx.Param(init(rngs.params(), (charts, hidden, out)))

    def __call__(self, coords: jax.Array, q: jax.Array) -> jax.Array:
        hid = nnx.relu(jnp.einsum("ncd,cdh->nch", jax.nn.sigmoid(coords), self.w1[...]))
        per_chart = jnp.einsum("nch,cho->nco", hid, self.w2[...])
        return jnp.einsum("nc,nco->no", q, per_chart)


class Outputs(NamedTuple):
    """What :class:`EmbeddingModel` returns for a batch of N inputs (float32 arrays; absent parts are None).

    Attributes:
        embedding: [N, D'] the geometry's extrinsic vector (for the atlas, the compressed code sigmoid(coords
            of the argmax chart) [N, d]).
        coords: [N, n, d] pre-sigmoid chart coordinates (atlas only).
        q: [N, n] memberships (atlas only).
        projection: [N, P] the projection head's output, what a SimCLR-style loss sees (None without one).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> models.Outputs(jnp.ones((2, 3))).loss_vectors.shape
        (2, 3)
    """

    embedding: jax.Array
    coords: jax.Array | None = None
    q: jax.Array | None = None
    projection: jax.Array | None = None

    @property
    def loss_vectors(self) -> jax.Array:
        """The vectors a vector similarity compares, the projection when there is one, else the embedding."""
        return self.embedding if self.projection is None else self.projection


class Encoder(Protocol):
    """What :class:`EmbeddingModel` needs of an encoder: x [N, ...] → features [N, F], and ``features`` = F.

    :func:`encoder`'s modules have it; so may one of your own."""

    features: int

    def __call__(self, x: jax.Array) -> jax.Array: ...


class EmbeddingModel(nnx.Module):
    """Encoder + geometry (or atlas) head + optional projection head: x → :class:`Outputs`.

    The head is a :class:`GeometryHead` for a vector geometry, an :class:`AtlasHead` for ``atlas`` (whose
    embedding is the compressed code of :func:`geojax.manifolds.atlas_code`); the projection head is none, a
    :class:`ProjectionHead` on the embedding ('mlp') or a :class:`MixedProjection` on the charts ('mixed').

    Args:
        encoder_module: an :class:`Encoder`: one of :func:`encoder`'s, or any module with ``.features``.
        geometry: one of ``geojax.manifolds.GEOMETRIES``.
        dim: D (the head's width) or, for the atlas, each chart's d.
        head_hidden: the geometry head's hidden width (None: 4·dim; 0: one linear layer).
        charts: n, the atlas's charts.
        projection: 'none', 'mlp' or 'mixed' (atlas only).
        projection_dim: P, the projection head's output width.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        qat_bits: quantisation-aware training of a torus head (:class:`GeometryHead`).
        qat_noise: train with noise instead of rounding (:class:`GeometryHead`).
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``geometry`` or ``projection`` is unknown, ``qat_bits`` / ``qat_noise`` with the atlas, or
            'mixed' without the atlas; the heads' own checks.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135) (geometry heads); Korman 2021, manifold (atlas)
        target spaces (arXiv 2106.07062), §2.4 and Table 1 (atlas, MSimCLR).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> trunk = models.encoder("mlp", input_shape=(4, 4, 1), width=16, rngs=nnx.Rngs(0))
        >>> model = models.EmbeddingModel(trunk, geometry="sphere", dim=8, projection="mlp", projection_dim=4,
        ...                               rngs=nnx.Rngs(0))
        >>> out = model(jnp.ones((2, 4, 4, 1)))
        >>> out.embedding.shape, out.loss_vectors.shape
        ((2, 8), (2, 4))
    """

    def __init__(
        self,
        encoder_module: Encoder,
        *,
        geometry: str,
        dim: int,
        head_hidden: int | None = None,
        charts: int = 1,
        projection: str = "none",
        projection_dim: int = 64,
        compute_dtype: DTypeLike | None = None,
        qat_bits: int | None = None,
        qat_noise: bool = False,
        rngs: nnx.Rngs,
    ):
        _checks.check_choice(geometry, "geometry", GEOMETRIES)
        _checks.check_choice(projection, "projection", PROJECTIONS)
        if geometry == "atlas" and (qat_bits is not None or qat_noise):
            raise ValueError("qat_bits needs a torus geometry (torus_c, torus_n), got 'atlas'")
        if projection == "mixed" and geometry != "atlas":
            raise ValueError(
                f"projection='mixed' needs geometry='atlas' (one head per chart), got {geometry!r}"
            )
        self.encoder = encoder_module
        feats = encoder_module.features
        self.geometry = geometry
        self.head: AtlasHead | GeometryHead
        self.projection: MixedProjection | ProjectionHead | None
        if geometry == "atlas":
            self.head = AtlasHead(feats, charts=charts, dim=dim, compute_dtype=compute_dtype, rngs=rngs)
        else:
            self.head = GeometryHead(
                feats,
                dim,
                geometry=geometry,
                hidden=head_hidden,
                compute_dtype=compute_dtype,
                qat_bits=qat_bits,
                qat_noise=qat_noise,
                rngs=rngs,
            )
        if projection == "mixed":
            self.projection = MixedProjection(charts=charts, dim=dim, out=projection_dim, rngs=rngs)
        elif projection == "mlp":
            width = embedding_width(geometry, dim) if geometry != "atlas" else dim
            self.projection = ProjectionHead(width, out=projection_dim, rngs=rngs)
        else:
            self.projection = None
        self.projection_kind = projection

    def __call__(self, x: jax.Array) -> Outputs:
        h = self.encoder(x)
        if isinstance(self.head, AtlasHead):
            coords, q = self.head(h)
            out = Outputs(manifolds.atlas_code(coords, q)[0], coords, q)
            if isinstance(self.projection, MixedProjection):  # 'mixed': on the charts (atlas only)
                return out._replace(projection=self.projection(coords, q))
        else:
            out = Outputs(self.head(h))
        if isinstance(self.projection, ProjectionHead):
            out = out._replace(projection=self.projection(out.embedding))
        return out
