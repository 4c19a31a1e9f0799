"""Where an index's rows live: a mesh axis of devices (``jax.sharding.NamedSharding``) over one or several
processes (``jax.distributed``), and the host-side helpers the indexes share to place rows and gather
results."""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

NO_ID = np.iinfo(np.int32).max  # the id of an empty slot; ids are int32 in [0, NO_ID)


def split(rows: int, parts: int) -> list[int]:
    """``rows`` in ``parts`` near-equal pieces, the larger ones first.

    Args:
        rows: the number of rows.
        parts: the number of pieces.

    Returns:
        The piece sizes, a list of ``parts`` ints summing to ``rows``.

    Example:
        >>> import numpy as np
        >>> from geojax.search import placement
        >>> placement.split(10, 4)
        [3, 3, 2, 2]
    """
    return [rows // parts + (i < rows % parts) for i in range(parts)]


def platform(mesh: jax.sharding.Mesh) -> str:
    """The platform of a mesh's devices ("cpu", "gpu", "tpu").

    What an index's searches are compiled for, whatever JAX's default backend is.

    Args:
        mesh: a mesh of devices of one platform.

    Returns:
        The platform name.

    Example:
        >>> import jax
        >>> import numpy as np
        >>> from geojax.search import placement
        >>> placement.platform(jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("db",)))
        'cpu'
    """
    return mesh.devices.flat[0].platform


def process_counts(values: list[int]) -> np.ndarray:
    """Every process's ``values``, one row per process, in process order.

    Args:
        values: this process's integers.

    Returns:
        [processes, len(values)] int64 NumPy array.

    Example:
        >>> import numpy as np
        >>> from geojax.search import placement
        >>> placement.process_counts([5, 7])  # one process
        array([[5, 7]])
    """
    local = np.asarray(values, np.int64)
    if jax.process_count() == 1:
        return local[None]
    return np.asarray(multihost_utils.process_allgather(local)).reshape(jax.process_count(), len(values))


def host(x: jax.Array) -> np.ndarray:
    """A global array as a NumPy array on every process.

    Args:
        x: a global ``jax.Array``.

    Returns:
        Its whole value as a NumPy array (gathered from every process when it is not fully addressable).
    """
    if x.is_fully_addressable:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def pad_rows(x: np.ndarray, rows: int, value=0) -> np.ndarray:
    """x [n, ...] padded with ``value`` to [rows, ...] (rows ≥ n).

    Args:
        x: [n, ...] NumPy array.
        rows: the padded length, ≥ n.
        value: the fill value.

    Returns:
        [rows, ...] NumPy array.

    Example:
        >>> import numpy as np
        >>> from geojax.search import placement
        >>> placement.pad_rows(np.array([1, 2]), 4, value=-1)
        array([ 1,  2, -1, -1])
    """
    return np.pad(x, ((0, rows - len(x)),) + ((0, 0),) * (x.ndim - 1), constant_values=value)


def default_mesh(db_axis: str) -> jax.sharding.Mesh:
    """Every device of every process on one axis named ``db_axis``.

    Args:
        db_axis: the axis name.

    Returns:
        A 1-D ``jax.sharding.Mesh``.
    """
    return jax.sharding.Mesh(np.array(jax.devices()), (db_axis,))


def check_axes(mesh: jax.sharding.Mesh, db_axis: str, query_axis: str | None) -> None:
    """Check that ``db_axis`` (and ``query_axis``, if given, another one) are axes of ``mesh``.

    Args:
        mesh: the device mesh.
        db_axis: the mesh axis the rows are sharded over.
        query_axis: a second axis for the queries, or None.

    Raises:
        ValueError: ``db_axis`` is not an axis of the mesh, or ``query_axis`` is neither None nor another of
            its axes.
    """
    names = tuple(mesh.axis_names)
    if db_axis not in names:
        raise ValueError(f"db_axis must be one of the mesh's axes {names}, got {db_axis!r}")
    if query_axis is not None and (query_axis not in names or query_axis == db_axis):
        raise ValueError(
            f"query_axis must be None or a mesh axis other than {db_axis!r} in {names}, got {query_axis!r}"
        )


def shard_owners(mesh: jax.sharding.Mesh, db_axis: str) -> tuple[dict, list[int]]:
    """Each device's shard along ``db_axis``, and each shard's process.

    Args:
        mesh: the device mesh.
        db_axis: the mesh axis the rows are sharded over.

    Returns:
        (device → its shard index, [shards] the process index owning each shard).

    Raises:
        ValueError: a shard's devices belong to several processes.
    """
    dim = mesh.axis_names.index(db_axis)
    shard_of, owners = {}, [set() for _ in range(mesh.shape[db_axis])]
    for position, device in np.ndenumerate(mesh.devices):
        shard_of[device] = position[dim]
        owners[position[dim]].add(device.process_index)
    if any(len(o) > 1 for o in owners):
        raise ValueError(f"mesh: each shard along {db_axis!r} must lie on the devices of one process")
    return shard_of, [o.pop() for o in owners]


def put_shards(mesh: jax.sharding.Mesh, db_axis: str, shard_of: dict, shard_data, shape) -> jax.Array:
    """A global array of ``shape`` sharded over ``db_axis``.

    Each local device is given ``shard_data(its shard)``.

    Args:
        mesh: the device mesh.
        db_axis: the mesh axis the rows are sharded over.
        shard_of: device → its shard along ``db_axis`` (:func:`shard_owners`).
        shard_data: shard index → that shard's NumPy rows.
        shape: the global shape.

    Returns:
        The global ``jax.Array``.
    """
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(db_axis))
    arrays = [jax.device_put(shard_data(shard_of[d]), d) for d in sharding.addressable_devices]
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, arrays)
