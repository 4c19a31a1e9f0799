"""Two local processes × 2 CPU devices (jax.distributed, gloo collectives) form one geojax.search.IndexFlat,
and one IndexIVF, each adding its own file of codes or vectors: the results equal one process holding every
row, before and after each process writes and reads back its part. And the benchmark's
queries/s-against-devices table runs."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from subprocess_env import child_env
from test_multiprocess import _free_port
from test_search_kernels import naive_topk, torus_numpy

from geojax import search
from geojax.search import IndexFlat, IndexIVF, TorusCodec

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 300


def _run_two(workdir: str, worker: str = "index_worker.py") -> None:
    """tests/``worker`` as processes 0 and 1 of one runtime; fails with a process's log otherwise."""
    port = _free_port()
    env = child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2")
    logs = [open(os.path.join(workdir, f"process{i}.log"), "w+") for i in (0, 1)]
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, worker), workdir, f"127.0.0.1:{port}", str(i)],
            env=env,
            stdout=logs[i],
            stderr=logs[i],
            start_new_session=True,
        )
        for i in (0, 1)
    ]
    deadline = time.time() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            if any(p.returncode not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    for i, (p, log) in enumerate(zip(procs, logs, strict=True)):
        log.seek(0)
        text = log.read()
        log.close()
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{text[-3000:]}"


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    rng = np.random.default_rng(0)
    db = rng.integers(0, 256, (1013, 12), dtype=np.uint8)
    db[[5, 400, 700, 1012]] = db[900]  # copies in both processes' parts and several shards
    queries = rng.integers(0, 256, (9, 12), dtype=np.uint8)
    queries[0] = db[900]
    k = 300  # more than a shard holds
    np.save(tmp_path / "codes0.npy", db[:700])  # uneven parts
    np.save(tmp_path / "codes1.npy", db[700:])
    np.save(tmp_path / "queries.npy", queries)
    np.save(tmp_path / "k.npy", k)
    _run_two(str(tmp_path))
    got = np.load(tmp_path / "result.npz")
    # ids: each add's rows in process order (process 0's half, process 1's half, then the second halves)
    order = np.concatenate(
        [np.arange(0, 350), np.arange(700, 856), np.arange(350, 700), np.arange(856, 1013)]
    )
    held = db[order]
    ref_d, ref_i = naive_topk(torus_numpy(queries, held), k)
    one = IndexFlat(TorusCodec(12))
    one.add_codes(held)
    one_d, one_i = one.search(queries.astype(np.float32) / 256, k)
    assert int(got["ntotal"]) == 1013 and got["sizes"].sum() == 1013
    for d, i in ((got["d"], got["i"]), (got["d2"], got["i2"]), (one_d, one_i)):
        np.testing.assert_array_equal(d, ref_d)
        np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_array_equal(np.asarray(search.torus_topk(queries, held, k)[1]), ref_i)


@pytest.mark.slow
def test_two_processes_ivf_equal_one(tmp_path):
    rng = np.random.default_rng(1)
    centres = rng.random((12, 6), dtype=np.float32)
    rows = (centres[rng.integers(0, 12, 900)] + 0.05 * rng.standard_normal((900, 6), np.float32)) % 1.0
    rows[[3, 500, 610]] = rows[450]  # copies in both processes' parts: ties broken by id across processes
    queries = np.concatenate([rows[450:451], rng.random((7, 6), dtype=np.float32)])
    train, gone, k, nlist = rows[::3].copy(), np.array([3, 451, 899, 5000]), 40, 8
    parts = (rows[:500], rows[500:])  # uneven parts
    for name, a in {
        "train": train,
        "part0": parts[0],
        "part1": parts[1],
        "queries": queries,
        "gone": gone,
        "k": k,
        "nlist": nlist,
    }.items():
        np.save(tmp_path / f"{name}.npy", a)
    _run_two(str(tmp_path), "ivf_worker.py")
    got = np.load(tmp_path / "result.npz")
    assert "x must be the same on every process" in str(got["refused"]) and bool(got["untrained"])
    # One process (4 devices) holding every row in process order: each add's rows, process 0's then 1's.
    held = np.concatenate([parts[0][:250], parts[1][:200], parts[0][250:], parts[1][200:]])
    one = IndexIVF(TorusCodec(6), nlist, nprobe=2, iters=5)
    one.train(train)
    one.add(held)
    d, i = one.search(queries, k)
    np.testing.assert_array_equal(got["probed_d"], d)
    np.testing.assert_array_equal(got["probed_i"], i)
    assert np.all(got["probed_i"] >= 0)
    codes = np.asarray(one.codec.encode(held))
    ref_d, ref_i = naive_topk(torus_numpy(np.asarray(one.codec.encode(queries)), codes), k)
    np.testing.assert_array_equal(got["full_d"], ref_d)  # full probe: the exact search over every row
    np.testing.assert_array_equal(got["full_i"], ref_i)
    one.nprobe = nlist
    assert int(got["removed"]) == one.remove_ids(gone) == 3 and int(got["ntotal"]) == one.ntotal == 897
    d, i = one.search(queries, k)
    for stage in ("after", "again"):
        np.testing.assert_array_equal(got[f"{stage}_d"], d)
        np.testing.assert_array_equal(got[f"{stage}_i"], i)
    assert not np.isin(got["after_i"], gone).any()
