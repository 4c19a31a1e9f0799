"""The optimiser and learning-rate schedule of a run, each value registered with the keys it uses and the
optax constructor it calls (:mod:`train.app.registry`)."""

from __future__ import annotations

from typing import Any

import optax

from train.app import registry
from train.app.registry import NON_NEGATIVE, Key


def _coupled(l2: float) -> list[optax.GradientTransformation]:
    """PyTorch SGD / RMSprop ``weight_decay``: l2·w added to the (clipped) gradient."""
    return [optax.add_decayed_weights(l2)] if l2 else []


def adam(lr: optax.Schedule) -> list[optax.GradientTransformation]:
    return [optax.adam(lr)]


def adamw(lr: optax.Schedule, *, weight_decay: float) -> list[optax.GradientTransformation]:
    return [optax.adamw(lr, weight_decay=weight_decay)]


def sgd(lr: optax.Schedule, *, l2: float, momentum: float) -> list[optax.GradientTransformation]:
    return [*_coupled(l2), optax.sgd(lr, momentum=momentum or None)]


def rmsprop(lr: optax.Schedule, *, l2: float, momentum: float) -> list[optax.GradientTransformation]:
    return [*_coupled(l2), optax.rmsprop(lr, momentum=momentum or None)]


def cosine(lr: float, warmup: int, steps: int, *, end_value: float) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, steps, end_value=end_value)


def constant(lr: float, warmup: int, steps: int) -> optax.Schedule:
    return optax.linear_schedule(0.0, lr, warmup) if warmup else optax.constant_schedule(lr)


WEIGHT_DECAY = Key(
    "weight_decay", 1e-4, "decoupled weight decay", float, "optimisation", NON_NEGATIVE, arg="weight_decay"
)
L2 = Key(
    "l2",
    0.0,
    "coupled weight decay: l2·w added to the gradient (PyTorch SGD's weight_decay)",
    float,
    "optimisation",
    NON_NEGATIVE,
    arg="l2",
)
MOMENTUM = Key(
    "momentum",
    0.0,
    "momentum (0 = none, as PyTorch's and optax's default)",
    float,
    "optimisation",
    NON_NEGATIVE,
    arg="momentum",
)
registry.register("optimizer", "adam", calls=adam)
registry.register("optimizer", "adamw", keys=(WEIGHT_DECAY,), calls=adamw)
registry.register("optimizer", "sgd", keys=(L2, MOMENTUM), calls=sgd)
registry.register("optimizer", "rmsprop", keys=(L2, MOMENTUM), calls=rmsprop)
LR_MIN = Key(
    "lr_min",
    0.0,
    "final learning rate (PyTorch's eta_min)",
    float,
    "optimisation",
    NON_NEGATIVE,
    arg="end_value",
)
registry.register("schedule", "cosine", keys=(LR_MIN,), calls=cosine)
registry.register("schedule", "constant", calls=constant)


def schedule(cfg: Any) -> optax.Schedule:
    """Linear warm-up (``warmup`` steps, capped at steps/2), then the registered ``cfg.schedule`` (cosine
    decay to ``lr_min``, or a constant rate)."""
    warmup = min(cfg.warmup, cfg.steps // 2)
    make = registry.option("schedule", cfg.schedule).calls
    return make(cfg.lr, warmup, cfg.steps, **registry.option_kwargs(cfg, "schedule"))


def make_optimizer(cfg: Any) -> optax.GradientTransformation:
    """optax.chain(clip_by_global_norm(c) | clip(c) (none without ``clip``), [l2·w added to the gradient,]
    optimiser): PyTorch's order, clipping the loss's gradient before SGD / RMSprop adds its coupled weight
    decay (``l2``, PyTorch's ``weight_decay``)."""
    parts = []
    if cfg.clip is not None:
        clip_mode = cfg.clip_mode == "global_norm"
        parts.append(optax.clip_by_global_norm(cfg.clip) if clip_mode else optax.clip(cfg.clip))
    make = registry.option("optimizer", cfg.optimizer).calls
    return optax.chain(*parts, *make(schedule(cfg), **registry.option_kwargs(cfg, "optimizer")))
