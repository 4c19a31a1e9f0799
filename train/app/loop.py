"""The host part of training: run directory, resume, checkpoints, feeding, logging and progress.

The traced part (model, objective, optimiser, per-device step) is :mod:`train.app.step`. A run directory holds
``config.json``, ``metrics.jsonl`` (one line per ``log_every`` steps, each value the mean over that window)
and orbax ``checkpoints/``; rerunning with the same ``workdir`` resumes from its latest checkpoint.

Feeding (``feed``): ``device`` keeps the training images (uint8 when they are 8-bit) on every device and
draws each step's batch inside the jitted step; ``host`` gathers each step's rows in NumPy in a background
thread, a few calls ahead. Both take the same batches from the same sampler (:class:`train.app.data.Batches`).
Each dispatch runs ``steps_per_call`` steps (a ``lax.scan``); a log line or a checkpoint falls due when a
call crosses a multiple of ``log_every`` or ``checkpoint_every``. Several processes (JAX's distributed
runtime, :func:`join_processes`) form one data-parallel mesh: each loads the whole training set, draws the
same global batches and feeds or uses only its own rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from geojax import metrics, parallel
from train.app import checkpoint, config, data, hosts, optim, report, step
from train.app.errors import UsageError
from train.helpers import files

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

DEVICE_FEED_BYTES = 1 << 30  # the automatic feed holds training images up to this size on each device


class Interrupted(Exception):
    """Training stopped by SIGINT (Ctrl-C) or SIGTERM after saving a checkpoint of its current step.

    Rerunning the same command resumes from that checkpoint; ``python -m train`` exits with 128 + ``signum``.

    Args:
        signum: the signal that stopped training (``signal.SIGINT`` or ``signal.SIGTERM``).
        step: the step the checkpoint was saved at.
        workdir: the run directory holding the checkpoint.
    """

    def __init__(self, signum: int, step: int, workdir: str):
        self.signum, self.step, self.workdir = signum, step, workdir
        name = signal.Signals(signum).name
        super().__init__(
            f"{name}: stopped after step {step} with a checkpoint in {workdir}; rerun the command to resume"
        )


def say(text: str) -> None:
    """One line for the user on stderr (from the lead process only).

    Args:
        text: the line, without its newline.
    """
    if jax.process_index() == 0:
        print(text, file=sys.stderr, flush=True)


class TrainResult(NamedTuple):
    """What :func:`train` returns.

    Attributes:
        workdir: the run directory.
        config: the run's configuration, with ``steps`` resolved from ``epochs``.
        graphdef: the model's NNX graph definition (its structure, without the weights).
        state: the trained state (parameters, batch statistics, optimiser state, step; stacked on a leading
            replica axis for several seeds); in a multi-process run, this process's copy.
        dataset: the data set trained on (less the validation images with ``select_best``).
        timing: training time, first-step time (compile included), steps per second, steps run, devices,
            processes, the feed and its dtype, steps per call.
    """

    workdir: str
    config: RunConfig  # with ``steps`` resolved from ``epochs``
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
    """What a run computes: the keys it uses, less how it executes (``run`` keys) and its length (a rerun may
    extend a run). A key a saved config lacks was added after that run, at the default that keeps what the
    code computed before it (``simo_orthogonality_weight=1.0``: eq. 1 as it was)."""
    used = config.used({**config.DEFAULTS, **values})
    return {k: v for k, v in used.items() if k not in config.RUN_KEYS + config.LENGTH_KEYS}


def check_workdir(cfg: RunConfig) -> dict[str, Any] | None:
    """Check, before any work, that ``cfg.workdir`` can hold this run.

    A run directory may hold the same recipe (the keys its run uses, less the ``run`` keys and the length):
    rerunning it resumes or extends that run.

    Args:
        cfg: the run's configuration (``workdir`` None: a fresh directory, nothing to check).

    Returns:
        The config.json saved in ``cfg.workdir`` (a dict of every key), or None when there is none.

    Raises:
        UsageError: ``workdir`` is a file, its config.json cannot be read, or it holds a run of another
            recipe (the message names the keys that differ).
    """
    if cfg.workdir is None:
        return None
    if os.path.exists(cfg.workdir) and not os.path.isdir(cfg.workdir):
        raise UsageError(f"workdir {cfg.workdir!r} is a file, not a directory")
    path = os.path.join(cfg.workdir, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(
            f"workdir {cfg.workdir!r}: cannot read its config.json ({err}); use a fresh workdir"
        ) from None
    saved_recipe, recipe = _recipe(saved), _recipe(dataclasses.asdict(cfg))
    diff = sorted(k for k in set(saved_recipe) | set(recipe) if saved_recipe.get(k) != recipe.get(k))
    if diff:
        raise UsageError(
            f"workdir {cfg.workdir!r} holds a run with a different config (keys {diff}); "
            f"use a fresh workdir to start a new run"
        )
    return saved


def _newest(directory: str, like: step.State, steps: int, what: str) -> tuple[step.State, int] | None:
    """The newest checkpoint under ``directory`` restored into ``like``'s structure, and its step; None when
    there is none. ``what`` names its run in the error for a step past ``steps``."""
    ckpt = checkpoint.Checkpointer(directory)
    try:
        restored = ckpt.restore(like)
    finally:
        ckpt.close()
    if restored is None:
        return None
    start = int(np.max(restored["step"]))
    if start > steps:
        raise UsageError(f"{what} at step {start}; steps must be ≥ {start}")
    return restored, start


def _init_from(cfg: RunConfig, like: step.State) -> tuple[step.State, int]:
    """The newest checkpoint of run directory ``cfg.init_from`` restored into ``like``'s structure, and its
    step: a new run's starting point (before its own workdir is touched)."""
    source = os.path.join(cfg.init_from, "checkpoints")
    if not os.path.isdir(source):
        raise UsageError(f"init_from {cfg.init_from!r} is not a run directory with checkpoints")
    try:
        restored = _newest(source, like, cfg.steps, f"init_from {cfg.init_from!r} is")
    except checkpoint.CheckpointError as err:
        raise UsageError(f"init_from {cfg.init_from!r}: {err}") from None
    if restored is None:
        raise UsageError(f"init_from {cfg.init_from!r} holds no checkpoint")
    say(f"starting from step {restored[1]} of {cfg.init_from}")
    return restored


def _prepare_workdir(cfg: RunConfig) -> str:
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


def join_processes(cfg: RunConfig) -> None:
    """Start JAX's distributed runtime when the config or JAX's environment names a multi-process run.

    The config's ``coordinator``, ``num_processes`` and ``process_id`` come first, then
    ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID``; ``multihost`` asks for the
    cluster's own settings. CPU collectives then go through gloo, the runtime's heartbeat and shutdown
    timeouts are ``distributed_timeout_s``, and each process watches for another's failure
    (:func:`train.app.hosts.join`). Must run before anything starts JAX's backends; does nothing for a
    single-process run or when the runtime is already started.

    Args:
        cfg: the run's configuration.

    Raises:
        UsageError: ``JAX_NUM_PROCESSES`` or ``JAX_PROCESS_ID`` is not a non-negative integer, or several
            processes are named without a coordinator.
    """

    def setting(value: Any, name: str) -> Any:
        if value is not None or name not in os.environ:
            return value
        text = os.environ[name]
        if name != "JAX_COORDINATOR_ADDRESS" and not text.strip().isdigit():
            raise UsageError(f"environment variable {name} must be a non-negative integer, got {text!r}")
        return text if name == "JAX_COORDINATOR_ADDRESS" else int(text)

    address = setting(cfg.coordinator, "JAX_COORDINATOR_ADDRESS")
    count = setting(cfg.num_processes, "JAX_NUM_PROCESSES")
    index = setting(cfg.process_id, "JAX_PROCESS_ID")
    if address is None and not cfg.multihost:
        if count not in (None, 1) or index not in (None, 0):
            raise UsageError("a multi-process run needs coordinator=HOST:PORT (or $JAX_COORDINATOR_ADDRESS)")
        return
    if jax.distributed.is_initialized():
        return
    hosts.join(address, count, index, timeout_s=cfg.distributed_timeout_s)


def feed_kind(cfg: RunConfig, images: np.ndarray) -> str:
    """``cfg.feed``, or by default ``device`` when ``images`` fit in DEVICE_FEED_BYTES under shard_map.

    A several-seeds run always uses ``device``: its replicas draw their own batches on the devices.

    Args:
        cfg: the run's configuration (``feed``, ``seeds``, ``parallel``).
        images: the training images as they would be held on each device (after :func:`data.compact`).

    Returns:
        ``"device"`` or ``"host"``.
    """
    if cfg.feed is not None or cfg.seeds > 1:
        return cfg.feed or "device"
    return "device" if cfg.parallel == "shard_map" and images.nbytes <= DEVICE_FEED_BYTES else "host"


def schedule_calls(start: int, end: int, steps_per_call: int) -> list[tuple[int, int]]:
    """(first step, number of steps) of each dispatch from ``start`` to ``end``; the last may be shorter.

    Args:
        start: the first step to run (the resumed step), ≥ 0.
        end: the step to stop at, exclusive.
        steps_per_call: the steps per dispatch, ≥ 1.

    Returns:
        The calls in order, covering ``start`` … ``end`` − 1; empty when ``end`` ≤ ``start``.
    """
    return [(i, min(steps_per_call, end - i)) for i in range(start, end, steps_per_call)]


def host_feed(
    batches: data.Batches,
    tables: dict[str, np.ndarray],
    images: np.ndarray,
    calls: list[tuple[int, int]],
    *,
    process: int | None = None,
    processes: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """This process's rows of each call's batches, {'x', 'y', 'pos'} [length, B/processes, ...] in NumPy.

    The row indices come from the same jnp sampler as the device feed (:meth:`data.Batches.rows`), evaluated
    on the host CPU; process p takes rows p·B/P … (p + 1)·B/P − 1 of each global batch.

    Args:
        batches: the run's batches (sampler, global batch size B, seed).
        tables: the label tables of :func:`data.label_tables`.
        images: the training images [N, H, W, C] (float32, or uint8 codes).
        calls: (first step, number of steps) of each dispatch, as :func:`schedule_calls` gives them.
        process: the process p whose rows to take (None: this process).
        processes: the number of processes P (None: JAX's process count).

    Returns:
        An iterator of one dict per call: ``x`` images [length, B/P, H, W, C], ``y`` labels and ``pos``
        global positions [length, B/P].
    """
    p = jax.process_index() if process is None else process
    count = batches.batch // (jax.process_count() if processes is None else processes)
    cpu = jax.local_devices(backend="cpu")[0]
    label_tables = jax.device_put(tables, cpu)
    rows = jax.jit(jax.vmap(lambda t, s: batches.rows(t, s, p * count, count), in_axes=(None, 0)))
    for first, length in calls:
        got = jax.device_get(rows(label_tables, jax.device_put(np.arange(first, first + length), cpu)))
        yield {"x": images[got["idx"]], "y": got["y"], "pos": got["pos"]}


class _Window:
    """Running sums of the step metrics (on device, no host sync) since the last log line."""

    def __init__(self) -> None:
        self.sums: dict[str, jax.Array] | None = None
        self.count = 0

    def add(self, metrics: dict[str, jax.Array], steps: int) -> None:
        """Add a call's metrics, each the mean over its ``steps`` steps."""
        weighted = jax.tree.map(lambda m: m * steps, metrics)
        self.sums = weighted if self.sums is None else jax.tree.map(jnp.add, self.sums, weighted)
        self.count += steps

    def mean(self) -> dict[str, np.ndarray]:
        """Each metric's mean over the window: a scalar, or one value per replica of a several-seeds run."""
        means = {k: np.asarray(v, np.float64) / self.count for k, v in self.sums.items()}
        self.sums, self.count = None, 0
        return means


@contextlib.contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """Catch SIGINT and SIGTERM while training: the list receives the signal, the loop saves and stops.

    Where JAX's preemption service listens for SIGTERM (a multi-process run), SIGTERM is left to it."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    signals = (signal.SIGINT,) if hosts.runtime_catches_sigterm() else (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in signals}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


clock = time.monotonic  # the clock of the ``checkpoint_minutes`` rule (a test gives each process its own)


def _decide(
    agreement: hosts.Agreement, caught: list[int], overdue: bool, call: int
) -> tuple[int | None, bool]:
    """What every process does after dispatch ``call``: the signal that stops the run (None: go on) and
    whether the clock asks for a checkpoint. Taken from all processes' signals and clocks (``agreement``;
    in a multi-process run, as they were one call before) and JAX's preemption sync point, so that all
    processes save the same step."""
    sigint, sigterm, overdue = agreement(signal.SIGINT in caught, signal.SIGTERM in caught, overdue)
    if sigterm or hosts.preempted(call):
        return signal.SIGTERM, overdue
    return (signal.SIGINT if sigint else None), overdue


def _check_data(cfg: RunConfig, ds: data.Dataset) -> None:
    """What would fail only after training, checked before it."""
    if cfg.knn_k > len(ds.train_y):
        raise UsageError(f"knn_k must be at most the {len(ds.train_y)} training images, got {cfg.knn_k}")


def _checkpoint_every(cfg: RunConfig) -> int:
    return cfg.checkpoint_every or max(1, cfg.steps // 10)


@jax.jit
def _keep_better(best: step.State, state: step.State, better: jax.Array) -> step.State:
    """``state``'s entries where ``better`` (one flag, or one per replica on the leading axis), else
    ``best``'s: a new copy (``state`` is donated to the next call)."""

    def pick(b, s):
        flag = better.reshape(better.shape + (1,) * (s.ndim - better.ndim))
        return jnp.where(flag, s, b)

    return jax.tree.map(pick, best, state)


class _Selector:
    """Best-epoch selection (``select_best``; Stowell 2026 §5's early stopping): P@1 of the held-out
    validation images against the rest of the training set every ``val_every`` steps (default one epoch),
    each replica's weights of its best evaluation kept (on device and in ``best/``), the history in
    ``selection.json``. A resumed run keeps the evaluations up to its checkpoint's step."""

    def __init__(self, cfg: RunConfig, workdir: str, graphdef: nnx.GraphDef, val: data.Dataset, start: int):
        self.cfg, self.graphdef, self.val = cfg, graphdef, val
        self.per_epoch = step.steps_per_epoch(cfg, len(val.train_y))
        self.every = cfg.val_every or self.per_epoch
        self.path = os.path.join(workdir, "selection.json")
        self.ckpt = checkpoint.Checkpointer(os.path.join(workdir, "best"), keep=1)
        self.history: list[dict[str, Any]] = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.history = [h for h in json.load(f)["history"] if h["step"] <= start]
        self.best: step.State | None = None
        self.start = start

    def restore_best(self, like: step.State) -> None:
        """Read the kept weights back on resume (when an earlier evaluation kept some)."""
        if self.history:
            self.best = self.ckpt.restore(like)

    def due(self, first: int, done: int) -> bool:
        return done // self.every > first // self.every or done == self.cfg.steps

    def pending(self) -> bool:
        """Whether the resumed step is an evaluation point whose evaluation is not recorded (stopped between
        the checkpoint and the record)."""
        return self.start > 0 and self.due(self.start - 1, self.start) and self.start not in self.steps()

    def steps(self) -> list[int]:
        return [h["step"] for h in self.history]

    def scores(self) -> np.ndarray:
        """[evaluations, replicas] validation P@1."""
        return np.asarray([h["precision_at_1"] for h in self.history], np.float64).reshape(
            len(self.history), self.cfg.seeds
        )

    def _p1(self, state: step.State) -> list[float]:
        out = []
        for index in range(self.cfg.seeds):
            own = state if self.cfg.seeds == 1 else step.replica(state, index)
            kw = dict(batch=self.cfg.eval_batch, precision=self.cfg.precision)
            query = step.embed(self.graphdef, own, self.val.test_x, **kw)
            reference = step.embed(self.graphdef, own, self.val.train_x, **kw)
            q, sim = report.retrieval_inputs(self.cfg, query)
            r, _ = report.retrieval_inputs(self.cfg, reference)
            out.append(metrics.precision_at_1(q, self.val.test_y, r, self.val.train_y, similarity=sim))
        return [float(v) for v in out]

    def evaluate(self, state: step.State, done: int) -> bool:
        """Validate ``state`` (of step ``done``); returns whether a replica improved (its weights are then
        kept: the caller saves a regular checkpoint of ``done`` first, so a resume never starts before the
        kept weights' step)."""
        p1 = self._p1(step.local_copy(state) if hosts.several() else state)
        before = self.scores().max(axis=0) if self.history else np.full(self.cfg.seeds, -np.inf)
        # the lead's comparison decides for all processes, which then save (or not) the same weights together
        better = hosts.lead_decides(np.asarray(p1) > before)
        self.history.append({"step": done, "epoch": round(done / self.per_epoch, 3), "precision_at_1": p1})
        if better.any():
            flags = jnp.asarray(better if self.cfg.seeds > 1 else better[0])
            self.best = _keep_better(state if self.best is None else self.best, state, flags)
        return bool(better.any())

    def record(self) -> dict[str, Any]:
        """selection.json: every evaluation and, per seed, the kept evaluation's step, epoch and P@1."""
        scores = self.scores()
        best = [self.history[int(i)] for i in scores.argmax(axis=0)] if self.history else []
        return {
            "val_images": len(self.val.test_y),
            "every_steps": self.every,
            "best": [
                {"step": h["step"], "epoch": h["epoch"], "precision_at_1": h["precision_at_1"][k]}
                for k, h in enumerate(best)
            ],
            "history": self.history,
        }


def train(cfg: RunConfig, *, stop_at: int | None = None) -> TrainResult:
    """Train (resuming from the workdir's latest checkpoint) until ``cfg.steps`` or ``stop_at``.

    Everything that can reject the run (data, devices, the run directory) is checked before the run
    directory is written. In a multi-process run every process calls this; the returned state is then this
    process's copy.

    Args:
        cfg: the run's configuration.
        stop_at: stop after this step (saving a checkpoint), simulating a run killed there; None: train to
            ``cfg.steps``.

    Returns:
        The run directory, the resolved config, the model's graph definition, the trained state (the best
        evaluation's weights with ``select_best``), the data set and the timing.

    Raises:
        UsageError: a bad data set, more devices than available, a batch size not divisible by the devices,
            ``knn_k`` larger than the training set, a run directory holding another run, or an unusable
            ``init_from``.
        CheckpointError: the run directory holds checkpoints but none can be restored (damaged, or written
            by a model of another shape).
        FloatingPointError: a logged training metric (the loss among them) is NaN or infinite.
        Interrupted: SIGINT or SIGTERM arrived; a checkpoint of the current step was saved first.
    """
    join_processes(cfg)
    t_start = time.time()
    # Everything that can reject the run (data, device count) is checked before the workdir is touched.
    ds = data.load(cfg.dataset, test_fraction=cfg.test_fraction, data_dir=cfg.data_dir)
    if cfg.classes == "disjoint":
        ds = data.disjoint_classes(ds)
    val = None
    if cfg.select_best:  # train on the rest; the report's reference set is the rest too
        ds, val = data.hold_out(ds, cfg.val_fraction)
    _check_data(cfg, ds)
    cfg = step.resolve(cfg, len(ds.train_y))
    if cfg.devices is not None and cfg.devices > jax.device_count():
        raise UsageError(f"devices must be at most the {jax.device_count()} available, got {cfg.devices}")
    mesh = parallel.make_mesh(cfg.devices)
    n_dev = mesh.devices.size
    if cfg.batch_size % n_dev or cfg.batch_size % jax.process_count():
        raise UsageError(f"batch_size must be divisible by the {n_dev} devices, got {cfg.batch_size}")
    images = data.compact(ds.train_x)
    feed = feed_kind(cfg, images)
    saved = check_workdir(cfg)
    tx = optim.make_optimizer(cfg)
    init = step.init_replicas if cfg.seeds > 1 else step.init_state
    graphdef, state = init(cfg, ds.image_shape)
    state = step.replicate(state, mesh)
    start = 0
    if saved is not None:
        where = os.path.join(cfg.workdir, "checkpoints")
        restored = _newest(where, state, cfg.steps, f"workdir {cfg.workdir!r} holds a run")
        if restored is not None:
            state, start = restored
            _say_resume(cfg, saved, start)
    if start == 0 and cfg.init_from is not None:
        state, start = _init_from(cfg, state)
    if jax.process_count() > 1:  # every process has read the workdir before the lead writes to it
        multihost_utils.sync_global_devices("train: workdir checked")
    workdir = _prepare_workdir(cfg)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    lead = jax.process_index() == 0
    log_path = os.path.join(workdir, "metrics.jsonl") if lead else os.devnull
    if lead:
        _trim_log(log_path, start)
    selector = None if val is None else _Selector(cfg, workdir, graphdef, val, start)
    if selector is not None:
        selector.restore_best(state)
    per_device = step.make_step(cfg, graphdef, tx, ema=step.ema_decay(cfg, len(ds.train_y)))
    batches = step.make_batches(cfg)
    label_tables = data.label_tables(ds.train_y)
    tables = step.replicate({"images": images, **label_tables}, mesh) if feed == "device" else None
    compiled: dict[int, Any] = {}

    def run(length: int):  # one compiled call per number of steps (steps_per_call, and a shorter last one)
        if length not in compiled:
            call = step.make_call(
                per_device,
                length=length,
                batches=batches if feed == "device" else None,
                replicas=cfg.seeds > 1,
            )
            compiled[length] = step.distribute(call, mesh=mesh, mode=cfg.parallel)
        return compiled[length]

    lr = optim.schedule(cfg)
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    calls = schedule_calls(start, end, cfg.steps_per_call)
    if feed == "host":
        put = functools.partial(step.put_feed, mesh=mesh, mode=cfg.parallel)
        feeds = data.prefetch(map(put, host_feed(batches, label_tables, images, calls)))
    else:
        feeds = ({} for _ in calls)  # the device feed draws its batches inside the step
    bar = tqdm(total=cfg.steps, initial=start, disable=not (cfg.progress and lead), unit="step", leave=False)
    window = _Window()
    every, last_save, agreement = _checkpoint_every(cfg), clock(), hosts.Agreement()
    t_train, first_step_s = time.time(), math.nan
    if selector is not None and selector.pending():
        _select(selector, state, start, ckpt, lead, saved_now=True)
    with open(log_path, "a") as log, _stop_signals() as caught, contextlib.closing(feeds):
        for call, ((first, length), batch) in enumerate(zip(calls, feeds, strict=True)):
            state, metrics = run(length)(state, tables, batch)
            window.add(metrics, length)
            if first == start:
                jax.block_until_ready(metrics)
                first_step_s = time.time() - t_train
            done = first + length
            if done // cfg.log_every > first // cfg.log_every or done == end:
                per_replica = window.mean()
                means = {k: float(np.mean(v)) for k, v in per_replica.items()}  # over replicas, if any
                record = {
                    "step": done,
                    **means,
                    "lr": float(lr(done - 1)),
                    "time": round(time.time() - t_start, 3),
                }
                if not all(math.isfinite(v) for v in means.values()):
                    bad = np.any(~np.isfinite(np.stack([np.atleast_1d(v) for v in per_replica.values()])), 0)
                    which = (
                        ""
                        if cfg.seeds == 1
                        else f" (seeds {[cfg.seed + int(i) for i in np.flatnonzero(bad)]})"
                    )
                    raise FloatingPointError(f"non-finite training metrics at step {done}{which}: {record}")
                if cfg.seeds > 1:
                    record["loss_per_seed"] = [float(v) for v in per_replica["loss"]]
                bar.set_postfix(loss=f"{means['loss']:.4f}", refresh=False)
                log.write(json.dumps(record) + "\n")
                log.flush()
            # read once: a signal arriving after the decision is handled at the next call
            stop, overdue = _decide(
                agreement, caught, clock() - last_save > 60 * cfg.checkpoint_minutes, call
            )
            saved_now = done // every > first // every or done == cfg.steps or overdue or stop is not None
            if saved_now:
                ckpt.save(done, state)
                last_save = clock()
            if selector is not None and selector.due(first, done):
                _select(selector, state, done, ckpt, lead, saved_now=saved_now)
            bar.update(length)
            if stop is not None:
                bar.close()
                ckpt.close()
                if selector is not None:
                    selector.ckpt.close()
                raise Interrupted(stop, done, workdir)
    bar.close()
    ckpt.close()
    if selector is not None:
        selector.ckpt.close()
        if selector.best is not None and end == cfg.steps:  # the kept weights (at the run's last step)
            state = {**selector.best, "step": state["step"]}
    state = jax.block_until_ready(state)
    train_s = time.time() - t_train
    timing = {
        "train_s": round(train_s, 2),
        "first_step_s": round(first_step_s, 2) if math.isfinite(first_step_s) else None,  # incl. compile
        "steps_per_s": round((end - start) / train_s, 2) if end > start else 0.0,
        "steps_run": end - start,
        "devices": n_dev,
        "processes": jax.process_count(),
        "feed": feed,
        "feed_dtype": str(images.dtype),  # uint8 for 8-bit images
        "steps_per_call": cfg.steps_per_call,
    }
    if jax.process_count() > 1:
        state = step.local_copy(state)
    return TrainResult(workdir, cfg, graphdef, state, ds, timing)


def _select(selector: _Selector, state: step.State, done: int, ckpt, lead: bool, *, saved_now: bool) -> None:
    """Validate step ``done``; when a replica improved, keep its weights: a regular checkpoint of ``done``
    first (unless just saved), then ``best/``, then the record."""
    if selector.evaluate(state, done):
        if not saved_now:
            ckpt.save(done, state)
        selector.ckpt.save(done, selector.best)
    if lead:
        files.write_json(selector.path, selector.record())


def _say_resume(cfg: RunConfig, saved: dict[str, Any], start: int) -> None:
    """Tell the user that a run resumes, and what raising ``steps`` does to a finished run's schedule."""
    before = saved.get("steps")
    if before is not None and cfg.steps > before and start >= before:
        lr = float(optim.schedule(cfg)(start))
        say(
            f"extending the finished run in {cfg.workdir} from {before} to {cfg.steps} steps: the learning "
            f"rate follows the schedule of a {cfg.steps}-step run, from its step-{start} value {lr:.3g}"
        )
    elif start < cfg.steps:
        say(f"resuming from step {start} of {cfg.steps} ({cfg.workdir})")
