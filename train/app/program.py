"""What the training loop dispatches: a run's steps compiled over its mesh, several to a call, and the batches
they read.

Feeding (``feed``): ``device`` keeps the training images (uint8 when they are 8-bit) on every device and
draws each step's batch inside the jitted step; ``host`` gathers each step's rows in NumPy in a background
thread, a few calls ahead. Both take the same batches from the same sampler (:class:`train.app.data.Batches`).
Each dispatch runs ``steps_per_call`` steps (a ``lax.scan``). Several processes (JAX's distributed runtime)
form one data-parallel mesh: each loads the whole training set, draws the same global batches and feeds or
uses only its own rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geojax import parallel
from train.app import data, step

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

DEVICE_FEED_BYTES = 1 << 30  # the automatic feed holds training images up to this size on each device


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


# XLA:CPU runs a small CNN's step several times slower inside a while loop (lax.scan) than straight-line: on
# CPU, and for one step anywhere, the steps of a call are unrolled.
def _unrolled(length: int) -> bool:
    return length == 1 or jax.default_backend() == "cpu"


def make_call(
    one_step: Callable[[step.State, dict[str, jax.Array]], tuple[step.State, dict[str, jax.Array]]],
    *,
    length: int,
    batches: data.Batches | None = None,
    axis_name: str | None = parallel.AXIS,
    replicas: bool = False,
) -> Callable[[step.State, Any, Any], tuple[step.State, dict[str, jax.Array]]]:
    """Per-device ``call(state, tables, feed) -> (state, metrics)``: ``length`` steps of ``one_step``.

    The steps run in one ``lax.scan`` (straight-line on CPU), the metrics averaged over them (a log window's
    mean stays a mean).

    Device feed (``batches`` given): ``tables`` holds the training ``images`` [N, H, W, C] (replicated) and
    the :func:`data.label_tables`; each step draws its global batch from its own step counter and takes this
    device's rows of it (no host work, no transfer); ``feed`` is unused. Host feed: ``feed`` leaves
    [length, n, ...] hold this device's rows of each step's batch; ``tables`` is unused.

    Args:
        one_step: the per-device step of :func:`train.app.step.make_step`.
        length: the steps per call, ≥ 1.
        batches: the run's batches, for the device feed; None: the host feed.
        axis_name: the data-parallel mesh axis (None: one device, which takes the whole batch).
        replicas: the state is :func:`train.app.step.init_replicas`'s, several seeds stacked on a leading
            axis; the step is ``jax.vmap``-ped over it, each replica drawing its own batches and augmentations
            (device feed only), and the metrics come per replica ([S]).

    Returns:
        The per-device call ``(state, tables, feed) -> (state, metrics)``, metrics averaged over the steps.

    Raises:
        ValueError: ``replicas`` without ``batches`` (several seeds need the device feed).
    """

    if replicas and batches is None:
        raise ValueError(
            "replicas (several seeds in one program) draw their batches on the devices: pass batches"
        )

    def drawn_step(state, tables):
        """One step on this device's rows of the step's global batch, drawn with the state's own seed (each
        replica's batches) or the run's."""
        own = dataclasses.replace(batches, seed=state["seed"]) if "seed" in state else batches
        count = own.batch // (1 if axis_name is None else lax.axis_size(axis_name))
        start = 0 if axis_name is None else lax.axis_index(axis_name) * count
        rows = own.rows(tables, state["step"], start, count)
        return one_step(state, {"x": tables["images"][rows["idx"]], "y": rows["y"], "pos": rows["pos"]})

    if replicas:  # the state's leaves are stacked on a leading replica axis; the tables are shared
        drawn_step = jax.vmap(drawn_step, in_axes=(0, None))

    def call(state, tables, feed):
        def body(state, batch):
            return drawn_step(state, tables) if batches is not None else one_step(state, batch)

        if not _unrolled(length):
            state, metrics = lax.scan(body, state, None if batches is not None else feed, length=length)
            return state, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)
        steps = []
        for i in range(length):
            state, metrics = body(
                state, None if batches is not None else jax.tree.map(lambda x, i=i: x[i], feed)
            )
            steps.append(metrics)
        return state, jax.tree.map(lambda *m: jnp.mean(jnp.stack(m), axis=0), *steps)

    return call


def distribute(
    call: Callable[[step.State, Any, Any], tuple[step.State, dict[str, jax.Array]]],
    *,
    mesh: jax.sharding.Mesh,
    mode: str = "shard_map",
) -> Callable[[step.State, Any, Any], tuple[step.State, dict[str, jax.Array]]]:
    """``run(state, tables, feed)`` of a per-device :func:`make_call` over the 1-D data ``mesh``.

    It is ``geojax.parallel.data_parallel`` with the device feed's tables as a shared, replicated argument.

    ``state`` replicated (:func:`train.app.step.replicate`) and, under shard_map, donated (its buffers are
    reused for the new state); ``tables`` replicated and kept; ``feed`` leaves [length, B, ...] with B split
    over the devices (:func:`put_feed`). ``mode='pmap'`` runs under ``jax.pmap`` (host feed only).

    Args:
        call: the per-device call of :func:`make_call`.
        mesh: the 1-D data mesh.
        mode: ``shard_map`` or ``pmap``.

    Returns:
        ``run(state, tables, feed) -> (state, metrics)``; under pmap it raises ValueError when given
        ``tables`` (the device feed needs shard_map).
    """
    axis = mesh.axis_names[0]
    if mode == "shard_map":
        return parallel.data_parallel(
            call, mesh=mesh, axis_name=axis, donate_state=True, batch_axis=1, shared=True
        )
    mapped = parallel.data_parallel(
        lambda state, feed: call(state, None, feed), mode=mode, mesh=mesh, axis_name=axis, batch_axis=1
    )

    def run(state, tables, feed):
        if tables is not None:
            raise ValueError("the device feed needs parallel='shard_map'")
        return mapped(state, feed)

    return run


def put_feed(feed: Any, mesh: jax.sharding.Mesh, mode: str = "shard_map") -> Any:
    """This process's host-feed rows as the global arrays that :func:`distribute`'s ``run`` takes.

    Args:
        feed: this process's rows of a call's batches, leaves [length, B/processes, ...] in NumPy.
        mesh: the 1-D data mesh.
        mode: ``shard_map`` (the rows are split over the devices on axis 1) or ``pmap`` (``feed`` is returned
            as it is: pmap splits it itself).

    Returns:
        The feed as global arrays of leaves [length, B, ...] sharded over the mesh, or ``feed`` under pmap.
    """
    if mode != "shard_map":
        return feed
    sharding = NamedSharding(mesh, P(None, mesh.axis_names[0]))
    if jax.process_count() == 1:
        return jax.device_put(feed, sharding)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), feed)


class Program:
    """A run's steps compiled over its mesh, and the feed of their batches.

    One program per number of steps a call runs (``steps_per_call``, and a shorter last call).

    Calling it with (state, length, batch) runs ``length`` steps from ``state``, donated, and returns the new
    state and the metrics averaged over those steps.

    Args:
        cfg: the run's configuration (its length resolved).
        mesh: the data-parallel mesh.
        per_device: the per-device step of the run (:func:`train.app.step.make_step`).
        batches: the run's batches (:meth:`train.app.data.Batches.of`).
        images: the training images as the feed holds them (:func:`train.app.data.compact`).
        tables: their labels' tables (:func:`train.app.data.label_tables`).
    """

    def __init__(
        self,
        cfg: RunConfig,
        mesh: jax.sharding.Mesh,
        per_device: Callable[[step.State, dict[str, jax.Array]], tuple[step.State, dict[str, jax.Array]]],
        *,
        batches: data.Batches,
        images: np.ndarray,
        tables: dict[str, np.ndarray],
    ):
        self.cfg, self.mesh, self.images = cfg, mesh, images
        self.feed = feed_kind(cfg, images)
        self.per_device, self.batches, self.label_tables = per_device, batches, tables
        device = self.feed == "device"
        self.tables = step.replicate({"images": images, **tables}, mesh) if device else None
        self._calls: dict[int, Callable[..., tuple[step.State, dict[str, jax.Array]]]] = {}

    def __call__(self, state: step.State, length: int, batch: Any) -> tuple[step.State, dict[str, jax.Array]]:
        if length not in self._calls:
            call = make_call(
                self.per_device,
                length=length,
                batches=self.batches if self.feed == "device" else None,
                replicas=self.cfg.seeds > 1,
            )
            self._calls[length] = distribute(call, mesh=self.mesh, mode=self.cfg.parallel)
        return self._calls[length](state, self.tables, batch)

    def feeds(self, start: int, end: int) -> Iterator[tuple[tuple[int, int], dict[str, Any]]]:
        """The dispatches from step ``start`` to ``end`` (:func:`schedule_calls`), each with its batch.

        Args:
            start: the first step to run.
            end: the step to stop at, exclusive.

        Returns:
            An iterator (close it when done) of ((first step, number of steps), batch) per call; the batch
            is this process's rows of the call's batches, put on its devices a few calls ahead (the host
            feed), or an empty dict (the device feed draws its batches inside the step).
        """
        calls = schedule_calls(start, end, self.cfg.steps_per_call)
        if self.feed == "device":
            yield from ((call, {}) for call in calls)
            return
        put = functools.partial(put_feed, mesh=self.mesh, mode=self.cfg.parallel)
        rows = host_feed(self.batches, self.label_tables, self.images, calls)
        with contextlib.closing(data.prefetch(map(put, rows))) as batches:
            yield from zip(calls, batches, strict=True)
