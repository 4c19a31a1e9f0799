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
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

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


class Program:
    """A run's steps compiled over its mesh, and the feed of their batches.

    One program per number of steps a call runs (``steps_per_call``, and a shorter last call).

    Calling it with (state, length, batch) runs ``length`` steps from ``state``, donated, and returns the new
    state and the metrics averaged over those steps.

    Args:
        cfg: the run's configuration (its length resolved).
        mesh: the data-parallel mesh.
        traced: the run's step, batches, training images and label tables (:func:`train.app.step.build`).
    """

    def __init__(self, cfg: RunConfig, mesh: jax.sharding.Mesh, traced: step.Traced):
        self.cfg, self.mesh, self.images = cfg, mesh, traced.images
        self.feed = feed_kind(cfg, traced.images)
        self.per_device, self.batches = traced.per_device, traced.batches
        self.label_tables = traced.label_tables
        device = self.feed == "device"
        self.tables = step.replicate({"images": self.images, **self.label_tables}, mesh) if device else None
        self._calls: dict[int, Callable[..., tuple[step.State, dict[str, jax.Array]]]] = {}

    def __call__(self, state: step.State, length: int, batch: Any) -> tuple[step.State, dict[str, jax.Array]]:
        if length not in self._calls:
            call = step.make_call(
                self.per_device,
                length=length,
                batches=self.batches if self.feed == "device" else None,
                replicas=self.cfg.seeds > 1,
            )
            self._calls[length] = step.distribute(call, mesh=self.mesh, mode=self.cfg.parallel)
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
        put = functools.partial(step.put_feed, mesh=self.mesh, mode=self.cfg.parallel)
        rows = host_feed(self.batches, self.label_tables, self.images, calls)
        with contextlib.closing(data.prefetch(map(put, rows))) as batches:
            yield from zip(calls, batches, strict=True)
