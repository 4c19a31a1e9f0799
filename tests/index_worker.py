"""One process of tests/test_search_sharded.py: joins a 2-process JAX runtime (gloo CPU collectives), adds
its own file of codes to one geojax.search.IndexFlat over both processes' devices, searches, writes its
part, reads it back and searches again; process 0 writes the results.

    python tests/index_worker.py WORKDIR COORDINATOR PROCESS_ID
"""

import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from geojax.search import IndexFlat, TorusCodec, read_index, write_index  # noqa: E402


def main(workdir: str, coordinator: str, process_id: int) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, 2, process_id)
    codes = np.load(os.path.join(workdir, f"codes{process_id}.npy"))
    queries = np.load(os.path.join(workdir, "queries.npy")).astype(np.float32) / 256  # angles of the codes
    k = int(np.load(os.path.join(workdir, "k.npy")))
    idx = IndexFlat(TorusCodec(codes.shape[1]))
    half = len(codes) // 2
    idx.add_codes(codes[:half])  # two adds per process: ids follow process order within each add
    idx.add_codes(codes[half:])
    first = idx.search(queries, k)
    part = os.path.join(workdir, f"index{process_id}.gjx")
    write_index(idx, part)
    loaded = read_index(part)
    again = loaded.search(queries, k)
    if process_id == 0:
        np.savez(
            os.path.join(workdir, "result.npz"),
            d=np.asarray(first[0]),
            i=np.asarray(first[1]),
            d2=np.asarray(again[0]),
            i2=np.asarray(again[1]),
            sizes=idx.shard_sizes,
            ntotal=idx.ntotal,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
