"""Augmentations (jnp, one image [H, W, C] and a key at a time; vmapped over the batch), and :func:`views`,
the augmented views of a batch.
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
import numpy as np

Augmentation = Literal["shift", "crop_flip", "simclr", "crop_jitter_gray", "none"]


def _translate(key: jax.Array, x: jax.Array, pad: int) -> jax.Array:
    """Random translation by up to ``pad`` pixels each way, zero fill (a random crop of the padded image)."""
    h, w, c = x.shape
    off = jax.random.randint(key, (2,), 0, 2 * pad + 1)
    padded = jnp.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    return jax.lax.dynamic_slice(padded, (off[0], off[1], 0), (h, w, c))


def shift(key: jax.Array, x: jax.Array) -> jax.Array:
    """Small-image augmentation: random ±1 pixel translation (zero fill) and contrast ×U(0.8, 1.2).

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].

    Returns:
        The augmented image [H, W, C], clipped to [0, 1].
    """
    k1, k2 = jax.random.split(key)
    return jnp.clip(_translate(k1, x, 1) * jax.random.uniform(k2, (), minval=0.8, maxval=1.2), 0.0, 1.0)


def crop_flip(key: jax.Array, x: jax.Array) -> jax.Array:
    """Random crop of the image padded by 2 pixels (±2 px translation, zero fill) and a flip with p 0.5.

    The standard augmentation of small natural images (He et al. 2016's CIFAR recipe pads 4 pixels of 32),
    for data whose classes are mirror-symmetric (Fashion-MNIST, CIFAR; not digits).

    Args:
        key: a PRNG key.
        x: one image [H, W, C].

    Returns:
        The augmented image [H, W, C].
    """
    k1, k2 = jax.random.split(key)
    x = _translate(k1, x, 2)
    return jnp.where(jax.random.bernoulli(k2, 0.5), x[:, ::-1], x)


def random_resized_crop(key: jax.Array, x: jax.Array, *, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3)) -> jax.Array:
    """Crop a random box of area fraction U(scale) and aspect ratio log-U(ratio), resized back bilinearly.

    torchvision's RandomResizedCrop; the default area, 0.2 to 1, is SupContrast's CIFAR crop (Khosla et al.
    2020). The box's sides are clipped to the image.

    Args:
        key: a PRNG key.
        x: one image [H, W, C].
        scale: (low, high) of the box's area as a fraction of the image's, 0 < low ≤ high ≤ 1.
        ratio: (low, high) of the box's aspect ratio width / height, drawn log-uniformly, 0 < low ≤ high.

    Returns:
        The crop resized to [H, W, C] (bilinear, no antialiasing).
    """
    h, w, _ = x.shape
    k1, k2, k3, k4 = jax.random.split(key, 4)
    area = jax.random.uniform(k1, (), minval=scale[0], maxval=scale[1]) * h * w
    aspect = jnp.exp(jax.random.uniform(k2, (), minval=np.log(ratio[0]), maxval=np.log(ratio[1])))
    ch = jnp.clip(jnp.sqrt(area / aspect), 1.0, h)
    cw = jnp.clip(jnp.sqrt(area * aspect), 1.0, w)
    y0 = jax.random.uniform(k3, ()) * (h - ch)
    x0 = jax.random.uniform(k4, ()) * (w - cw)
    s = jnp.stack([h / ch, w / cw])
    return jax.image.scale_and_translate(
        x, x.shape, (0, 1), s, -jnp.stack([y0, x0]) * s, method="linear", antialias=False
    )


def _gray(x: jax.Array) -> jax.Array:
    if x.shape[-1] != 3:
        return x
    g = x @ jnp.asarray([0.299, 0.587, 0.114], x.dtype)
    return jnp.broadcast_to(g[..., None], x.shape)


def color_jitter(key: jax.Array, x: jax.Array, *, strength: float = 0.5) -> jax.Array:
    """SimCLR colour jitter without hue: brightness, contrast and saturation factors U(1 ± 0.8·strength).

    Chen et al. 2020 (SimCLR), appendix A; saturation mixes with the luma grey (ITU-R 601 weights) of an RGB
    image and does nothing to a grey one.

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].
        strength: the jitter strength s ≥ 0 (SimCLR's 0.5: factors in [0.6, 1.4]).

    Returns:
        The jittered image [H, W, C], clipped to [0, 1].
    """
    k1, k2, k3 = jax.random.split(key, 3)
    lo, hi = 1 - 0.8 * strength, 1 + 0.8 * strength
    x = x * jax.random.uniform(k1, (), minval=lo, maxval=hi)
    mean = x.mean()
    x = (x - mean) * jax.random.uniform(k2, (), minval=lo, maxval=hi) + mean
    g = _gray(x)
    x = (x - g) * jax.random.uniform(k3, (), minval=lo, maxval=hi) + g
    return jnp.clip(x, 0.0, 1.0)


def _crop_flip_jitter_gray(key: jax.Array, x: jax.Array, *, crop_scale: tuple[float, float], flip: bool):
    """Random resized crop of area U(crop_scale), [horizontal flip (p 0.5),] colour jitter strength 0.5
    (p 0.8), grayscale (p 0.2)."""
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    x = random_resized_crop(k1, x, scale=crop_scale)
    if flip:
        x = jnp.where(jax.random.bernoulli(k2, 0.5), x[:, ::-1], x)
    x = jnp.where(jax.random.bernoulli(k3, 0.8), color_jitter(k4, x), x)
    return jnp.where(jax.random.bernoulli(k5, 0.2), _gray(x), x)


def simclr(key: jax.Array, x: jax.Array) -> jax.Array:
    """SupContrast's CIFAR views (Khosla et al. 2020; the SimCLR set of Chen et al. 2020).

    Random resized crop of area 0.2 to 1, horizontal flip (p 0.5), colour jitter strength 0.5 (p 0.8;
    brightness, contrast and saturation 0.4, no hue) and grayscale (p 0.2).

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].

    Returns:
        The augmented view [H, W, C].
    """
    return _crop_flip_jitter_gray(key, x, crop_scale=(0.2, 1.0), flip=True)


def crop_jitter_gray(key: jax.Array, x: jax.Array) -> jax.Array:
    """Korman 2021 appendix A.1's views: colour jitter, grayscale and a random resized crop, no flip.

    Colour jitter strength 0.5 (p 0.8), grayscale (p 0.2); the crop's area, 0.08 to 1, is that of SimCLR
    (Chen et al. 2020, appendix A), the augmentation A.1 says it uses.

    Args:
        key: a PRNG key.
        x: one image [H, W, C], float in [0, 1].

    Returns:
        The augmented view [H, W, C].
    """
    return _crop_flip_jitter_gray(key, x, crop_scale=(0.08, 1.0), flip=False)


def identity(key: jax.Array, x: jax.Array) -> jax.Array:
    """No augmentation (``augment=none``).

    Args:
        key: a PRNG key (unused).
        x: one image [H, W, C].

    Returns:
        ``x`` itself.
    """
    del key
    return x


AUGMENTATIONS = {
    "shift": shift,
    "crop_flip": crop_flip,
    "simclr": simclr,
    "crop_jitter_gray": crop_jitter_gray,
    "none": identity,
}
assert tuple(AUGMENTATIONS) == get_args(Augmentation)


def views(key: jax.Array, images: jax.Array, positions: jax.Array, *, n_views: int, kind: str) -> jax.Array:
    """``n_views`` augmented views of ``images`` [n, H, W, C] → [n_views·n, H, W, C] (view-major).

    Example i, view v uses the key fold_in(fold_in(key, positions[i]), v), so the views do not depend on how
    the batch is split. With ``n_views == 1`` and ``kind`` not 'none' the single view is augmented too.

    Args:
        key: the step's augmentation PRNG key.
        images: the images [n, H, W, C], float in [0, 1].
        positions: the images' global positions in the batch [n], integers.
        n_views: views per image, ≥ 1.
        kind: the augmentation: ``shift``, ``crop_flip``, ``simclr``, ``crop_jitter_gray`` or ``none``.

    Returns:
        The views [n_views·n, H, W, C]: all images' first view, then all their second, ...
    """
    fn = AUGMENTATIONS[kind]

    def one(pos, x, v):
        return fn(jax.random.fold_in(jax.random.fold_in(key, pos), v), x)

    return jnp.concatenate(
        [jax.vmap(one, in_axes=(0, 0, None))(positions, images, v) for v in range(n_views)]
    )
