"""The training loop: :func:`prepare` a run (processes, mesh, data, state, run directory, program), then
:func:`run` it (dispatches, logging, checkpoints, signals).

The traced part (model, objective, optimiser, per-device step) is :mod:`train.app.step`, its dispatch
:mod:`train.app.program` and the run directory (resume, ``init_from``) :mod:`train.app.rundir`.
``metrics.jsonl`` holds one line per ``log_every`` steps, each value the mean over that window.

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
import json
import math
import os
import signal
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from tqdm.auto import tqdm

from geojax import parallel
from train.app import checkpoint, data, hosts, optim, rundir, step
from train.app import program as program_lib
from train.app.errors import UsageError
from train.app.selection import Selection

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


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


clock = time.monotonic  # the clock of the ``checkpoint_minutes`` rule (a test gives each process its own)


def _checkpoint_every(cfg: RunConfig) -> int:
    return cfg.checkpoint_every or max(1, cfg.steps // 10)


class Setup(NamedTuple):
    """What :func:`prepare` makes of a config and :func:`run` trains.

    Attributes:
        cfg: the run's configuration, ``steps`` resolved from ``epochs``.
        ds: the data set trained on (less the validation images with ``select_best``).
        graphdef: the model's NNX graph definition.
        state: the state the run starts from (fresh, resumed or from ``init_from``), on the mesh.
        start: its step.
        program: the run's steps compiled over its mesh, and their feed.
        workdir: the run directory.
        ckpt: its checkpoints.
        selection: the best-epoch selection (``select_best``), or None.
        t_start: when preparing began (``time.time()``), for the metrics' clock.
    """

    cfg: RunConfig
    ds: data.Dataset
    graphdef: nnx.GraphDef
    state: step.State
    start: int
    program: program_lib.Program
    workdir: str
    ckpt: checkpoint.Checkpointer
    selection: Selection | None
    t_start: float


def prepare(cfg: RunConfig) -> Setup:
    """Everything before the first step.

    The processes, the mesh and the run directory (checked first: they cost nothing), the data, the state
    (resumed from the run directory, or started from ``init_from``), the run directory and the compiled
    program. Everything that can reject the run (devices, the run directory, data) is checked before the
    run directory is written.

    Args:
        cfg: the run's configuration.

    Returns:
        The run's :class:`Setup`.

    Raises:
        UsageError: more devices than available, a batch size not divisible by the devices, a run directory
            holding another run, a bad data set, ``knn_k`` larger than the training set, or an unusable
            ``init_from``.
        CheckpointError: the run directory holds checkpoints but none can be restored.
    """
    join_processes(cfg)
    t_start = time.time()
    mesh = _mesh(cfg)
    saved = rundir.check_workdir(cfg)
    ds, val = data.prepare(cfg)
    images, shape = data.compact(ds.train_x), ds.image_shape  # the training images as the devices hold them
    tables, batches = data.label_tables(ds.train_y), data.Batches.of(cfg)
    cfg = step.resolve(cfg, len(ds.train_y))  # the length, on the data: the schedule follows it
    traced = step.build(cfg, shape, ds.train_y, mesh)
    state, start = rundir.resume(cfg, traced.state, saved)
    if jax.process_count() > 1:  # every process has read the workdir before the lead writes to it
        multihost_utils.sync_global_devices("train: workdir checked")
    workdir = rundir.prepare(cfg, start)
    selection = None if val is None else Selection(cfg, workdir, traced.graphdef, val, start, state)
    program = program_lib.Program(cfg, mesh, traced.per_device, batches=batches, images=images, tables=tables)
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    return Setup(cfg, ds, traced.graphdef, state, start, program, workdir, ckpt, selection, t_start)


def _mesh(cfg: RunConfig) -> jax.sharding.Mesh:
    """The data-parallel mesh of ``cfg.devices`` (all by default), checked against the batch size."""
    if cfg.devices is not None and cfg.devices > jax.device_count():
        raise UsageError(f"devices must be at most the {jax.device_count()} available, got {cfg.devices}")
    mesh = parallel.make_mesh(cfg.devices)
    if cfg.batch_size % mesh.devices.size or cfg.batch_size % jax.process_count():
        raise UsageError(
            f"batch_size must be divisible by the {mesh.devices.size} devices, got {cfg.batch_size}"
        )
    return mesh


class _Log:
    """The run's metrics (``metrics.jsonl``, the lead's, one line per ``log_every`` steps, each value the mean
    over its window) and progress bar; a non-finite logged metric stops the run."""

    def __init__(self, setup: Setup, end: int):
        cfg, lead = setup.cfg, jax.process_index() == 0
        self.cfg, self.end, self.t_start = cfg, end, setup.t_start
        self.lr = optim.schedule(cfg)
        self.window = _Window()
        path = os.path.join(setup.workdir, "metrics.jsonl") if lead else os.devnull
        self.file = open(path, "a")
        show = cfg.progress and lead
        self.bar = tqdm(total=cfg.steps, initial=setup.start, disable=not show, unit="step", leave=False)

    def add(self, metrics: dict[str, jax.Array], first: int, length: int) -> None:
        """Add a call's metrics; write the window's line when the call crosses a ``log_every`` step."""
        self.window.add(metrics, length)
        done = first + length
        if done // self.cfg.log_every > first // self.cfg.log_every or done == self.end:
            self._line(done)

    def _line(self, done: int) -> None:
        per_replica = self.window.mean()
        means = {k: float(np.mean(v)) for k, v in per_replica.items()}  # over replicas, if any
        record = {
            "step": done,
            **means,
            "lr": float(self.lr(done - 1)),
            "time": round(time.time() - self.t_start, 3),
        }
        if not all(math.isfinite(v) for v in means.values()):
            bad = np.any(~np.isfinite(np.stack([np.atleast_1d(v) for v in per_replica.values()])), 0)
            seeds = [self.cfg.seed + int(i) for i in np.flatnonzero(bad)]
            which = "" if self.cfg.seeds == 1 else f" (seeds {seeds})"
            raise FloatingPointError(f"non-finite training metrics at step {done}{which}: {record}")
        if self.cfg.seeds > 1:
            record["loss_per_seed"] = [float(v) for v in per_replica["loss"]]
        self.bar.set_postfix(loss=f"{means['loss']:.4f}", refresh=False)
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.bar.close()
        self.file.close()


class _Saving:
    """When to checkpoint: when a call crosses a multiple of ``checkpoint_every`` (a tenth of the run by
    default), at the run's last step, every ``checkpoint_minutes`` and on a stop signal; the signals and the
    clock are those of every process (:func:`train.app.hosts.decide`)."""

    def __init__(self, cfg: RunConfig):
        self.cfg, self.every = cfg, _checkpoint_every(cfg)
        self.last, self.agreement = clock(), hosts.Agreement()

    def decide(self, caught: list[int], call: int, first: int, done: int) -> tuple[int | None, bool]:
        """(the signal that stops the run, or None; whether to save ``done``) after dispatch ``call``."""
        overdue = clock() - self.last > 60 * self.cfg.checkpoint_minutes
        stop, overdue = hosts.decide(self.agreement, caught, overdue, call)
        periodic = done // self.every > first // self.every or done == self.cfg.steps
        return stop, periodic or overdue or stop is not None

    def saved(self) -> None:
        self.last = clock()


def run(setup: Setup, *, stop_at: int | None = None) -> TrainResult:
    """Train from the setup's state to ``cfg.steps`` (or to ``stop_at``).

    Each dispatch runs a few steps of the program. After each, the metrics are logged when a ``log_every``
    step passed, a checkpoint is saved when one is due (:class:`_Saving`), the selection validates when due,
    and a SIGINT or SIGTERM (on any process) stops the run after its checkpoint.

    Args:
        setup: the run, as :func:`prepare` made it.
        stop_at: stop after this step (saving a checkpoint), simulating a run killed there; None: train to
            ``cfg.steps``.

    Returns:
        The run directory, the config, the graph definition, the trained state (the best evaluation's weights
        with ``select_best``), the data set and the timing.

    Raises:
        FloatingPointError: a logged training metric (the loss among them) is NaN or infinite.
        Interrupted: SIGINT or SIGTERM arrived; a checkpoint of the current step was saved first.
    """
    cfg, state, ckpt, selection = setup.cfg, setup.state, setup.ckpt, setup.selection
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    log, saving = _Log(setup, end), _Saving(cfg)
    t_train, first_step_s = time.time(), math.nan
    if selection is not None and selection.missed():
        selection.after(state, setup.start - 1, setup.start, ckpt, saved=True)
    with (
        contextlib.closing(log),
        hosts.stop_signals() as caught,
        contextlib.closing(setup.program.feeds(setup.start, end)) as feeds,
    ):
        for call, ((first, length), batch) in enumerate(feeds):
            state, metrics = setup.program(state, length, batch)
            if first == setup.start:  # compilation included
                jax.block_until_ready(metrics)
                first_step_s = time.time() - t_train
            log.add(metrics, first, length)
            stop, save = saving.decide(caught, call, first, first + length)
            if save:
                ckpt.save(first + length, state)
                saving.saved()
            if selection is not None:
                selection.after(state, first, first + length, ckpt, save)
            log.bar.update(length)
            if stop is not None:
                _close(setup)
                raise Interrupted(stop, first + length, setup.workdir)
    return _result(setup, state, end, t_train, first_step_s)


def _close(setup: Setup) -> None:
    setup.ckpt.close()
    if setup.selection is not None:
        setup.selection.close()


def _result(setup: Setup, state: step.State, end: int, t_train: float, first_step_s: float) -> TrainResult:
    """The trained run, once its checkpoints are written: its state (the kept weights of ``select_best`` when
    it ran to its last step; this process's copy) and its timing."""
    cfg, program = setup.cfg, setup.program
    _close(setup)
    if setup.selection is not None and end == cfg.steps:  # the kept weights (at the run's last step)
        state = setup.selection.kept(state)
    state = jax.block_until_ready(state)
    train_s = time.time() - t_train
    timing = {
        "train_s": round(train_s, 2),
        "first_step_s": round(first_step_s, 2) if math.isfinite(first_step_s) else None,  # incl. compile
        "steps_per_s": round((end - setup.start) / train_s, 2) if end > setup.start else 0.0,
        "steps_run": end - setup.start,
        "devices": program.mesh.devices.size,
        "processes": jax.process_count(),
        "feed": program.feed,
        "feed_dtype": str(program.images.dtype),  # uint8 for 8-bit images
        "steps_per_call": cfg.steps_per_call,
    }
    if jax.process_count() > 1:
        state = step.local_copy(state)
    return TrainResult(setup.workdir, cfg, setup.graphdef, state, setup.ds, timing)


def train(cfg: RunConfig, *, stop_at: int | None = None) -> TrainResult:
    """Train (resuming from the workdir's latest checkpoint) until ``cfg.steps`` or ``stop_at``:
    :func:`run` of :func:`prepare`.

    In a multi-process run every process calls this; the returned state is then this process's copy.

    Args:
        cfg: the run's configuration.
        stop_at: stop after this step (saving a checkpoint), simulating a run killed there; None: train to
            ``cfg.steps``.

    Returns:
        The run directory, the resolved config, the model's graph definition, the trained state (the best
        evaluation's weights with ``select_best``), the data set and the timing.

    Raises:
        UsageError: as :func:`prepare`.
        CheckpointError: as :func:`prepare`.
        FloatingPointError: as :func:`run`.
        Interrupted: as :func:`run`.
    """
    return run(prepare(cfg), stop_at=stop_at)
