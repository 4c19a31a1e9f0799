"""Data parallelism: a per-device step written once, pmap-style, run under ``jax.shard_map`` or ``jax.pmap``.

A per-device step ``step(state, batch) -> out`` sees the replicated ``state`` and its local slice of
``batch`` (leading axis split over the ``'data'`` mesh axis). It uses explicit collectives over
``axis_name``: :func:`gather` (all_gather, whose transpose is a reduce-scatter, so every device's keys get
the gradient from every anchor), :func:`self_index` (each local anchor's column among the gathered keys),
:func:`global_sum` of numerators and counts, and :func:`pmean` of gradients. Its outputs must be identical
on every device (reduced with :func:`global_sum` or :func:`pmean`). :func:`data_parallel` turns it into a
function of the global state and global batch.

Gradient convention (pmap's): differentiate the loss *value that is already reduced over the axis*
(losses called with ``axis_name``), then ``lax.pmean`` the gradients; this equals the single-device
gradient of the same loss on the whole batch (tested on 4 fake CPU devices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from jax.typing import ArrayLike

from geojax import _checks

AXIS = "data"
MODES = ("shard_map", "pmap")


def make_mesh(n_devices: int | None = None, *, axis_name: str = AXIS) -> jax.sharding.Mesh:
    """A 1-D device mesh ``(n_devices,)`` named ``axis_name``.

    Args:
        n_devices: the number of devices, 1 ≤ n ≤ ``jax.device_count()``; None: all devices of all processes.
        axis_name: the mesh axis name.

    Returns:
        A ``jax.sharding.Mesh`` over the first ``n_devices`` devices.

    Raises:
        ValueError: ``n_devices`` is not a positive int or exceeds the devices available.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import parallel
        >>> parallel.make_mesh(1).axis_names
        ('data',)
    """
    n = jax.device_count() if n_devices is None else n_devices
    _checks.check_k(n, "n_devices", jax.device_count(), "devices available")
    return jax.make_mesh((n,), (axis_name,), devices=jax.devices()[:n])


def gather(x: ArrayLike, axis_name: str | None = AXIS) -> jax.Array:
    """All-gather ``x: [n, ...]`` from every device along the leading axis → [n·devices, ...].

    Device k's rows land at rows ``k·n … k·n + n − 1``. Differentiable: the transpose sums every device's
    cotangent for this device's rows.

    Args:
        x: [n, ...] this device's rows.
        axis_name: the named mapped axis; None for a single device (no collective).

    Returns:
        [n·devices, ...] the rows of all devices; ``x`` itself when ``axis_name`` is None.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import parallel
        >>> print(parallel.gather(jnp.arange(3), None))
        [0 1 2]
    """
    x = jnp.asarray(x)
    return x if axis_name is None else lax.all_gather(x, axis_name, tiled=True)


def self_index(n_local: int, axis_name: str | None = AXIS) -> jax.Array:
    """Column of each local anchor's own key among the gathered keys: ``axis_index·n_local + arange``.

    Args:
        n_local: the number of rows on this device.
        axis_name: the named mapped axis; None for a single device (no collective).

    Returns:
        [n_local] int32 columns.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import parallel
        >>> print(parallel.self_index(3, None))
        [0 1 2]
    """
    offset = 0 if axis_name is None else lax.axis_index(axis_name) * n_local
    return offset + jnp.arange(n_local, dtype=jnp.int32)


def global_sum(tree: Any, axis_name: str | None = AXIS) -> Any:
    """Every leaf summed over the devices of ``axis_name`` (``lax.psum``).

    The leaves as they are when ``axis_name`` is None (one device holds the whole batch). Pass per-device
    partial sums (numerators, counts): the result is the sum over the global batch, the same on every device.
    A Python int leaf (a row count) stays a static int: ``global_sum(x.shape[0])`` is the global number of
    rows.

    Args:
        tree: a pytree of per-device partial sums.
        axis_name: the named mapped axis; None for a single device (no collective).

    Returns:
        The pytree of global sums.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import parallel
        >>> parallel.global_sum({"rows": 3}, None)
        {'rows': 3}
    """
    return tree if axis_name is None else lax.psum(tree, axis_name)


def pmean(tree: Any, axis_name: str | None = AXIS) -> Any:
    """``lax.pmean`` over ``axis_name`` of every leaf (identity when ``axis_name`` is None).

    Args:
        tree: a pytree (typically gradients).
        axis_name: the named mapped axis; None for a single device (no collective).

    Returns:
        The pytree of means over the devices.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import parallel
        >>> parallel.pmean(2.0, None)
        2.0
    """
    return tree if axis_name is None else lax.pmean(tree, axis_name)


def _check_batch(batch: Any, n: int, axis: int) -> None:
    for leaf in jax.tree.leaves(batch):
        if np.ndim(leaf) <= axis or np.shape(leaf)[axis] % n:
            raise ValueError(
                f"batch leaves need an axis {axis} divisible by the {n} devices, got shape {np.shape(leaf)}"
            )


class Runner:
    """A per-device step run over the devices of a mesh, as :func:`data_parallel` returns it.

    Call it as ``run(state, batch)`` (or ``run(state, shared, batch)``); under shard_map ``run.lower(...)``
    lowers the jitted program of the placed arguments, as ``jax.jit``'s ``lower`` does (cost analysis, HLO).

    Args:
        call: what a call runs: it places the arguments and runs the mapped step.
        lower: the jitted program's ``lower``; None where there is none to give (pmap).
    """

    def __init__(self, call: Callable[..., Any], lower: Callable[..., Any] | None = None) -> None:
        self._call = call
        self._lower = lower

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)

    def lower(self, *args: Any) -> Any:
        """Lower the jitted program for ``args``, the arguments of a call (placed as a call places them).

        Args:
            *args: ``(state, batch)`` or ``(state, shared, batch)``, each as placed on the mesh.

        Returns:
            ``jax.stages.Lowered``, as ``jax.jit(f).lower(*args)``.

        Raises:
            ValueError: the runner has no jitted program to lower (``mode='pmap'``).
        """
        if self._lower is None:
            raise ValueError("lower() needs mode='shard_map' (a pmap runner has no jitted program)")
        return self._lower(*args)


def data_parallel(
    step: Callable[..., Any],
    *,
    mode: str = "shard_map",
    mesh: jax.sharding.Mesh | None = None,
    axis_name: str = AXIS,
    donate_state: bool = False,
    batch_axis: int = 0,
    shared: bool = False,
) -> Runner:
    """Run a per-device, pmap-style ``step(state, local_batch) -> out`` over a 1-D data mesh.

    The returned ``run(state, batch) -> out`` takes the global ``state`` (replicated) and global ``batch``
    (leaves split over the devices along ``batch_axis``, whose length must be divisible by the device count;
    in a multi-process run, each process passes its own rows, or the global arrays already placed with
    ``NamedSharding(mesh, P(None, …, axis_name))``). ``out`` must be reduced over ``axis_name`` inside
    ``step`` (it is returned once, not per device). Under shard_map, ``run.lower`` lowers the jitted program
    (arguments already placed), as ``jax.jit``'s does.

    Args:
        step: the per-device step, ``step(state, local_batch)`` (``step(state, shared, local_batch)`` with
            ``shared=True``).
        mode: 'shard_map' runs under ``jax.shard_map`` over ``mesh``; 'pmap' under ``jax.pmap`` over the same
            devices.
        mesh: a 1-D mesh with axis ``axis_name``; None: all devices (:func:`make_mesh`).
        axis_name: the mesh axis the batch is split over.
        donate_state: reuse the state's buffers for the output.
        batch_axis: the axis of every batch leaf that is split over the devices.
        shared: ``run(state, shared, batch)``, with ``shared`` (e.g. a data set held on every device)
            replicated like the state; shard_map only.

    Returns:
        ``run(state, batch)`` (or ``run(state, shared, batch)``), a compiled :class:`Runner`.

    Raises:
        ValueError: ``mode`` is unknown, ``mesh`` is not 1-D with axis ``axis_name``, ``shared`` with 'pmap',
            or (when ``run`` is called) a batch leaf whose ``batch_axis`` is not divisible by the local
            devices.

    Example:
        >>> import jax.numpy as jnp
        >>> from geojax import parallel
        >>> def step(state, batch):
        ...     return parallel.global_sum(jnp.sum(state * batch))
        >>> run = parallel.data_parallel(step, mesh=parallel.make_mesh(1))
        >>> float(run(2.0, jnp.arange(4.0)))
        12.0
    """
    _checks.check_choice(mode, "mode", MODES)
    mesh = make_mesh(axis_name=axis_name) if mesh is None else mesh
    if tuple(mesh.axis_names) != (axis_name,):
        raise ValueError(f"mesh must be 1-D with axis ({axis_name!r},), got axes {mesh.axis_names}")
    if shared and mode != "shard_map":
        raise ValueError("shared arguments need mode='shard_map'")
    local_devices = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    n_local = len(local_devices)
    split = P(*(None,) * batch_axis, axis_name)
    data_sharding = NamedSharding(mesh, split)
    donate = (0,) if donate_state else ()

    if mode == "pmap":
        mapped = jax.pmap(
            step,
            axis_name=axis_name,
            in_axes=(None, batch_axis),
            out_axes=None,
            devices=list(mesh.devices.flat),
            donate_argnums=donate,
        )

        def per_device(x):
            return x.reshape(*x.shape[:batch_axis], n_local, -1, *x.shape[batch_axis + 1 :])

        def run_pmap(state, batch):
            _check_batch(batch, n_local, batch_axis)
            return mapped(state, jax.tree.map(per_device, batch))

        return Runner(run_pmap)

    specs = (P(), P(), split) if shared else (P(), split)
    mapped = jax.jit(
        jax.shard_map(step, mesh=mesh, in_specs=specs, out_specs=P(), check_vma=False),
        donate_argnums=donate,
    )
    replicated = NamedSharding(mesh, P())

    def put(x):
        if isinstance(x, jax.Array) and x.sharding == data_sharding:  # placed by the caller
            return x
        if jax.process_count() == 1:
            return jax.device_put(x, data_sharding)
        return jax.make_array_from_process_local_data(data_sharding, np.asarray(x))

    def place(tree):
        return jax.device_put(tree, replicated) if jax.process_count() == 1 else tree

    def run(state, *args):
        batch = args[-1]
        _check_batch(batch, n_local, batch_axis)
        return mapped(place(state), *map(place, args[:-1]), jax.tree.map(put, batch))

    return Runner(run, mapped.lower)  # lower: the jitted program of placed arguments, for inspection
