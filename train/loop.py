"""Training loop: model and optimiser from a config, the pure data-parallel step, checkpoints and logging.

The train state is a plain pytree ``{'params', 'rest', 'opt_state', 'step'}`` (``rest``: NNX variables other
than parameters, e.g. batch statistics); the step is a pure function of (graphdef, state, batch) via
``nnx.merge``, written once for one device's slice of the batch (geojax.parallel) and run under
``jax.shard_map`` or ``jax.pmap``. The loss always sees the global batch: embeddings are all-gathered as
keys, each local anchor's own column is masked through ``self_index``, and normalisation is global
(``axis_name``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from geojax import losses, manifolds, models, parallel, regularizers
from geojax import similarity as similarity_lib
from train import checkpoint, data, files
from train.config import Config

NO_OVERLAP = 1e3  # d_M where two atlas points share no chart (finite, so losses stay finite)
_SIM_LOSSES = {
    "supcon": losses.supcon,
    "sincere": losses.sincere,
    "info_nce": losses.info_nce,
    "contrastive": losses.contrastive,
    "triplet": losses.triplet,
    "lifted_structured": losses.lifted_structured,
}


def compute_dtype(cfg: Config):
    """Layer compute dtype for ``cfg.precision`` (parameters, loss and embeddings stay float32)."""
    return jnp.bfloat16 if cfg.precision == "bf16" else None


def build_model(
    cfg: Config, image_shape: tuple[int, int, int], *, axis_name: str | None = parallel.AXIS
) -> models.EmbeddingModel:
    """The encoder + head (+ projection) of ``cfg`` for images of ``image_shape``, initialised from the seed.

    Batch norm (if any) synchronises its statistics over ``axis_name`` (None: a plain single-device step).
    """
    rngs = nnx.Rngs(cfg.seed)
    dt = compute_dtype(cfg)
    enc = models.encoder(
        cfg.encoder,
        input_shape=image_shape,
        width=cfg.width or None,
        norm=cfg.norm or None,
        axis_name=axis_name,
        compute_dtype=dt,
        rngs=rngs,
    )
    return models.EmbeddingModel(
        enc,
        geometry=cfg.geometry,
        dim=cfg.dim,
        charts=cfg.charts,
        projection=cfg.projection,
        projection_dim=cfg.projection_dim,
        compute_dtype=dt,
        rngs=rngs,
    )


def schedule(cfg: Config) -> optax.Schedule:
    """Linear warm-up (``warmup`` steps, capped at steps/2) then cosine decay to 0 or a constant rate."""
    warmup = min(cfg.warmup, cfg.steps // 2)
    if cfg.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warmup, cfg.steps)
    return optax.linear_schedule(0.0, cfg.lr, warmup) if warmup else optax.constant_schedule(cfg.lr)


def make_optimizer(cfg: Config) -> optax.GradientTransformation:
    """optax.chain(clip_by_global_norm(c) | clip(c), optimiser) — seed 000 clips at 100 (DESIGN §3)."""
    lr = schedule(cfg)
    opt = {
        "adam": lambda: optax.adam(lr),
        "adamw": lambda: optax.adamw(lr, weight_decay=cfg.weight_decay),
        "sgd": lambda: optax.sgd(lr, momentum=cfg.momentum or None),
        "rmsprop": lambda: optax.rmsprop(lr),
    }[cfg.optimizer]()
    clip = optax.clip_by_global_norm(cfg.clip) if cfg.clip_mode == "global_norm" else optax.clip(cfg.clip)
    return optax.chain(clip, opt)


def init_state(
    cfg: Config, image_shape: tuple[int, int, int], *, axis_name: str | None = parallel.AXIS
) -> tuple[nnx.GraphDef, dict[str, Any]]:
    """(graphdef, state) of a fresh run: parameters, other variables, optimiser state, step 0."""
    graphdef, params, rest = nnx.split(build_model(cfg, image_shape, axis_name=axis_name), nnx.Param, ...)
    state = {
        "params": params,
        "rest": rest,
        "opt_state": make_optimizer(cfg).init(params),
        "step": jnp.zeros((), jnp.int32),
    }
    return graphdef, state


def _loss_kwargs(cfg: Config) -> dict[str, Any]:
    if cfg.loss in ("supcon", "sincere", "info_nce"):
        return {"temperature": cfg.temperature}
    if cfg.loss == "triplet":
        return {"margin": cfg.margin, "mining": cfg.mining}
    margins = {"pos_margin": cfg.pos_margin, "neg_margin": cfg.neg_margin}
    return {k: v for k, v in margins.items() if not math.isnan(v)}


def objective(
    cfg: Config, out: dict[str, jax.Array], labels: jax.Array, key: jax.Array, axis_name: str | None
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Loss + weighted regularisers of one device's outputs against the keys of all devices.

    out: the model's outputs for the n local rows; labels: [n]. Every term is the value on the global batch.
    Returns (total, {term name: unweighted value}).
    """
    n = labels.shape[0]
    keys = {
        "key_labels": parallel.gather(labels, axis_name),
        "self_index": parallel.self_index(n, axis_name),
        "axis_name": axis_name,
    }
    vectors = out.get("projection", out["embedding"])
    if cfg.loss == "simo":
        main = losses.simo(
            vectors,
            labels,
            eps=cfg.simo_eps,
            orthogonality=cfg.simo_orthogonality,
            key_embeddings=parallel.gather(vectors, axis_name),
            **keys,
        )
    else:
        if cfg.similarity == "torus":  # flat-torus distance between the angles (turns) of torus embeddings
            angles = manifolds.clifford_to_angles(vectors)
            sim = similarity_lib.torus(angles, parallel.gather(angles, axis_name))
        elif cfg.similarity == "manifold":
            sim = -similarity_lib.manifold_distance(
                out["coords"],
                out["q"],
                parallel.gather(out["coords"], axis_name),
                parallel.gather(out["q"], axis_name),
                no_overlap=NO_OVERLAP,
            )
        else:
            sim = similarity_lib.get(cfg.similarity)(vectors, parallel.gather(vectors, axis_name))
        main = _SIM_LOSSES[cfg.loss](sim, labels, **_loss_kwargs(cfg), **keys)
    terms = {cfg.loss: main}
    total = main
    if cfg.koleo > 0:
        terms["koleo"] = regularizers.koleo(out["embedding"], axis_name=axis_name)
        total = total + cfg.koleo * terms["koleo"]
    if cfg.mmd > 0:
        prior = regularizers.sample_prior(key, cfg.prior_samples, cfg.dim)
        terms["mmd"] = regularizers.mmd_atlas(out["coords"], out["q"], prior, axis_name=axis_name)
        total = total + cfg.mmd * terms["mmd"]
    if cfg.membership > 0:
        terms["membership"] = regularizers.membership(out["q"], axis_name=axis_name)
        total = total + cfg.membership * terms["membership"]
    return total, terms


def make_step(
    cfg: Config,
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    axis_name: str | None = parallel.AXIS,
) -> Callable:
    """Per-device step ``(state, batch) -> (state, metrics)``; batch = {'x': [n, H, W, C], 'y': [n],
    'pos': [n] global positions}. Gradients are pmean-ed over ``axis_name`` (geojax.parallel's convention)."""
    dt = compute_dtype(cfg)

    def step(state, batch):
        key = jax.random.fold_in(jax.random.key(cfg.seed), state["step"])
        k_aug, k_prior = jax.random.split(key)
        x = data.views(k_aug, batch["x"], batch["pos"], n_views=cfg.views, kind=cfg.augment)
        labels = jnp.tile(batch["y"], cfg.views)
        if dt is not None:
            x = x.astype(dt)

        def loss_fn(params):
            model = nnx.merge(graphdef, params, state["rest"], copy=True)
            total, terms = objective(cfg, model(x), labels, k_prior, axis_name)
            return total, (terms, nnx.state(model, nnx.Not(nnx.Param)))

        (total, (terms, rest)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
        grads = parallel.pmean(grads, axis_name)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        new = {
            "params": optax.apply_updates(state["params"], updates),
            "rest": parallel.pmean(rest, axis_name),
            "opt_state": opt_state,
            "step": state["step"] + 1,
        }
        metrics = {"loss": total, **terms, "grad_norm": optax.tree.norm(grads)}
        return new, parallel.pmean(metrics, axis_name)

    return step


def embed(
    graphdef: nnx.GraphDef, state: dict[str, Any], images: np.ndarray, *, batch: int, precision: str = "fp32"
) -> dict[str, np.ndarray]:
    """Evaluation-mode outputs (no augmentation) for ``images`` [N, H, W, C], in chunks of ``batch``."""
    model = nnx.merge(graphdef, state["params"], state["rest"])
    model.eval()
    dt = jnp.bfloat16 if precision == "bf16" else jnp.float32
    forward = jax.jit(lambda m, x: {k: v.astype(jnp.float32) for k, v in m(x.astype(dt)).items()})
    size = batch  # one compiled shape for every chunk and split (the last chunk is zero-padded)
    chunks = []
    for start in range(0, len(images), size):
        x = images[start : start + size]
        pad = size - len(x)
        out = forward(model, np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]) if pad else x)
        chunks.append({k: np.asarray(v)[: len(x)] for k, v in out.items()})
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


class Progress:
    """One-line progress bar on stderr: step, percentage, rate, ETA and the latest loss."""

    def __init__(self, total: int, start: int, enabled: bool):
        self.total, self.start, self.enabled = total, start, enabled
        self.t0 = self.last = time.time()
        self.loss = float("nan")

    def update(self, step: int) -> None:
        now = time.time()
        if not self.enabled or (now - self.last < 0.25 and step < self.total):
            return
        self.last = now
        done = step - self.start
        rate = done / max(now - self.t0, 1e-9)
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        frac = step / self.total
        bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
        eta_s = time.strftime("%M:%S", time.gmtime(eta)) if math.isfinite(eta) else "--:--"
        print(
            f"\r[{bar}] {step}/{self.total} {100 * frac:5.1f}% {rate:6.1f} it/s ETA {eta_s} "
            f"loss {self.loss:.4f}",
            end="",
            flush=True,
            file=sys.stderr,
        )

    def close(self) -> None:
        if self.enabled:
            print(file=sys.stderr)


def _fresh_workdir() -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = os.path.join("runs", stamp if i == 0 else f"{stamp}-{i}")
        if not os.path.exists(path):
            return path
    raise RuntimeError("could not find a fresh run directory under runs/")


_RUN_ONLY = (
    "workdir",
    "progress",
    "checkpoint_every",
    "log_every",
    "eval_batch",
    "parallel",
    "devices",
    "multihost",
)


_RUNNERS: dict[str, Callable] = {}


def _runner(cfg: Config, graphdef, tx, mesh, image_shape) -> Callable:
    """The data-parallel step of ``cfg``, reused (with its compiled code) by later runs of the same recipe in
    this process (sweeps, resumed runs, notebooks)."""
    from dataclasses import asdict

    recipe = {k: v for k, v in asdict(cfg).items() if k not in _RUN_ONLY}
    key = json.dumps([recipe, cfg.parallel, list(image_shape), [d.id for d in mesh.devices.flat]])
    if key not in _RUNNERS:
        _RUNNERS[key] = parallel.data_parallel(make_step(cfg, graphdef, tx), mode=cfg.parallel, mesh=mesh)
    return _RUNNERS[key]


def _prepare_workdir(cfg: Config) -> str:
    """Create (or reuse, checking the config matches) the run directory; write config.json."""
    from dataclasses import asdict

    workdir = cfg.workdir or _fresh_workdir()
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "config.json")
    current = {k: v for k, v in asdict(cfg).items() if k not in _RUN_ONLY}
    if os.path.exists(path):
        with open(path) as f:
            saved = {k: v for k, v in json.load(f).items() if k not in _RUN_ONLY}
        diff = sorted(
            k
            for k in set(saved) | set(current)
            if saved.get(k) != current.get(k) and not (_isnan(saved.get(k)) and _isnan(current.get(k)))
        )
        if diff:
            raise ValueError(
                f"workdir {workdir!r} holds a run with a different config (keys {diff}); "
                f"use a fresh workdir to start a new run"
            )
    if jax.process_index() == 0:
        files.write_json(path, asdict(cfg) | {"workdir": workdir})
    return workdir


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _trim_log(path: str, upto: int) -> None:
    """Keep only the metrics lines of steps ≤ ``upto`` (a resumed run rewrites what follows)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = [ln for ln in f if ln.strip() and json.loads(ln)["step"] <= upto]
    with open(path, "w") as f:
        f.writelines(lines)


def batch_for(cfg: Config, labels: np.ndarray, images: np.ndarray, step: int, n_global: int) -> dict:
    """This process's slice of the global batch of ``step``: images, labels (or instance ids), positions."""
    p, count = jax.process_index(), jax.process_count()
    local = cfg.batch_size // count
    idx = data.sample(
        labels,
        kind=cfg.sampler,
        batch=local,
        seed=cfg.seed,
        step=step,
        process=p,
        m_per_class=cfg.m_per_class,
        class_fraction=cfg.class_fraction,
    )
    pos = (p * local + np.arange(local)).astype(np.int32)
    y = pos if cfg.labels == "instance" else labels[idx].astype(np.int32)
    return {"x": images[idx], "y": y, "pos": pos}


def train(
    cfg: Config, *, stop_at: int | None = None
) -> tuple[str, nnx.GraphDef, dict[str, Any], data.Dataset, dict[str, float]]:
    """Train (resuming from the workdir's latest checkpoint) until ``cfg.steps`` (or ``stop_at``, which
    simulates a run killed after that step). Returns (workdir, graphdef, state, dataset, timing)."""
    if cfg.multihost:
        jax.distributed.initialize()
    t_start = time.time()
    # Everything that can reject the run (data, device count) is checked before the workdir is touched.
    ds = data.load(
        cfg.dataset,
        test_fraction=cfg.test_fraction,
        data_dir=cfg.data_dir,
        shard=(jax.process_index(), jax.process_count()),
    )
    mesh = parallel.make_mesh(cfg.devices or None)
    n_dev = mesh.devices.size
    if cfg.batch_size % n_dev or cfg.batch_size % jax.process_count():
        raise ValueError(f"batch_size must be divisible by the {n_dev} devices, got {cfg.batch_size}")
    workdir = _prepare_workdir(cfg)
    tx = make_optimizer(cfg)
    graphdef, state = init_state(cfg, ds.image_shape)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), every=cfg.checkpoint_every)
    start = 0
    if ckpt.latest_step() is not None:
        state = ckpt.restore(state)
        start = int(state["step"])
    log_path = os.path.join(workdir, "metrics.jsonl")
    _trim_log(log_path, start)
    run = _runner(cfg, graphdef, tx, mesh, ds.image_shape)
    lr = schedule(cfg)
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    bar = Progress(cfg.steps, start, cfg.progress and jax.process_index() == 0)
    t_train, first_step_s = time.time(), float("nan")
    with open(log_path, "a") as log:
        for step in range(start, end):
            state, metrics = run(state, batch_for(cfg, ds.train_y, ds.train_x, step, n_dev))
            if step == start:
                jax.block_until_ready(metrics)
                first_step_s = time.time() - t_train
            done = step + 1
            if done % cfg.log_every == 0 or done == end:
                record = {
                    "step": done,
                    **{k: float(v) for k, v in metrics.items()},
                    "lr": float(lr(step)),
                    "time": round(time.time() - t_start, 3),
                }
                if not all(math.isfinite(record[k]) for k in metrics):
                    raise FloatingPointError(f"non-finite training metrics at step {done}: {record}")
                bar.loss = record["loss"]
                if jax.process_index() == 0:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                ckpt.save(done, state, force=True)
            bar.update(done)
    bar.close()
    ckpt.close()
    state = jax.block_until_ready(state)
    train_s = time.time() - t_train
    timing = {
        "train_s": round(train_s, 2),
        "first_step_s": round(first_step_s, 2) if math.isfinite(first_step_s) else None,  # incl. compile
        "steps_per_s": round((end - start) / train_s, 2) if end > start else 0.0,
        "steps_run": end - start,
        "devices": n_dev,
    }
    return workdir, graphdef, state, ds, timing
