"""The encoders: :class:`MLP`, :class:`SmallCNN`, :class:`ResNet` (18 and 50), their names and own widths,
and :func:`encoder`, which builds one by name.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal, get_args

import jax
from flax import nnx
from jax import lax
from jax.typing import DTypeLike

from geojax import _checks
from geojax.models._batchnorm import FusedBatchNorm
from geojax.models._kernels import max_pool_2x2, tap_conv

EncoderName = Literal["mlp", "cnn", "resnet18", "resnet50"]
ENCODERS: tuple[str, ...] = get_args(EncoderName)
#: Each encoder's own width (what ``encoder(width=None)`` builds): the MLP's hidden width; the small CNN's
#: first stage (convolutions w, 2w, then 8w dense features); the ResNets' base width, 64 as He et al. (2016)
#: and torchvision's ResNet-18 and ResNet-50 (stages 64, 128, 256, 512; the bottleneck's outputs ×4).
OWN_WIDTHS: dict[str, int] = {"mlp": 512, "cnn": 32, "resnet18": 64, "resnet50": 64}
#: The normalisations that the CNN and the ResNets take; ``fused_batch`` is batch norm with the one-pass
#: training step of :class:`FusedBatchNorm` (the same variables and values as ``batch``).
NORMS: tuple[str, ...] = ("batch", "fused_batch", "group", "none")


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
    """Normalisation layer: ``batch`` or ``fused_batch`` (synchronised over ``axis_name`` when given),
    ``group`` or ``none``."""
    if kind in ("batch", "fused_batch"):
        layer = nnx.BatchNorm if kind == "batch" else FusedBatchNorm
        return layer(features, momentum=0.9, axis_name=axis_name, dtype=compute_dtype, rngs=rngs)
    if kind == "group":
        return nnx.GroupNorm(features, num_groups=min(32, features), dtype=compute_dtype, rngs=rngs)
    return lambda h: h


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
        norm: 'batch', 'fused_batch', 'group' or 'none'.
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
        _checks.check_choice(norm, "norm", NORMS)
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
            h = nnx.relu(max_pool_2x2(h) if pool else h)
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
        norm: 'batch', 'fused_batch', 'group' or 'none'.
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
        _checks.check_choice(norm, "norm", NORMS)
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
        norm: the normalisation ('batch', 'fused_batch', 'group', 'none'); None: 'none' for the CNN, 'batch'
            for the ResNets (the MLP has none).
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
