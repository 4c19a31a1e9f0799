"""Exact top-k search over compact codes: geojax.search vs faiss-cpu, timed in the same run.

    python benchmarks/search.py            # issue 4 sizes: 1,000 queries × 1,000,000 codes
    python benchmarks/search.py --quick    # small sizes, seconds
    python benchmarks/search.py --rows N   # fewer database rows (memory), stated in the output
    python benchmarks/search.py --cpu-devices 2   # opt in: search.use_cpu_cores(2) before JAX starts
    python benchmarks/search.py --torus-bits --rows 200000 --queries 200   # the b-bit torus table instead
    python benchmarks/search.py --index-devices --cpu-devices 2   # IndexFlat: queries/s per devices

By default JAX runs as a user's plain process gets it: its default CPU backend (one device; XLA splits the
search's distance loops across the CPU's threads itself), no XLA flags; faiss uses all cores (OpenMP).

Rows: (1) Hamming top-10 on 256-bit packed codes vs faiss IndexBinaryFlat (distances must be identical);
(2) uint8 wraparound L1 top-10 on 64-byte codes vs faiss IndexScalarQuantizer(QT_8bit) L2 on the same bytes;
(3) PQ(8 sub-spaces, 8 bits) asymmetric search vs faiss IndexPQ with the same codebooks and codes, recall@10
against exact float search for both, plus the recall of geojax's own pq_fit. Ratio = faiss time / geojax
time (> 1 means geojax is faster). After one warm-up call each, geojax and faiss are timed in alternating
rounds (--repeat of them), so that load from other processes falls on both alike; the table gives medians of
wall-clock and of process CPU seconds (the --torus-bits table: best of --repeat runs).

A second table puts each geojax time beside the physical floor of its scan on this CPU: the bytes it reads
(the database once per query block, plus the one layout copy per call) over the memory bandwidth measured
here (an XLA reduction over 256 MiB), and its uint32 lane operations (per query-row pair, counted from the
kernel: e.g. XOR, popcount and add per 32-bit word for Hamming, one group minimum per row) over the lane
operations per second XLA reaches here on independent element-wise integer work held in cache (all
threads). The larger of the two is the floor; "of floor" is floor / geojax time (1 would be at the limit).

With --index-devices, ``geojax.search.IndexFlat`` (the codes sharded over 1, 2, 4 … of the devices, the exact
merged top-k) is timed for each search kind: queries/s against the number of devices. On a CPU host give
the devices with --cpu-devices; on a GPU host the GPUs are the devices.

With --torus-bits, a table instead times the packed b-bit torus scan (``search.torus_topk(bits=b)``,
b = 8, 4, 2, 1 on 64 angles: 64·b/8 bytes per code) against the 8-bit scan, against faiss
IndexBinaryFlat on the same number of bytes, and against the C99 header ``train/csearch/geojax_torus.h``
(one thread, built with the system C compiler through ctypes), with the results checked equal.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from geojax import quantize, search  # noqa: E402
from train.csearch import clib  # noqa: E402
from train.tables import markdown_table  # noqa: E402
from train.timing import Timing, measure  # noqa: E402

# bits set in each byte value, for the numpy Hamming reference
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(1).astype(np.uint8)


class Work(NamedTuple):
    """What one geojax search call does: uint32 lane operations per query-row pair, bytes per database row
    as scanned, queries per block (the scan reads the database once per block)."""

    lane_ops: int
    row_bytes: int
    query_block: int


# search, faiss peer, geojax, faiss (None: absent), check, the work of geojax's call
Row = tuple[str, str, Timing, Timing | None, str, Work]


def interleaved(fns: dict, *, repeat: int) -> dict[str, Timing]:
    """Time each of ``fns`` (name → (function, args)) once per round, in turn, for ``repeat`` rounds after
    one warm-up call each; returns name → Timing of all rounds."""
    for fn, args in fns.values():
        jax.block_until_ready(fn(*args))
    rounds: dict[str, list[Timing]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, (fn, args) in fns.items():
            rounds[name].append(measure(fn, *args, repeats=1, warmup=0))
    return {
        name: Timing(
            seconds=tuple(t.seconds[0] for t in ts),
            cpu_seconds=tuple(t.cpu_seconds[0] for t in ts),
            result=ts[-1].result,
        )
        for name, ts in rounds.items()
    }


def load_faiss():
    """The faiss module, or None when it is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(f[:k]) & set(t)) / k for f, t in zip(found, truth, strict=True)]))


def clustered(rng, n: int, d: int, centres: np.ndarray) -> np.ndarray:
    labels = rng.integers(0, len(centres), n)
    return (centres[labels] + 0.3 * rng.standard_normal((n, d))).astype(np.float32)


def scan(queries: np.ndarray, db: np.ndarray, distance) -> np.ndarray:
    """[queries, rows] distances by a plain numpy scan, one query at a time (the reference for the checks)."""
    return np.stack([distance(q, db) for q in queries])


def hamming(q: np.ndarray, db: np.ndarray) -> np.ndarray:
    return _POPCOUNT[q ^ db].sum(-1, dtype=np.int32)


def wrap_l1(q: np.ndarray, db: np.ndarray) -> np.ndarray:
    diff = (db.astype(np.int32) - q.astype(np.int32)) % 256
    return np.minimum(diff, 256 - diff).sum(-1)


def adc_distance(codebooks: np.ndarray, q: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Asymmetric distances of one query to PQ codes (Jégou et al. 2011 eq. 13), float64 tables."""
    m, _, ds = codebooks.shape
    tables = ((q.reshape(m, 1, ds).astype(np.float64) - codebooks) ** 2).sum(-1)  # [m, K]
    return sum(tables[j, codes[:, j]] for j in range(m))


def exact_l2_topk(queries: np.ndarray, db: np.ndarray, k: int, block: int = 64) -> np.ndarray:
    """Indices of the k nearest rows of db by squared L2 distance, exact float search in query blocks."""
    norms = np.einsum("ij,ij->i", db, db)
    out = []
    for start in range(0, len(queries), block):
        d2 = norms[None] - 2 * queries[start : start + block] @ db.T
        part = np.argpartition(d2, k - 1, axis=1)[:, :k]
        order = np.argsort(np.take_along_axis(d2, part, axis=1), axis=1, kind="stable")
        out.append(np.take_along_axis(part, order, axis=1))
    return np.concatenate(out)


def hamming_row(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> Row:
    """(1) Hamming top-k on 256-bit packed codes vs faiss IndexBinaryFlat."""
    qb = rng.integers(0, 256, (nq, 32), dtype=np.uint8)
    dbb = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    fns = {"ours": (partial(search.hamming_topk, **tune), (jax.device_put(qb), jax.device_put(dbb), k))}
    if faiss is not None:
        index = faiss.IndexBinaryFlat(256)
        index.add(dbb)
        fns["peer"] = (index.search, (qb, k))
    times = interleaved(fns, repeat=repeat)
    ours, peer = times["ours"], times.get("peer")
    gd, gi = (np.asarray(a) for a in ours.result)
    if peer is None:
        sub = slice(0, min(nq, 20))
        ref = np.sort(scan(qb[sub], dbb, hamming), axis=1)[:, :k]
        note = f"distances equal numpy scan on {ref.shape[0]} queries: {bool((gd[sub] == ref).all())}"
    else:
        fd, fi = peer.result
        note = f"distances identical: {bool((gd == fd).all())}; indices equal: {float((gi == fi).mean()):.4f}"
    work = Work(8 * 3 + 1, 32, tune.get("query_block", 1024))  # per word XOR, popcount, add; a group min
    return "Hamming 256-bit top-k", "IndexBinaryFlat", ours, peer, note, work


def wrap_l1_row(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> Row:
    """(2) uint8 wraparound L1 top-k on 64-byte codes vs faiss SQ8 L2 on the same bytes."""
    q8 = rng.integers(0, 256, (nq, 64), dtype=np.uint8)
    db8 = rng.integers(0, 256, (n, 64), dtype=np.uint8)
    fns = {"ours": (partial(search.torus_topk, **tune), (jax.device_put(q8), jax.device_put(db8), k))}
    if faiss is not None:
        sq = faiss.IndexScalarQuantizer(64, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_L2)
        dbf = db8.astype(np.float32)
        sq.train(dbf[: min(n, 100_000)])
        sq.add(dbf)
        del dbf
        fns["peer"] = (sq.search, (q8.astype(np.float32), k))
    times = interleaved(fns, repeat=repeat)
    ours, peer = times["ours"], times.get("peer")
    sub = slice(0, min(nq, 20))
    ref_i = np.argsort(scan(q8[sub], db8, wrap_l1), axis=1, kind="stable")[:, :k]
    exact = bool((np.asarray(ours.result[1])[sub] == ref_i).all())
    note = f"equals numpy scan on {ref_i.shape[0]} queries: {exact}"
    # per word: 10 SWAR operations for the lane distances (the query's own terms hoisted, an AND of an XOR as
    # x86's one three-input logic operation), 4 to add byte pairs, 1 to accumulate; per row 3 to add the
    # 16-bit halves and 1 group minimum
    work = Work(16 * 15 + 4, 64, tune.get("query_block", 256))
    return "uint8 wrap-L1 64-byte top-k", "IndexScalarQuantizer(QT_8bit) L2", ours, peer, note, work


def pq_row(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> Row:
    """(3) PQ(8, 8) asymmetric search on clustered 64-d floats vs faiss IndexPQ (same codebooks and codes),
    recall@k against exact float search."""
    d, m, nbits = 64, 8, 8
    centres = 2.0 * rng.standard_normal((100, d)).astype(np.float32) / np.sqrt(d) * 4
    xb = clustered(rng, n, d, centres)
    xq = clustered(rng, nq, d, centres)
    n_train = min(n, 65_536)
    truth = exact_l2_topk(xq, xb, k)
    own = quantize.pq_fit(xb[:n_train], m=m, nbits=nbits, key=jax.random.key(0))
    own_codes = quantize.pq_encode(own, xb)
    qj = jax.device_put(xq)
    topk = partial(search.pq_topk, **tune)
    if faiss is None:
        ours = interleaved({"ours": (topk, (qj, own, own_codes, k))}, repeat=repeat)["ours"]
        r_o = recall_at(np.asarray(ours.result[1]), truth)
        note = f"recall@{k}: geojax with its own pq_fit codebooks and codes {r_o:.4f}"
        return "PQ(m=8, nbits=8) ADC top-k", "IndexPQ (same codebooks+codes)", ours, None, note, pq_work(tune)
    ipq = faiss.IndexPQ(d, m, nbits)
    ipq.train(xb[:n_train])
    ipq.add(xb)
    cb = faiss.vector_to_array(ipq.pq.centroids).reshape(m, 1 << nbits, d // m)
    codes = faiss.vector_to_array(ipq.codes).reshape(n, m)
    pq = quantize.PQ(codebooks=jax.device_put(cb), objective=jax.numpy.zeros((m, 0)))
    times = interleaved(
        {"ours": (topk, (qj, pq, jax.device_put(codes), k)), "peer": (ipq.search, (xq, k))}, repeat=repeat
    )
    ours, peer = times["ours"], times["peer"]
    fi = peer.result[1]
    gi = np.asarray(ours.result[1])
    sub = slice(0, min(nq, 20))
    adc = scan(xq[sub], codes, partial(adc_distance, cb))
    same = bool((np.argsort(adc, axis=1, kind="stable")[:, :k] == gi[sub]).all())
    r_f, r_g = recall_at(fi, truth), recall_at(gi, truth)
    r_o = recall_at(np.asarray(topk(qj, own, own_codes, k)[1]), truth)
    note = (
        f"top-k = numpy ADC scan on {adc.shape[0]} queries: {same}; "
        f"recall@{k}: geojax {r_g:.4f}, faiss {r_f:.4f} (Δ {r_g - r_f:+.4f}); "
        f"indices equal {float((gi == fi).mean()):.4f}; own pq_fit recall {r_o:.4f}"
    )
    return "PQ(m=8, nbits=8) ADC top-k", "IndexPQ (same codebooks+codes)", ours, peer, note, pq_work(tune)


def pq_work(tune: dict) -> Work:
    """8 table look-ups and 8 adds per pair, a group minimum; 8 code bytes per row."""
    return Work(8 + 8 + 1, 8, tune.get("query_block", 32))


def memory_bandwidth(mib: int = 256) -> float:
    """Bytes per second XLA reads here: the best of 5 jitted maxima over ``mib`` MiB of uint32 (far above
    the caches)."""
    x = jnp.arange(mib << 18, dtype=jnp.uint32)
    reduce = jax.jit(jnp.max)
    return x.nbytes / measure(reduce, x, repeats=5).best


def lane_ops_per_second(n: int = 1 << 18, terms: int = 32, loops: int = 64) -> float:
    """uint32 lane operations per second XLA reaches here on independent element-wise work held in cache:
    ``loops`` rounds of x ← Σ_i (x + c_i) >> s_i over ``terms`` terms (an add and a shift each, summed as a
    tree: 3·terms − 1 operations, few of them waiting on each other), ``n`` lanes; best of 5."""

    def body(_, x):
        parts = [(x + jnp.uint32(0x9E3779B9 * (i + 1) % (1 << 32))) >> (1 + i % 7) for i in range(terms)]
        while len(parts) > 1:
            parts = [a + b for a, b in zip(parts[::2], parts[1::2], strict=True)]
        return parts[0]

    run = jax.jit(lambda x: lax.fori_loop(0, loops, body, x))
    seconds = measure(run, jnp.arange(n, dtype=jnp.uint32), repeats=5).best
    return (3 * terms - 1) * loops * n / seconds


def floors(work: Work, *, nq: int, n: int, bandwidth: float, ops: float) -> tuple[float, float]:
    """(memory floor s, lane-operation floor s) of one geojax call on this CPU."""
    passes = -(-nq // min(work.query_block, nq)) + 3  # a read per query block; the layout copy
    return n * work.row_bytes * passes / bandwidth, nq * n * work.lane_ops / ops


def index_devices_table(rng, *, nq: int, n: int, k: int, repeat: int) -> list[list]:
    """geojax.search.IndexFlat over the first 1, 2, 4 … devices (and all): seconds and queries/s per codec,
    the results checked equal to the one-device index's. The query vectors encode exactly to random codes
    (angles code/256; ±1 per bit)."""
    counts = sorted({min(1 << i, jax.device_count()) for i in range(jax.device_count().bit_length())})
    bits = rng.integers(0, 2, (nq, 256)).astype(np.float32)
    data = {
        "hamming": (
            search.BinaryCodec(256),
            2 * bits - 1,
            rng.integers(0, 256, (n, 32), dtype=np.uint8),
        ),
        "torus": (
            search.TorusCodec(64),
            rng.integers(0, 256, (nq, 64)).astype(np.float32) / 256,
            rng.integers(0, 256, (n, 64), dtype=np.uint8),
        ),
    }
    books = rng.standard_normal((8, 256, 8)).astype(np.float32)
    pq = search.PQCodec(64, m=8)
    pq.pq = quantize.PQ(codebooks=jnp.asarray(books), objective=jnp.zeros((8, 0)))
    data["pq"] = (
        pq,
        rng.standard_normal((nq, 64)).astype(np.float32),
        rng.integers(0, 256, (n, 8), dtype=np.uint8),
    )
    cells = []
    for kind, (codec, q, codes) in data.items():
        base = first = None
        for count in counts:
            mesh = jax.sharding.Mesh(np.array(jax.devices()[:count]), ("db",))
            idx = search.IndexFlat(codec, mesh=mesh)
            idx.add_codes(codes)
            timing = measure(idx.search, q, k, repeats=repeat)
            first = timing.result if first is None else first
            base = timing.best if base is None else base
            same = all(np.array_equal(a, b) for a, b in zip(timing.result, first, strict=True))
            cells.append(
                [
                    kind,
                    count,
                    f"{timing.best:.3f}",
                    f"{nq / timing.best:,.0f}",
                    f"{base / timing.best:.2f}×",
                    same,
                ]
            )
            del idx
    return cells


def torus_bits_table(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> list[list]:
    """Packed b-bit torus top-k on 64 angles: geojax, faiss IndexBinaryFlat on the same bytes, and C."""
    import tempfile

    angles = 64
    t_q = rng.uniform(0, 1, (nq, angles)).astype(np.float32)
    t_db = rng.uniform(0, 1, (n, angles)).astype(np.float32)
    lib = None
    if clib.compiler() is not None:
        lib = clib.Library(tempfile.mkdtemp(prefix="gjt-bench-"), extra_flags=("-march=native",))
    cells, base = [], None
    for bits in (8, 4, 2, 1):
        q, db = np.asarray(quantize.torus_codes(t_q, bits)), np.asarray(quantize.torus_codes(t_db, bits))
        nbytes = q.shape[1]
        ours = measure(
            partial(search.torus_topk, bits=bits, **tune),
            jax.device_put(q),
            jax.device_put(db),
            k,
            repeats=repeat,
        )
        gd, gi = (np.asarray(a) for a in ours.result)
        base = ours.best if bits == 8 else base
        peer = c_time = None
        checks = []
        if faiss is not None:
            index = faiss.IndexBinaryFlat(8 * nbytes)
            index.add(db)
            peer = measure(index.search, q, k, repeats=repeat)
        if lib is not None:
            sub = min(nq, 50)  # the C scan is single-threaded: time it on fewer queries, report per query
            c = measure(partial(lib.topk, bits=bits), q[:sub], db, k, repeats=1)
            c_time = c.best / sub * nq
            checks.append(
                f"C = geojax: {bool((c.result[1] == gi[:sub]).all() and (c.result[0] == gd[:sub]).all())}"
            )
        cells.append(
            [
                f"{bits}-bit × {angles}",
                nbytes,
                f"{ours.best:.3f}",
                f"{nq / ours.best:,.0f}",
                f"{ours.best / (n * nq * nbytes * 8) * 1e12:.2f}",
                f"{base / ours.best:.2f}×",
                None if peer is None else f"{peer.best:.3f}",
                None if peer is None else f"{peer.best / ours.best:.2f}×",
                None if c_time is None else f"{nq / c_time:,.0f}",
                "; ".join(checks),
            ]
        )
    return cells


ROWS = {"hamming": hamming_row, "wrap-l1": wrap_l1_row, "pq": pq_row}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    ap.add_argument("--rows", type=int, default=None, help="database rows (default 1,000,000; quick 50,000)")
    ap.add_argument("--queries", type=int, default=None, help="queries (default 1,000; quick 200)")
    ap.add_argument("--repeat", type=int, default=5, help="alternating timing rounds")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=None, help="rows per sub-chunk (default: each search's own)")
    ap.add_argument(
        "--query-block", type=int, default=None, help="queries per block (default: each search's own)"
    )
    ap.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        help="opt in to search.use_cpu_cores(N) (N JAX CPU devices, queries split across them); "
        "default: JAX's own (one CPU device)",
    )
    ap.add_argument(
        "--searches",
        default=",".join(ROWS),
        help=f"comma-separated subset of {', '.join(ROWS)} (default: all)",
    )
    ap.add_argument("--torus-bits", action="store_true", help="the packed b-bit torus table instead")
    ap.add_argument(
        "--index-devices",
        action="store_true",
        help="geojax.search.IndexFlat queries/s against the device count",
    )
    args = ap.parse_args()
    if args.cpu_devices is not None:
        search.use_cpu_cores(args.cpu_devices)

    faiss = load_faiss()
    full_rows = 1_000_000
    n = args.rows or (50_000 if args.quick else full_rows)
    nq = args.queries or (200 if args.quick else 1_000)
    dev = jax.devices()[0]
    peer_line = (
        "faiss not installed: timing geojax only"
        if faiss is None
        else f"faiss {faiss.__version__} on CPU with {faiss.omp_get_max_threads()} threads"
    )
    path = (
        "default path: one JAX CPU device, as a plain process gets it"
        if args.cpu_devices is None
        else f"opt-in path: search.use_cpu_cores({args.cpu_devices})"
    )
    print(
        f"device: jax {jax.__version__} on {dev.platform} ({dev.device_kind}), "
        f"{jax.device_count()} device(s) ({path}; XLA_FLAGS={os.environ.get('XLA_FLAGS') or 'unset'}); "
        f"{peer_line}; {os.cpu_count()} CPUs"
    )
    if n != full_rows and not args.quick:
        print(f"NOTE: database reduced to {n:,} rows (issue size {full_rows:,})")
    print(
        f"queries {nq:,}, database rows {n:,}, top-{args.k}, medians of {args.repeat} alternating rounds, "
        f"chunk {args.chunk or 'default'}, query block {args.query_block or 'default'}"
    )
    tune = {
        name: value
        for name, value in (("chunk", args.chunk), ("query_block", args.query_block))
        if value is not None
    }
    rng = np.random.default_rng(0)
    sizes = {"nq": nq, "n": n, "k": args.k, "tune": tune, "repeat": args.repeat}
    if args.torus_bits:
        print_bits_table(rng, faiss, sizes)
        return
    if args.index_devices:
        header = ["codes", "devices", "seconds", "queries/s", "speed-up", "= 1 device"]
        cells = index_devices_table(rng, nq=nq, n=n, k=args.k, repeat=args.repeat)
        print()
        print(markdown_table(header, cells, align="lrrrrl"))
        return
    rows = [ROWS[name](rng, faiss, **sizes) for name in args.searches.split(",")]

    bandwidth, ops = memory_bandwidth(), lane_ops_per_second()
    cells = []
    for name, peer_name, ours, peer, note, work in rows:
        memory, lanes = floors(work, nq=nq, n=n, bandwidth=bandwidth, ops=ops)
        cells.append(
            [
                name,
                peer_name,
                f"{ours.median:.3f}",
                None if peer is None else f"{peer.median:.3f}",
                None if peer is None else f"**{peer.median / ours.median:.2f}×**",
                f"{ours.cpu_median:.2f}",
                None if peer is None else f"{peer.cpu_median:.2f}",
                f"{memory:.3f}",
                f"{work.lane_ops} → {lanes:.3f}",
                f"{max(memory, lanes) / ours.median:.2f}",
                note,
            ]
        )
    header = [
        "search",
        "faiss peer",
        "geojax s",
        "faiss s",
        "ratio (faiss/geojax)",
        "geojax CPU-s",
        "faiss CPU-s",
        "memory floor s",
        "lane ops/pair → floor s",
        "of floor",
        "check",
    ]
    print(
        f"floors on this CPU: memory read {bandwidth / 1e9:.1f} GB/s, "
        f"XLA uint32 lane operations {ops / 1e9:.1f} G/s (all threads)"
    )
    print()
    print(markdown_table(header, cells, align="llrrrrrrrrl"))


def print_bits_table(rng, faiss, sizes: dict) -> None:
    header = [
        "code",
        "bytes",
        "geojax s",
        "geojax q/s",
        "ps per code bit",
        "speed vs 8-bit",
        "faiss binary s",
        "ratio (faiss/geojax)",
        "C q/s (1 thread)",
        "check",
    ]
    print()
    print(markdown_table(header, torus_bits_table(rng, faiss, **sizes), align="lrrrrrrrrl"))


if __name__ == "__main__":
    main()
