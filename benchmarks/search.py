"""Exact top-k search over compact codes: geojax.search vs faiss-cpu, timed in the same run.

    python benchmarks/search.py            # issue 4 sizes: 1,000 queries × 1,000,000 codes
    python benchmarks/search.py --quick    # small sizes, seconds
    python benchmarks/search.py --rows N   # fewer database rows (memory), stated in the output

Rows: (1) Hamming top-10 on 256-bit packed codes vs faiss IndexBinaryFlat (distances must be identical);
(2) uint8 wraparound L1 top-10 on 64-byte codes vs faiss IndexScalarQuantizer(QT_8bit) L2 on the same bytes;
(3) PQ(8 sub-spaces, 8 bits) asymmetric search vs faiss IndexPQ with the same codebooks and codes, recall@10
against exact float search for both, plus the recall of geojax's own pq_fit. Ratio = faiss time / geojax
time (> 1 means geojax is faster). Each time is the best of --repeat runs after one warm-up run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

# Like faiss's threads, the CPU backend gets one JAX device per core (queries are split across devices);
# this must happen before JAX starts its backends. It does nothing to a GPU run.
_CPU_DEVICES = int(os.environ.get("GEOJAX_BENCH_CPU_DEVICES", os.cpu_count() or 1))
jax.config.update("jax_num_cpu_devices", _CPU_DEVICES)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from geojax import quantize, search  # noqa: E402


def best_time(fn, repeat: int):
    """(best wall seconds, best process CPU seconds, output) over ``repeat`` runs after one warm-up run.

    CPU seconds (all threads of this process) make the comparison fair on a machine shared with other work;
    on a GPU they measure only the host side.
    """
    out = fn()
    jax.block_until_ready(out)
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        jax.block_until_ready(out)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus), out


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth, strict=True)]))


def clustered(rng, n: int, d: int, centres: np.ndarray) -> np.ndarray:
    labels = rng.integers(0, len(centres), n)
    return (centres[labels] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--rows", type=int, default=None, help="database rows (default 1,000,000; quick 50,000)")
    ap.add_argument("--queries", type=int, default=None, help="queries (default 1,000; quick 200)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=16384, help="database rows per scan step")
    ap.add_argument(
        "--query-block", type=int, default=None, help="queries per block (default: each search's own)"
    )
    args = ap.parse_args()

    import faiss

    full_rows = 1_000_000
    n = args.rows or (50_000 if args.quick else full_rows)
    nq = args.queries or (200 if args.quick else 1_000)
    k = args.k
    rng = np.random.default_rng(0)
    dev = jax.devices()[0]
    print(
        f"device: jax {jax.__version__} on {dev.platform} ({dev.device_kind}), "
        f"{jax.device_count()} device(s) (GEOJAX_BENCH_CPU_DEVICES={_CPU_DEVICES}); "
        f"faiss {faiss.__version__} on CPU with {faiss.omp_get_max_threads()} threads; {os.cpu_count()} CPUs"
    )
    if n != full_rows and not args.quick:
        print(f"NOTE: database reduced to {n:,} rows (issue size {full_rows:,})")
    print(
        f"queries {nq:,}, database rows {n:,}, top-{k}, best of {args.repeat}, chunk {args.chunk}, "
        f"query block {args.query_block}"
    )
    tune = {"chunk": args.chunk} | ({} if args.query_block is None else {"query_block": args.query_block})
    rows = []

    # (1) Hamming, 256 bits.
    qb = rng.integers(0, 256, (nq, 32), dtype=np.uint8)
    dbb = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    index = faiss.IndexBinaryFlat(256)
    index.add(dbb)
    t_f, c_f, (fd, fi) = best_time(lambda: index.search(qb, k), args.repeat)
    qj, dbj = jax.device_put(qb), jax.device_put(dbb)
    t_g, c_g, (gd, gi) = best_time(lambda: search.hamming_topk(qj, dbj, k, **tune), args.repeat)
    gd, gi = np.asarray(gd), np.asarray(gi)
    same_d = bool((gd == fd).all())
    agree = float((gi == fi).mean())
    rows.append(
        (
            "Hamming 256-bit top-k",
            "IndexBinaryFlat",
            t_g,
            t_f,
            c_g,
            c_f,
            f"distances identical: {same_d}; indices equal: {agree:.4f}",
        )
    )

    # (2) uint8 wraparound L1 vs SQ8 L2, 64 bytes.
    q8 = rng.integers(0, 256, (nq, 64), dtype=np.uint8)
    db8 = rng.integers(0, 256, (n, 64), dtype=np.uint8)
    sq = faiss.IndexScalarQuantizer(64, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_L2)
    dbf = db8.astype(np.float32)
    sq.train(dbf[: min(n, 100_000)])
    sq.add(dbf)
    del dbf
    q8f = q8.astype(np.float32)
    t_f, c_f, _ = best_time(lambda: sq.search(q8f, k), args.repeat)
    qj, dbj = jax.device_put(q8), jax.device_put(db8)
    t_g, c_g, (gd, gi) = best_time(lambda: search.torus_topk(qj, dbj, k, **tune), args.repeat)
    sub = slice(0, min(nq, 20))
    diff = (q8[sub, None, :].astype(np.int32) - db8[None].astype(np.int32)) % 256
    ref = np.minimum(diff, 256 - diff).sum(-1)
    ref_i = np.argsort(ref, axis=1, kind="stable")[:, :k]
    exact = bool((np.asarray(gi)[sub] == ref_i).all())
    rows.append(
        (
            "uint8 wrap-L1 64-byte top-k",
            "IndexScalarQuantizer(QT_8bit) L2",
            t_g,
            t_f,
            c_g,
            c_f,
            f"equals numpy scan on {ref_i.shape[0]} queries: {exact}",
        )
    )

    # (3) PQ(8, 8) on clustered 64-d floats.
    d, m, nbits = 64, 8, 8
    centres = 2.0 * rng.standard_normal((100, d)).astype(np.float32) / np.sqrt(d) * 4
    xb = clustered(rng, n, d, centres)
    xq = clustered(rng, nq, d, centres)
    n_train = min(n, 65_536)
    flat = faiss.IndexFlatL2(d)
    flat.add(xb)
    _, truth = flat.search(xq, k)
    ipq = faiss.IndexPQ(d, m, nbits)
    ipq.train(xb[:n_train])
    ipq.add(xb)
    t_f, c_f, (_, fi) = best_time(lambda: ipq.search(xq, k), args.repeat)
    cb = faiss.vector_to_array(ipq.pq.centroids).reshape(m, 1 << nbits, d // m)
    codes = faiss.vector_to_array(ipq.codes).reshape(n, m)
    pq = quantize.PQ(codebooks=jax.device_put(cb), objective=jax.numpy.zeros((m, 0)))
    qj, cj = jax.device_put(xq), jax.device_put(codes)
    t_g, c_g, (_, gi) = best_time(lambda: search.pq_topk(qj, pq, cj, k, **tune), args.repeat)
    gi = np.asarray(gi)
    r_f, r_g = recall_at(fi, truth), recall_at(gi, truth)
    own = quantize.pq_fit(xb[:n_train], m=m, nbits=nbits, key=jax.random.key(0))
    own_codes = quantize.pq_encode(own, xb)
    _, oi = search.pq_topk(qj, own, own_codes, k)
    r_o = recall_at(np.asarray(oi), truth)
    rows.append(
        (
            "PQ(m=8, nbits=8) ADC top-k",
            "IndexPQ (same codebooks+codes)",
            t_g,
            t_f,
            c_g,
            c_f,
            f"recall@{k}: geojax {r_g:.4f}, faiss {r_f:.4f} (Δ {r_g - r_f:+.4f}); "
            f"indices equal {float((gi == fi).mean()):.4f}; own pq_fit recall {r_o:.4f}",
        )
    )

    print()
    print("| search | faiss peer | geojax s | faiss s | ratio (faiss/geojax) | CPU-s ratio | check |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, peer, tg, tf, cg, cf, note in rows:
        print(
            f"| {name} | {peer} | {tg:.3f} | {tf:.3f} | {tf / tg:.2f}× | {cf / max(cg, 1e-9):.2f}× | {note} |"
        )


if __name__ == "__main__":
    main()
