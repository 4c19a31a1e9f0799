"""The host part of training: run directory, resume, checkpoints, batches, logging and progress.

The traced part (model, objective, optimiser, per-device step) is :mod:`train.step`. A run directory holds
``config.json``, ``metrics.jsonl`` (one line per ``log_every`` steps, each value the mean over that window)
and orbax ``checkpoints/``; rerunning with the same ``workdir`` resumes from its latest checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from geojax import parallel
from train import checkpoint, data, files, step
from train.config import Config

# Keys that change how a run is executed or reported, not what it computes: a resumed run may change them.
RUN_ONLY = (
    "workdir",
    "progress",
    "checkpoint_every",
    "log_every",
    "eval_batch",
    "parallel",
    "devices",
    "multihost",
)


class TrainResult(NamedTuple):
    """What :func:`train` returns."""

    workdir: str
    graphdef: nnx.GraphDef
    state: step.State
    dataset: data.Dataset
    timing: dict[str, Any]


def _fresh_workdir() -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = os.path.join("runs", stamp if i == 0 else f"{stamp}-{i}")
        if not os.path.exists(path):
            return path
    raise RuntimeError("could not find a fresh run directory under runs/")


def _recipe(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in RUN_ONLY}


def _prepare_workdir(cfg: Config) -> str:
    """Create (or reuse, checking the config matches) the run directory; write config.json."""
    workdir = cfg.workdir or _fresh_workdir()
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "config.json")
    current = _recipe(dataclasses.asdict(cfg))
    if os.path.exists(path):
        with open(path) as f:
            saved = _recipe(json.load(f))
        diff = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if diff:
            raise ValueError(
                f"workdir {workdir!r} holds a run with a different config (keys {diff}); "
                f"use a fresh workdir to start a new run"
            )
    if jax.process_index() == 0:
        files.write_json(path, dataclasses.asdict(cfg) | {"workdir": workdir})
    return workdir


def _trim_log(path: str, upto: int) -> None:
    """Keep only the metrics lines of steps ≤ ``upto`` (a resumed run rewrites what follows)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = [ln for ln in f if ln.strip() and json.loads(ln)["step"] <= upto]
    files.write_text(path, "".join(lines))


def batch_for(cfg: Config, labels: np.ndarray, images: np.ndarray, step_index: int, n_global: int) -> dict:
    """This process's slice of the global batch of ``step_index``: images, labels (or instance ids),
    global positions."""
    p, count = jax.process_index(), jax.process_count()
    local = cfg.batch_size // count
    idx = data.sample(
        labels,
        kind=cfg.sampler,
        batch=local,
        seed=cfg.seed,
        step=step_index,
        process=p,
        m_per_class=cfg.m_per_class,
        class_fraction=cfg.class_fraction,
    )
    pos = (p * local + np.arange(local)).astype(np.int32)
    y = pos if cfg.labels == "instance" else labels[idx].astype(np.int32)
    return {"x": images[idx], "y": y, "pos": pos}


class _Window:
    """Running sums of the step metrics (on device, no host sync) since the last log line."""

    def __init__(self) -> None:
        self.sums: dict[str, jax.Array] | None = None
        self.count = 0

    def add(self, metrics: dict[str, jax.Array]) -> None:
        self.sums = metrics if self.sums is None else jax.tree.map(jnp.add, self.sums, metrics)
        self.count += 1

    def mean(self) -> dict[str, float]:
        means = {k: float(v) / self.count for k, v in self.sums.items()}
        self.sums, self.count = None, 0
        return means


def train(cfg: Config, *, stop_at: int | None = None) -> TrainResult:
    """Train (resuming from the workdir's latest checkpoint) until ``cfg.steps`` (or ``stop_at``, which
    simulates a run killed after that step)."""
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
    mesh = parallel.make_mesh(cfg.devices)
    n_dev = mesh.devices.size
    if cfg.batch_size % n_dev or cfg.batch_size % jax.process_count():
        raise ValueError(f"batch_size must be divisible by the {n_dev} devices, got {cfg.batch_size}")
    workdir = _prepare_workdir(cfg)
    tx = step.make_optimizer(cfg)
    graphdef, state = step.init_state(cfg, ds.image_shape)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), every=cfg.checkpoint_every)
    start = 0
    if ckpt.latest_step() is not None:
        state = ckpt.restore(state)
        start = int(state["step"])
    log_path = os.path.join(workdir, "metrics.jsonl")
    _trim_log(log_path, start)
    run = parallel.data_parallel(step.make_step(cfg, graphdef, tx), mode=cfg.parallel, mesh=mesh)
    lr = step.schedule(cfg)
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    lead = jax.process_index() == 0
    bar = tqdm(total=cfg.steps, initial=start, disable=not (cfg.progress and lead), unit="step", leave=False)
    window = _Window()
    t_train, first_step_s = time.time(), math.nan
    with open(log_path, "a") as log:
        for i in range(start, end):
            state, metrics = run(state, batch_for(cfg, ds.train_y, ds.train_x, i, n_dev))
            window.add(metrics)
            if i == start:
                jax.block_until_ready(metrics)
                first_step_s = time.time() - t_train
            done = i + 1
            if done % cfg.log_every == 0 or done == end:
                means = window.mean()
                record = {"step": done, **means, "lr": float(lr(i)), "time": round(time.time() - t_start, 3)}
                if not all(math.isfinite(v) for v in means.values()):
                    raise FloatingPointError(f"non-finite training metrics at step {done}: {record}")
                bar.set_postfix(loss=f"{means['loss']:.4f}", refresh=False)
                if lead:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
            if done % cfg.checkpoint_every == 0 or done == cfg.steps:
                ckpt.save(done, state, force=True)
            bar.update(1)
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
    return TrainResult(workdir, graphdef, state, ds, timing)
