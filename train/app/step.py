"""The traced part of training: the train state of a config (the model of :mod:`train.app.model`, the
optimiser of :mod:`train.app.optim`), the loss of :mod:`train.app.objective` over augmented views, and the
per-device step.

The train state is a plain pytree ``{'params', 'rest', 'opt_state', 'step'}`` (``rest``: NNX variables other
than parameters, e.g. batch statistics). The step is a pure function of (state, batch) written once for one
device's slice of the batch, pmap-style, and run under ``jax.shard_map`` or ``jax.pmap`` by
``geojax.parallel.data_parallel`` (:func:`train.app.program.distribute`). The loss always sees the global
batch: embeddings are all-gathered as keys, each local anchor's own column is masked through ``self_index``,
and normalisation is global (``axis_name``). The step closes over objects derived from the config (the
model's graph, the optimiser, an :class:`~train.app.objective.Objective`, a :class:`Views` recipe), never
over the config itself.

:func:`build` makes, in one call, everything traced that a run's program needs (:class:`Traced`); the program
that dispatches it is :mod:`train.app.program`, the evaluation of a trained state :mod:`train.app.report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geojax import memory as memory_lib
from geojax import parallel
from train.app import data
from train.app.model import build_model, compute_dtype
from train.app.objective import Objective, attach_loss_params
from train.app.optim import make_optimizer

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

State = dict[str, Any]


def steps_per_epoch(cfg: RunConfig, n_train: int) -> int:
    """Steps in one pass over ``n_train`` training images (whole batches, as a drop-last loader).

    Args:
        cfg: the run's configuration (its ``batch_size``).
        n_train: the number of training images.

    Returns:
        max(1, n_train // batch_size).
    """
    return max(1, n_train // cfg.batch_size)


def resolve(cfg: RunConfig, n_train: int) -> RunConfig:
    """``cfg`` with ``steps`` set from ``epochs`` (when given) for a training set of ``n_train`` images.

    Args:
        cfg: the run's configuration.
        n_train: the number of training images.

    Returns:
        ``cfg`` itself when ``epochs`` is None; else a copy with ``steps`` = max(1, round(epochs · steps per
        epoch)).
    """
    if cfg.epochs is None:
        return cfg
    return dataclasses.replace(cfg, steps=max(1, round(cfg.epochs * steps_per_epoch(cfg, n_train))))


def init_state(
    cfg: RunConfig,
    image_shape: tuple[int, int, int],
    *,
    axis_name: str | None = parallel.AXIS,
    classes: int | None = None,
) -> tuple[nnx.GraphDef, State]:
    """(graphdef, state) of a fresh run: parameters, other variables, optimiser state, step 0.

    The parameters include the loss's own (class proxies, a learned sigmoid's scale and bias:
    :func:`train.app.objective.attach_loss_params`), checkpointed and stacked per seed with the rest.

    Args:
        cfg: the run's configuration (model, optimiser, ``ema``, ``memory``, ``seed``).
        image_shape: the input images' shape (H, W, C).
        axis_name: the data-parallel mesh axis batch norm averages over (None: a single-device step).
        classes: the classes of the training labels, C (a proxy loss trains one proxy per class).

    Returns:
        The model's NNX graph definition and the state ``{'params', 'rest', 'opt_state', 'step'}`` (step an
        int32 scalar 0), with ``ema`` (a copy of the parameters) when ``cfg.ema`` is set and ``memory`` (an
        empty cross-batch memory of ``cfg.memory`` rows) when ``cfg.memory`` > 0.
    """
    model = build_model(cfg, image_shape, axis_name=axis_name)
    attach_loss_params(model, cfg, classes)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    state = {
        "params": params,
        "rest": rest,
        "opt_state": make_optimizer(cfg).init(params),
        "step": jnp.zeros((), jnp.int32),
    }
    if cfg.ema is not None:
        state["ema"] = jax.tree.map(jnp.copy, params)
    if cfg.memory:
        state["memory"] = memory_lib.init(cfg.memory, _key_rows_like(cfg, image_shape))
    return graphdef, state


def _key_rows_like(cfg: RunConfig, image_shape: tuple[int, int, int]) -> Any:
    """Shapes and dtypes of the key rows (:meth:`Objective.key_rows`) of one image's views: what a step's
    cross-batch memory stores per row."""
    objective = Objective.from_config(cfg)

    def rows(x):
        return objective.key_rows(build_model(cfg, image_shape, axis_name=None)(x))

    return jax.eval_shape(rows, jax.ShapeDtypeStruct((1, *image_shape), jnp.float32))


def init_replicas(
    cfg: RunConfig, image_shape: tuple[int, int, int], *, classes: int | None = None
) -> tuple[nnx.GraphDef, State]:
    """(graphdef, state) of ``cfg.seeds`` fresh runs with seeds ``cfg.seed …``, stacked on a leading axis.

    Each replica is exactly the state of the single run with its seed.

    Args:
        cfg: the run's configuration (``seed``, ``seeds`` = S).
        image_shape: the input images' shape (H, W, C).
        classes: the classes of the training labels (:func:`init_state`).

    Returns:
        The graph definition (shared) and the state of :func:`init_state` with every leaf stacked on a
        leading axis of S replicas, plus ``seed`` [S] int32, the replicas' seeds.
    """
    seeds = range(cfg.seed, cfg.seed + cfg.seeds)
    inits = [
        init_state(dataclasses.replace(cfg, seed=s, seeds=1), image_shape, classes=classes) for s in seeds
    ]
    state = jax.tree.map(lambda *leaves: jnp.stack(leaves), *(st for _, st in inits))
    return inits[0][0], {**state, "seed": jnp.asarray(list(seeds), jnp.int32)}


def replica(state: State, index: int) -> State:
    """Replica ``index`` of a stacked several-seeds state, as the single run's state (no ``seed`` entry).

    Args:
        state: a state of :func:`init_replicas`'s layout, S replicas on the leading axis.
        index: the replica, 0 ≤ index < S.

    Returns:
        The replica's state, each leaf without the leading axis.
    """
    return jax.tree.map(lambda x: x[index], {k: v for k, v in state.items() if k != "seed"})


def ema_decay(cfg: RunConfig, n_train: int) -> float | None:
    """Per-step decay of the weights' EMA: ``cfg.ema`` per epoch, i.e. ema^(1/steps per epoch).

    Args:
        cfg: the run's configuration (``ema``, ``batch_size``).
        n_train: the number of training images.

    Returns:
        The per-step decay in (0, 1), or None when the run keeps no EMA.
    """
    return None if cfg.ema is None else cfg.ema ** (1.0 / steps_per_epoch(cfg, n_train))


def ema_update(ema: Any, params: Any, decay: float, count: jax.Array) -> Any:
    """One EMA step of the weights, as torch_ema's ExponentialMovingAverage (used by Stowell 2026's code).

    d = min(decay, (1 + count) / (10 + count)) after ``count`` updates (this one included), then
    ema ← d·ema + (1 − d)·params (``optax.incremental_update`` with step size 1 − d).

    Args:
        ema: the averaged weights, a pytree.
        params: the new weights, a pytree of the same structure.
        decay: the per-step decay (:func:`ema_decay`), in (0, 1).
        count: the number of updates so far, this one included (an integer scalar array).

    Returns:
        The updated average, of ``params``' structure.
    """
    count = count.astype(jnp.float32)
    d = jnp.minimum(decay, (1.0 + count) / (10.0 + count))
    return optax.incremental_update(params, ema, 1.0 - d)


@dataclasses.dataclass(frozen=True)
class Views:
    """How a batch becomes the model's input: ``n`` augmented views of each image, in ``dtype``.

    Calling it with (key, images [b, H, W, C], positions [b]) gives the views [n·b, H, W, C] of
    :func:`data.views` (uint8 codes turned into floats first).

    Attributes:
        n: views per image, ≥ 1.
        augment: the augmentation's name (``shift``, ``crop_flip``, ``simclr``, ``crop_jitter_gray``,
            ``none``).
        dtype: the dtype of the model's input (None: float32; bf16 under ``precision=bf16``).
    """

    n: int
    augment: str
    dtype: Any = None

    def __call__(self, key: jax.Array, images: jax.Array, positions: jax.Array) -> jax.Array:
        x = data.views(key, data.to_unit(images), positions, n_views=self.n, kind=self.augment)
        return x if self.dtype is None else x.astype(self.dtype)


def make_loss(
    cfg: RunConfig, graphdef: nnx.GraphDef, axis_name: str | None = parallel.AXIS
) -> Callable[..., tuple[jax.Array, tuple[dict, Any, Any]]]:
    """The training loss ``loss(params, rest, batch, key, memory=None) -> (total, (terms, rest, enqueue))``.

    The training objective of one device's batch (see :func:`make_step` for ``batch``), its views drawn and
    augmented with ``key``'s first half and the objective's own randomness (an atlas's prior sample) from its
    second; ``rest`` comes back updated (batch statistics). With a cross-batch ``memory`` (geojax.memory) its
    rows are further keys, constants, and ``enqueue`` is (key rows, labels) of the global batch, every
    device's views gathered in device order (else None). Differentiate it with respect to ``params``.

    Args:
        cfg: the run's configuration (objective, views, augment, precision).
        graphdef: the model's NNX graph definition.
        axis_name: the data-parallel mesh axis the loss gathers keys over (None: one device).

    Returns:
        The loss function described above.
    """
    objective_fn = Objective.from_config(cfg)
    views = Views(cfg.views, cfg.augment, compute_dtype(cfg))

    def loss(params, rest, batch, key, memory=None):
        k_aug, k_prior = jax.random.split(key)
        x = views(k_aug, batch["x"], batch["pos"])
        labels = jnp.tile(batch["y"], views.n)
        model = nnx.merge(graphdef, params, rest, copy=True)
        out = model(x)
        loss_params = getattr(model, "loss_params", None)
        total, terms = objective_fn(out, labels, k_prior, axis_name, memory, loss_params)
        enqueue = None if memory is None else objective_fn.gathered_keys(out, labels, axis_name)
        return total, (terms, nnx.state(model, nnx.Not(nnx.Param)), enqueue)

    return loss


def enqueue(memory: memory_lib.Memory, rows: Any, labels: jax.Array, on: jax.Array) -> memory_lib.Memory:
    """``memory`` with the global batch's key rows enqueued (geojax.memory.update) where ``on``, else as is.

    Args:
        memory: the cross-batch memory (Wang et al. 2020, XBM §3.3).
        rows: the global batch's key rows (:meth:`Objective.gathered_keys`).
        labels: their labels [N], int32.
        on: a boolean scalar: the step is at or past ``memory_warmup``.

    Returns:
        The memory with the rows enqueued (the oldest overwritten) when ``on``, else ``memory``'s values.
    """
    updated = memory_lib.update(memory, rows, labels)
    return jax.tree.map(lambda new, old: jnp.where(on, new, old), updated, memory)


def make_step(
    cfg: RunConfig,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    axis_name: str | None = parallel.AXIS,
    *,
    ema: float | None = None,
) -> Callable[[State, dict[str, jax.Array]], tuple[State, dict[str, jax.Array]]]:
    """Per-device step ``(state, batch) -> (state, metrics)`` of the run's loss and optimiser.

    batch = {'x': [n, H, W, C] (float32 in [0, 1] or uint8 codes, see :func:`data.to_unit`), 'y': [n],
    'pos': [n] global positions}. Gradients of :func:`make_loss` are pmean-ed over ``axis_name``
    (geojax.parallel's convention). A state with a cross-batch ``memory`` (``cfg.memory`` > 0) reads it as
    further keys and, from step ``cfg.memory_warmup`` on, enqueues the global batch after the loss: every
    device holds the same memory.

    Args:
        cfg: the run's configuration.
        graphdef: the model's NNX graph definition.
        tx: the optimiser (:func:`train.app.optim.make_optimizer`).
        axis_name: the data-parallel mesh axis (None: a single-device step).
        ema: the per-step decay of the weights' EMA (:func:`ema_decay`), required exactly when ``cfg.ema``
            is set.

    Returns:
        The step function; its metrics are ``loss``, each objective term (unweighted) and ``grad_norm``,
        averaged over the devices.

    Raises:
        ValueError: ``ema`` is given without ``cfg.ema``, or missing with it.
    """
    if (cfg.ema is None) != (ema is None):
        raise ValueError(f"ema must be the per-step decay when cfg.ema is set (cfg.ema={cfg.ema}), got {ema}")
    loss = make_loss(cfg, graphdef, axis_name)

    def step(state, batch):
        # a replica of a several-seeds run carries its own seed (init_replicas); a single run uses cfg.seed
        key = jax.random.fold_in(jax.random.key(state.get("seed", cfg.seed)), state["step"])
        memory = state.get("memory")
        (total, (terms, rest, rows)), grads = jax.value_and_grad(loss, has_aux=True)(
            state["params"], state["rest"], batch, key, memory
        )
        grads = parallel.pmean(grads, axis_name)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new = {
            "params": optax.apply_updates(state["params"], updates),
            "rest": parallel.pmean(rest, axis_name),
            "opt_state": opt_state,
            "step": state["step"] + 1,
        }
        if ema is not None:
            new["ema"] = ema_update(state["ema"], new["params"], ema, new["step"])
        if memory is not None:
            new["memory"] = enqueue(memory, *rows, state["step"] >= cfg.memory_warmup)
        if "seed" in state:
            new["seed"] = state["seed"]
        metrics = {"loss": total, **terms, "grad_norm": optax.tree.norm(grads)}
        return new, parallel.pmean(metrics, axis_name)

    return step


class Traced(NamedTuple):
    """What :func:`build` makes of a run: everything traced that its program needs.

    Attributes:
        graphdef: the model's NNX graph definition.
        state: the fresh state (:func:`init_state`, or :func:`init_replicas` for several seeds), replicated
            on the mesh.
        per_device: the per-device step of the run's loss and optimiser (:func:`make_step`).
    """

    graphdef: nnx.GraphDef
    state: State
    per_device: Callable[[State, dict[str, jax.Array]], tuple[State, dict[str, jax.Array]]]


def build(
    cfg: RunConfig, image_shape: tuple[int, int, int], labels: np.ndarray, mesh: jax.sharding.Mesh
) -> Traced:
    """The state and step of a run over ``mesh``: its model, objective and optimiser.

    Args:
        cfg: the run's configuration, its length resolved (:func:`resolve`).
        image_shape: the training images' shape (H, W, C).
        labels: the training labels [N], int (their classes size a proxy loss; N, the EMA's per-step decay).
        mesh: the data-parallel mesh.

    Returns:
        The :class:`Traced` of the run: a fresh state (one replica per seed) on ``mesh`` and the per-device
        step (with the EMA's per-step decay on N images).
    """
    init = init_replicas if cfg.seeds > 1 else init_state
    graphdef, state = init(cfg, image_shape, classes=int(labels.max()) + 1)
    state = replicate(state, mesh)
    per_device = make_step(cfg, graphdef, make_optimizer(cfg), ema=ema_decay(cfg, len(labels)))
    return Traced(graphdef, state, per_device)


def replicate(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """``tree`` (the same on every process) as arrays replicated on every device of ``mesh``.

    Args:
        tree: a pytree of arrays, the same on every process.
        mesh: the data mesh.

    Returns:
        The pytree as global ``jax.Array`` s replicated over ``mesh``.
    """
    sharding = NamedSharding(mesh, P())
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)


def local_copy(tree: Any) -> Any:
    """A replicated (possibly multi-process) ``tree`` as arrays on this process's first device.

    Args:
        tree: a pytree of replicated ``jax.Array`` s (other leaves are kept as they are).

    Returns:
        The pytree with each array replaced by its copy on this process's first addressable device.
    """
    return jax.tree.map(lambda x: x.addressable_data(0) if isinstance(x, jax.Array) else x, tree)
