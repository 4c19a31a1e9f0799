"""The optimiser and learning-rate schedule of a run, each value registered with the keys it uses and the
optax constructor it calls (:mod:`train.app.registry`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import optax

from train.app import registry
from train.app.registry import NON_NEGATIVE, Key

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


def _coupled(l2: float) -> list[optax.GradientTransformation]:
    """PyTorch SGD / RMSprop ``weight_decay``: l2·w added to the (clipped) gradient."""
    return [optax.add_decayed_weights(l2)] if l2 else []


def adam(lr: optax.Schedule) -> list[optax.GradientTransformation]:
    """Adam (Kingma & Ba 2015, algorithm 1) with optax's defaults β₁ 0.9, β₂ 0.999, ε 1e-8.

    Args:
        lr: the learning-rate schedule, step → rate.

    Returns:
        The transformations to chain after clipping: ``[optax.adam(lr)]``.
    """
    return [optax.adam(lr)]


def adamw(lr: optax.Schedule, *, weight_decay: float) -> list[optax.GradientTransformation]:
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019, algorithm 2; ``optimizer=adamw``).

    Args:
        lr: the learning-rate schedule, step → rate.
        weight_decay: the decoupled decay λ ≥ 0; each step subtracts lr·λ·w from the weights.

    Returns:
        The transformations to chain after clipping: ``[optax.adamw(lr, weight_decay)]``.
    """
    return [optax.adamw(lr, weight_decay=weight_decay)]


def sgd(lr: optax.Schedule, *, l2: float, momentum: float) -> list[optax.GradientTransformation]:
    """SGD with heavy-ball momentum and PyTorch's coupled weight decay (``optimizer=sgd``).

    Args:
        lr: the learning-rate schedule, step → rate.
        l2: the coupled weight decay ≥ 0: l2·w is added to the gradient (PyTorch SGD's ``weight_decay``).
        momentum: the momentum ≥ 0 (0: none).

    Returns:
        The transformations to chain after clipping: the decay (when ``l2`` > 0), then ``optax.sgd``.
    """
    return [*_coupled(l2), optax.sgd(lr, momentum=momentum or None)]


def rmsprop(lr: optax.Schedule, *, l2: float, momentum: float) -> list[optax.GradientTransformation]:
    """RMSprop (Tieleman & Hinton 2012) with PyTorch's coupled weight decay (``optimizer=rmsprop``).

    Args:
        lr: the learning-rate schedule, step → rate.
        l2: the coupled weight decay ≥ 0: l2·w is added to the gradient (PyTorch's ``weight_decay``).
        momentum: the momentum ≥ 0 (0: none).

    Returns:
        The transformations to chain after clipping: the decay (when ``l2`` > 0), then ``optax.rmsprop``.
    """
    return [*_coupled(l2), optax.rmsprop(lr, momentum=momentum or None)]


def cosine(lr: float, warmup: int, steps: int, *, end_value: float) -> optax.Schedule:
    """Linear warm-up from 0, then cosine decay to ``end_value`` (Loshchilov & Hutter 2017, eq. 5).

    After the warm-up, step t has rate end + (lr − end)·(1 + cos(π (t − warmup) / (steps − warmup))) / 2
    (``schedule=cosine``).

    Args:
        lr: the peak learning rate, > 0.
        warmup: the warm-up steps, 0 ≤ warmup ≤ steps / 2.
        steps: the run's length in steps (warm-up included).
        end_value: the final rate, 0 ≤ end_value ≤ lr (the ``lr_min`` key, PyTorch's ``eta_min``).

    Returns:
        The schedule, step → rate.
    """
    return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, steps, end_value=end_value)


def constant(lr: float, warmup: int, steps: int) -> optax.Schedule:
    """Linear warm-up from 0 to ``lr``, then ``lr`` throughout (``schedule=constant``).

    Args:
        lr: the learning rate, > 0.
        warmup: the warm-up steps ≥ 0 (0: ``lr`` from the first step).
        steps: the run's length in steps (unused: the rate does not decay).

    Returns:
        The schedule, step → rate.
    """
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


def schedule(cfg: RunConfig) -> optax.Schedule:
    """Linear warm-up (``warmup`` steps, capped at steps/2), then the registered ``cfg.schedule``.

    Args:
        cfg: the run's configuration (lr, warmup, steps, schedule and the schedule's keys: cosine decays to
            ``lr_min``, constant keeps the rate).

    Returns:
        The schedule, step → learning rate.
    """
    warmup = min(cfg.warmup, cfg.steps // 2)
    make = registry.option("schedule", cfg.schedule).calls
    return make(cfg.lr, warmup, cfg.steps, **registry.option_kwargs(cfg, "schedule"))


def proxy_lr_scale(cfg: RunConfig) -> float:
    """The learning-rate factor of the loss's proxies.

    ``proxy_lr_scale``, or the loss's own (1 where the loss has no proxies).

    Args:
        cfg: the run's configuration (its loss and ``proxy_lr_scale``).

    Returns:
        The factor, > 0.
    """
    own = registry.option("loss", cfg.loss).info.get("proxy_lr_scale", 1.0)
    return own if getattr(cfg, "proxy_lr_scale", None) is None else cfg.proxy_lr_scale


def _is_proxy(path: tuple[Any, ...], _leaf: Any) -> bool:
    return any(getattr(entry, "key", None) == "proxies" for entry in path)


def make_optimizer(cfg: RunConfig) -> optax.GradientTransformation:
    """optax.chain(clip_by_global_norm(c) | clip(c), [l2·w added to the gradient,] optimiser[, × factor]).

    PyTorch's order, clipping the loss's gradient before SGD / RMSprop adds its coupled weight decay (``l2``,
    PyTorch's ``weight_decay``); no clipping when ``clip`` is None. The updates of a proxy loss's proxies
    are then multiplied by :func:`proxy_lr_scale` (a factor ≠ 1 only): their learning rate, decay included,
    is the factor times the model's, as a parameter group of its own.

    Args:
        cfg: the run's configuration (clip, clip_mode, optimizer and its keys, the schedule's, the loss's
            ``proxy_lr_scale``).

    Returns:
        The optax transformation of the run.
    """
    parts = []
    if cfg.clip is not None:
        clip_mode = cfg.clip_mode == "global_norm"
        parts.append(optax.clip_by_global_norm(cfg.clip) if clip_mode else optax.clip(cfg.clip))
    make = registry.option("optimizer", cfg.optimizer).calls
    parts += make(schedule(cfg), **registry.option_kwargs(cfg, "optimizer"))
    if (factor := proxy_lr_scale(cfg)) != 1.0:
        mask = functools.partial(jax.tree_util.tree_map_with_path, _is_proxy)
        parts.append(optax.masked(optax.scale(factor), mask))
    return optax.chain(*parts)
