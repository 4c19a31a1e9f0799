"""Two local processes × 2 CPU devices (jax.distributed, gloo collectives) form one geojax.search.IndexFlat,
each adding its own file of codes: the results equal one process holding every row, before and after each
process writes and reads back its part. And the benchmark's queries/s-against-devices table runs."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from test_benchmarks import _run_script, _tables
from test_multiprocess import _free_port
from test_search_kernels import naive_topk, torus_numpy

from geojax import search
from geojax.search import IndexFlat, TorusCodec

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "index_worker.py")
TIMEOUT_S = 300


def _run_two(workdir: str) -> None:
    """tests/index_worker.py as processes 0 and 1 of one runtime; fails with a process's log otherwise."""
    port = _free_port()
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "2"}
    logs = [open(os.path.join(workdir, f"process{i}.log"), "w+") for i in (0, 1)]
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, workdir, f"127.0.0.1:{port}", str(i)],
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
def test_index_devices_benchmark_quick():
    out = _run_script(
        "search.py",
        "--quick",
        "--index-devices",
        "--cpu-devices",
        "2",
        "--rows",
        "3000",
        "--queries",
        "20",
        "--repeat",
        "1",
    )
    (rows,) = _tables(out)
    assert [(r["codes"], r["devices"]) for r in rows] == [
        (c, d) for c in ("hamming", "torus", "pq") for d in "12"
    ]
    assert all(r["= 1 device"] == "True" and float(r["seconds"]) > 0 for r in rows)
