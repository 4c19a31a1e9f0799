"""Where an index's rows live: a mesh axis of devices (``jax.sharding.NamedSharding``) over one or several
processes (``jax.distributed``), and the host-side helpers the indexes share to place rows and gather
results."""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

NO_ID = np.iinfo(np.int32).max  # the id of an empty slot; ids are int32 in [0, NO_ID)


def split(rows: int, parts: int) -> list[int]:
    """``rows`` in ``parts`` near-equal pieces, the larger ones first."""
    return [rows // parts + (i < rows % parts) for i in range(parts)]


def process_counts(values: list[int]) -> np.ndarray:
    """[processes, len(values)]: every process's ``values`` (one row per process, in process order)."""
    local = np.asarray(values, np.int64)
    if jax.process_count() == 1:
        return local[None]
    return np.asarray(multihost_utils.process_allgather(local)).reshape(jax.process_count(), len(values))


def host(x: jax.Array) -> np.ndarray:
    """A global array as a numpy array on every process."""
    if x.is_fully_addressable:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def pad_rows(x: np.ndarray, rows: int, value=0) -> np.ndarray:
    """x [n, ...] padded with ``value`` to [rows, ...] (rows ≥ n)."""
    return np.pad(x, ((0, rows - len(x)),) + ((0, 0),) * (x.ndim - 1), constant_values=value)


def default_mesh(db_axis: str) -> jax.sharding.Mesh:
    """Every device of every process on one axis named ``db_axis``."""
    return jax.sharding.Mesh(np.array(jax.devices()), (db_axis,))


def check_axes(mesh: jax.sharding.Mesh, db_axis: str, query_axis: str | None) -> None:
    """ValueError unless ``db_axis`` (and ``query_axis``, if given, another one) are axes of ``mesh``."""
    names = tuple(mesh.axis_names)
    if db_axis not in names:
        raise ValueError(f"db_axis must be one of the mesh's axes {names}, got {db_axis!r}")
    if query_axis is not None and (query_axis not in names or query_axis == db_axis):
        raise ValueError(
            f"query_axis must be None or a mesh axis other than {db_axis!r} in {names}, got {query_axis!r}"
        )


def shard_owners(mesh: jax.sharding.Mesh, db_axis: str) -> tuple[dict, list[int]]:
    """(device → its shard along ``db_axis``, each shard's process); ValueError when a shard's devices
    belong to several processes."""
    dim = mesh.axis_names.index(db_axis)
    shard_of, owners = {}, [set() for _ in range(mesh.shape[db_axis])]
    for position, device in np.ndenumerate(mesh.devices):
        shard_of[device] = position[dim]
        owners[position[dim]].add(device.process_index)
    if any(len(o) > 1 for o in owners):
        raise ValueError(f"mesh: each shard along {db_axis!r} must lie on the devices of one process")
    return shard_of, [o.pop() for o in owners]


def put_shards(mesh: jax.sharding.Mesh, db_axis: str, shard_of: dict, shard_data, shape) -> jax.Array:
    """A global array of ``shape`` sharded over ``db_axis``, each local device given ``shard_data(its
    shard)``."""
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(db_axis))
    arrays = [jax.device_put(shard_data(shard_of[d]), d) for d in sharding.addressable_devices]
    return jax.make_array_from_single_device_arrays(tuple(shape), sharding, arrays)
