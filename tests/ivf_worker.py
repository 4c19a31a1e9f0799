"""One process of tests/test_search_sharded.py's IVF test: joins a 2-process JAX runtime (gloo CPU
collectives), trains one geojax.search.IndexIVF on the shared training angles, adds its own file of angles in
two adds, searches at nprobe 2 and at full probe, removes ids, writes its part, reads it back and searches
again; process 0 writes the results. A training set that differs between the processes is refused first.

    python tests/ivf_worker.py WORKDIR COORDINATOR PROCESS_ID
"""

import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from geojax.search import IndexIVF, TorusCodec, read_index, write_index  # noqa: E402


def main(workdir: str, coordinator: str, process_id: int) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, 2, process_id)
    load = lambda name: np.load(os.path.join(workdir, f"{name}.npy"))  # noqa: E731
    train, part, queries, gone = load("train"), load(f"part{process_id}"), load("queries"), load("gone")
    k, nlist = int(load("k")), int(load("nlist"))
    idx = IndexIVF(TorusCodec(train.shape[1]), nlist, nprobe=2, iters=5)
    try:
        idx.train(train + np.float32(0.01 * process_id))  # not the same on both processes
        refused = ""
    except ValueError as err:
        refused = str(err)
    untrained = not idx.is_trained
    idx.train(train)
    half = len(part) // 2
    idx.add(part[:half])  # two adds per process: ids follow process order within each add
    idx.add(part[half:])
    probed = idx.search(queries, k)
    idx.nprobe = nlist
    full = idx.search(queries, k)
    removed = idx.remove_ids(gone)
    after = idx.search(queries, k)
    path = os.path.join(workdir, f"index{process_id}.gjx")
    write_index(idx, path)
    again = read_index(path, kind="ivf").search(queries, k)
    if process_id == 0:
        np.savez(
            os.path.join(workdir, "result.npz"),
            refused=refused,
            untrained=untrained,
            probed_d=np.asarray(probed[0]),
            probed_i=np.asarray(probed[1]),
            full_d=np.asarray(full[0]),
            full_i=np.asarray(full[1]),
            removed=removed,
            after_d=np.asarray(after[0]),
            after_i=np.asarray(after[1]),
            again_d=np.asarray(again[0]),
            again_i=np.asarray(again[1]),
            ntotal=idx.ntotal,
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
