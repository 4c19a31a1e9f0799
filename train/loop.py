"""The host part of training: run directory, resume, checkpoints, batches, logging and progress.

The traced part (model, objective, optimiser, per-device step) is :mod:`train.step`. A run directory holds
``config.json``, ``metrics.jsonl`` (one line per ``log_every`` steps, each value the mean over that window)
and orbax ``checkpoints/``; rerunning with the same ``workdir`` resumes from its latest checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
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
    "checkpoint_minutes",
    "log_every",
    "eval_batch",
    "parallel",
    "devices",
    "multihost",
)
# Keys a rerun may raise to extend a finished (or running) run.
EXTENDABLE = ("steps", "epochs")


class Interrupted(Exception):
    """Training stopped by SIGINT (Ctrl-C) or SIGTERM after saving a checkpoint of its current step."""

    def __init__(self, signum: int, step: int, workdir: str):
        self.signum, self.step, self.workdir = signum, step, workdir
        name = signal.Signals(signum).name
        super().__init__(
            f"{name}: stopped after step {step} with a checkpoint in {workdir}; rerun the command to resume"
        )


def say(text: str) -> None:
    """One line for the user on stderr (from the lead process only)."""
    if jax.process_index() == 0:
        print(text, file=sys.stderr, flush=True)


class TrainResult(NamedTuple):
    """What :func:`train` returns."""

    workdir: str
    config: Config  # with ``steps`` resolved from ``epochs``
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
    return {k: v for k, v in values.items() if k not in RUN_ONLY + EXTENDABLE}


def _check_workdir(cfg: Config) -> dict[str, Any] | None:
    """Check, before any work, that ``cfg.workdir`` can hold this run; return its saved config (if any)."""
    if cfg.workdir is None:
        return None
    if os.path.exists(cfg.workdir) and not os.path.isdir(cfg.workdir):
        raise ValueError(f"workdir {cfg.workdir!r} is a file, not a directory")
    path = os.path.join(cfg.workdir, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(
            f"workdir {cfg.workdir!r}: cannot read its config.json ({err}); use a fresh workdir"
        ) from None
    diff = sorted(
        k
        for k in set(_recipe(saved)) | set(_recipe(dataclasses.asdict(cfg)))
        if saved.get(k) != getattr(cfg, k, None)
    )
    if diff:
        raise ValueError(
            f"workdir {cfg.workdir!r} holds a run with a different config (keys {diff}); "
            f"use a fresh workdir to start a new run"
        )
    return saved


def _prepare_workdir(cfg: Config) -> str:
    """Create (or reuse) the run directory and write config.json."""
    workdir = cfg.workdir or _fresh_workdir()
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
        files.write_json(os.path.join(workdir, "config.json"), dataclasses.asdict(cfg) | {"workdir": workdir})
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


@contextlib.contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """Catch SIGINT and SIGTERM while training: the list receives the signal, the loop saves and stops."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in _SIGNALS}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _check_data(cfg: Config, ds: data.Dataset) -> None:
    """What would fail only after training, checked before it."""
    if cfg.knn_k > len(ds.train_y):
        raise ValueError(f"knn_k must be at most the {len(ds.train_y)} training images, got {cfg.knn_k}")


def _checkpoint_every(cfg: Config) -> int:
    return cfg.checkpoint_every or max(1, cfg.steps // 10)


def train(cfg: Config, *, stop_at: int | None = None) -> TrainResult:
    """Train (resuming from the workdir's latest checkpoint) until ``cfg.steps`` (or ``stop_at``, which
    simulates a run killed after that step). SIGINT / SIGTERM save a checkpoint of the current step and raise
    :class:`Interrupted`."""
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
    _check_data(cfg, ds)
    n_train = len(ds.train_y) * jax.process_count()
    cfg = step.resolve(cfg, n_train)
    mesh = parallel.make_mesh(cfg.devices)
    n_dev = mesh.devices.size
    if cfg.batch_size % n_dev or cfg.batch_size % jax.process_count():
        raise ValueError(f"batch_size must be divisible by the {n_dev} devices, got {cfg.batch_size}")
    saved = _check_workdir(cfg)
    tx = step.make_optimizer(cfg)
    graphdef, state = step.init_state(cfg, ds.image_shape)
    start = 0
    if saved is not None:
        ckpt = checkpoint.Checkpointer(os.path.join(cfg.workdir, "checkpoints"))
        restored = ckpt.restore(state)
        if restored is not None:
            state, start = restored, int(restored["step"])
            if start > cfg.steps:
                raise ValueError(
                    f"workdir {cfg.workdir!r} holds a run at step {start}; steps must be ≥ {start}"
                )
            _say_resume(cfg, saved, start)
        ckpt.close()
    workdir = _prepare_workdir(cfg)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    log_path = os.path.join(workdir, "metrics.jsonl")
    _trim_log(log_path, start)
    per_device = step.make_step(cfg, graphdef, tx, ema=step.ema_decay(cfg, n_train))
    run = parallel.data_parallel(per_device, mode=cfg.parallel, mesh=mesh)
    lr = step.schedule(cfg)
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    lead = jax.process_index() == 0
    bar = tqdm(total=cfg.steps, initial=start, disable=not (cfg.progress and lead), unit="step", leave=False)
    window = _Window()
    every, last_save = _checkpoint_every(cfg), time.time()
    t_train, first_step_s = time.time(), math.nan
    with open(log_path, "a") as log, _stop_signals() as caught:
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
            overdue = time.time() - last_save > 60 * cfg.checkpoint_minutes
            if done % every == 0 or done == cfg.steps or overdue or caught:
                ckpt.save(done, state)
                last_save = time.time()
            bar.update(1)
            if caught:
                bar.close()
                ckpt.close()
                raise Interrupted(caught[0], done, workdir)
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
    return TrainResult(workdir, cfg, graphdef, state, ds, timing)


def _say_resume(cfg: Config, saved: dict[str, Any], start: int) -> None:
    """Tell the user that a run resumes, and what raising ``steps`` does to a finished run's schedule."""
    before = saved.get("steps")
    if before is not None and cfg.steps > before and start >= before:
        lr = float(step.schedule(cfg)(start))
        say(
            f"extending the finished run in {cfg.workdir} from {before} to {cfg.steps} steps: the learning "
            f"rate follows the schedule of a {cfg.steps}-step run, from its step-{start} value {lr:.3g}"
        )
    elif start < cfg.steps:
        say(f"resuming from step {start} of {cfg.steps} ({cfg.workdir})")
