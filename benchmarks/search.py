"""Exact top-k search over compact codes: geojax.search vs faiss-cpu, timed in the same run.

    python -m benchmarks.search            # 1,000 queries × 1,000,000 codes
    python -m benchmarks.search --quick    # small sizes, seconds (writes no result unless --out)
    python -m benchmarks.search --rows N   # fewer database rows (memory), stated in the output
    python -m benchmarks.search --cpu-devices 2   # opt in: search.use_cpu_cores(2) before JAX starts
    python -m benchmarks.search --torus-bits --rows 200000 --queries 200   # the b-bit torus table instead
    python -m benchmarks.search --index-devices --cpu-devices 2   # IndexFlat: queries/s per devices
    XLA_FLAGS=--xla_cpu_max_isa=AVX2 python -m benchmarks.search --searches hamming \
        --out benchmarks/results/search_max_isa_avx2    # an AVX-512 CPU held to AVX2: the SWAR bit count

By default JAX runs as a user's plain process gets it: its default CPU backend (one device; XLA splits the
search's distance loops across the CPU's threads itself), no XLA flags (the result records XLA_FLAGS); faiss
uses all cores (OpenMP).

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

Each run writes what it prints, unrounded, with the machine record (``train.helpers.results``) to
``benchmarks/results/``: ``search.json`` (the comparison and its floors), ``search_index_devices.json``
(--index-devices) or ``search_torus_bits.json`` (--torus-bits); ``_gpu`` is appended on a GPU host and
``_cpu_devices_N`` with --cpu-devices outside --index-devices. --out FOLDER writes there instead.
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from geojax import quantize, search
from geojax.search import _kernels
from train.csearch import clib
from train.helpers import results
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.timing import Call, Timing, interleaved, measure

# bits set in each byte value, for the numpy Hamming reference
_POPCOUNT = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(1).astype(np.uint8)


class Work(NamedTuple):
    """What one geojax search call does: uint32 lane operations per query-row pair, bytes per database row
    as scanned, queries per block (the scan reads the database once per block)."""

    lane_ops: int
    row_bytes: int
    query_block: int


class Row(NamedTuple):
    """One row of the faiss comparison: the search, its faiss peer, both timings (peer None: faiss absent),
    the check as printed, the check's figures (recalls, equality) and the work of geojax's call."""

    search: str
    peer_name: str
    ours: Timing
    peer: Timing | None
    note: str
    checks: dict[str, float | bool]
    work: Work


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


def hamming_lane_ops(popcount: bool) -> int:
    """uint32 lane operations per query-row pair of the 256-bit Hamming scan (8 words), a group min included.

    One population count per word: 8 XORs, 8 counts, 7 adds. SWAR: 8 XORs; words 3 + 3 + 2 through
    carry-save adders (5, 5, 2), two nibble counts each (7 apiece) and a shift-add; 3 nibble-to-byte folds
    (4 each) and 2 adds; 7 to fold a row's four bytes.
    """
    if popcount:
        return 8 + 8 + 7 + 1
    return 8 + (5 + 5 + 2) + 6 * 7 + 3 * 2 + 3 * 4 + 2 + 7 + 1


def hamming_row(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> Row:
    """(1) Hamming top-k on 256-bit packed codes vs faiss IndexBinaryFlat."""
    qb = rng.integers(0, 256, (nq, 32), dtype=np.uint8)
    dbb = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    fns = {"ours": Call(partial(search.hamming_topk, **tune), (jax.device_put(qb), jax.device_put(dbb), k))}
    if faiss is not None:
        index = faiss.IndexBinaryFlat(256)
        index.add(dbb)
        fns["peer"] = Call(index.search, (qb, k))
    times = interleaved(fns, rounds=repeat)
    ours, peer = times["ours"], times.get("peer")
    gd, gi = (np.asarray(a) for a in ours.result)
    if peer is None:
        sub = slice(0, min(nq, 20))
        ref = np.sort(scan(qb[sub], dbb, hamming), axis=1)[:, :k]
        checks = {"numpy_queries": ref.shape[0], "distances_equal_numpy": bool((gd[sub] == ref).all())}
        note = f"distances equal numpy scan on {ref.shape[0]} queries: {checks['distances_equal_numpy']}"
    else:
        fd, fi = peer.result
        checks = {"distances_identical": bool((gd == fd).all()), "indices_equal": float((gi == fi).mean())}
        note = (
            f"distances identical: {checks['distances_identical']}; "
            f"indices equal: {checks['indices_equal']:.4f}"
        )
    popcount = _kernels.counts_by_popcount(jax.devices()[0].platform)
    checks["bit_count"] = "population count" if popcount else "SWAR"
    note += f"; bits counted by {checks['bit_count']}"
    work = Work(hamming_lane_ops(popcount), 32, tune.get("query_block", 1024))
    return Row("Hamming 256-bit top-k", "IndexBinaryFlat", ours, peer, note, checks, work)


def wrap_l1_row(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> Row:
    """(2) uint8 wraparound L1 top-k on 64-byte codes vs faiss SQ8 L2 on the same bytes."""
    q8 = rng.integers(0, 256, (nq, 64), dtype=np.uint8)
    db8 = rng.integers(0, 256, (n, 64), dtype=np.uint8)
    fns = {"ours": Call(partial(search.torus_topk, **tune), (jax.device_put(q8), jax.device_put(db8), k))}
    if faiss is not None:
        sq = faiss.IndexScalarQuantizer(64, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_L2)
        dbf = db8.astype(np.float32)
        sq.train(dbf[: min(n, 100_000)])
        sq.add(dbf)
        del dbf
        fns["peer"] = Call(sq.search, (q8.astype(np.float32), k))
    times = interleaved(fns, rounds=repeat)
    ours, peer = times["ours"], times.get("peer")
    sub = slice(0, min(nq, 20))
    ref_i = np.argsort(scan(q8[sub], db8, wrap_l1), axis=1, kind="stable")[:, :k]
    checks = {
        "numpy_queries": ref_i.shape[0],
        "equal_numpy": bool((np.asarray(ours.result[1])[sub] == ref_i).all()),
    }
    note = f"equals numpy scan on {ref_i.shape[0]} queries: {checks['equal_numpy']}"
    # per word: 10 SWAR operations for the lane distances (the query's own terms hoisted, an AND of an XOR as
    # x86's one three-input logic operation), 4 to add byte pairs, 1 to accumulate; per row 3 to add the
    # 16-bit halves and 1 group minimum
    work = Work(16 * 15 + 4, 64, tune.get("query_block", 256))
    return Row(
        "uint8 wrap-L1 64-byte top-k", "IndexScalarQuantizer(QT_8bit) L2", ours, peer, note, checks, work
    )


PQ_NAME, PQ_PEER = "PQ(m=8, nbits=8) ADC top-k", "IndexPQ (same codebooks+codes)"


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
        ours = interleaved({"ours": Call(topk, (qj, own, own_codes, k))}, rounds=repeat)["ours"]
        checks = {"recall_own_pq_fit": recall_at(np.asarray(ours.result[1]), truth)}
        note = f"recall@{k}: geojax with its own pq_fit codebooks and codes {checks['recall_own_pq_fit']:.4f}"
        return Row(PQ_NAME, PQ_PEER, ours, None, note, checks, pq_work(tune))
    ipq = faiss.IndexPQ(d, m, nbits)
    ipq.train(xb[:n_train])
    ipq.add(xb)
    cb = faiss.vector_to_array(ipq.pq.centroids).reshape(m, 1 << nbits, d // m)
    codes = faiss.vector_to_array(ipq.codes).reshape(n, m)
    pq = quantize.PQ(codebooks=jax.device_put(cb), objective=jax.numpy.zeros((m, 0)))
    times = interleaved(
        {"ours": Call(topk, (qj, pq, jax.device_put(codes), k)), "peer": Call(ipq.search, (xq, k))},
        rounds=repeat,
    )
    ours, peer = times["ours"], times["peer"]
    fi = peer.result[1]
    gi = np.asarray(ours.result[1])
    sub = slice(0, min(nq, 20))
    adc = scan(xq[sub], codes, partial(adc_distance, cb))
    checks = {
        "numpy_queries": adc.shape[0],
        "same_topk_as_numpy": bool((np.argsort(adc, axis=1, kind="stable")[:, :k] == gi[sub]).all()),
        "recall_geojax": recall_at(gi, truth),
        "recall_faiss": recall_at(fi, truth),
        "indices_equal": float((gi == fi).mean()),
        "recall_own_pq_fit": recall_at(np.asarray(topk(qj, own, own_codes, k)[1]), truth),
    }
    note = (
        f"top-k = numpy ADC scan on {adc.shape[0]} queries: {checks['same_topk_as_numpy']}; "
        f"recall@{k}: geojax {checks['recall_geojax']:.4f}, faiss {checks['recall_faiss']:.4f} "
        f"(Δ {checks['recall_geojax'] - checks['recall_faiss']:+.4f}); "
        f"indices equal {checks['indices_equal']:.4f}; own pq_fit recall {checks['recall_own_pq_fit']:.4f}"
    )
    return Row(PQ_NAME, PQ_PEER, ours, peer, note, checks, pq_work(tune))


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


def index_devices_table(rng, *, nq: int, n: int, k: int, repeat: int) -> list[dict]:
    """geojax.search.IndexFlat over the first 1, 2, 4 … devices (and all): per codec and device count the
    best seconds of ``repeat`` searches, queries/s, the speed-up over one device and whether the results equal
    the one-device index's. The query vectors encode exactly to random codes (angles code/256; ±1 per bit)."""
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
    records = []
    for kind, (codec, q, codes) in data.items():
        base = first = None
        for count in counts:
            mesh = jax.sharding.Mesh(np.array(jax.devices()[:count]), ("db",))
            idx = search.IndexFlat(codec, mesh=mesh)
            idx.add_codes(codes)
            timing = measure(idx.search, q, k, repeats=repeat)
            first = timing.result if first is None else first
            base = timing.best if base is None else base
            records.append(
                {
                    "codes": kind,
                    "code_bytes": codes.shape[1],
                    "devices": count,
                    "seconds": timing.best,
                    "queries_per_s": nq / timing.best,
                    "speed_up": base / timing.best,
                    "equal_to_one_device": all(
                        np.array_equal(a, b) for a, b in zip(timing.result, first, strict=True)
                    ),
                }
            )
            del idx
    return records


def index_devices_cells(records: list[dict]) -> list[list]:
    """The printed rows of :func:`index_devices_table`'s records."""
    return [
        [
            r["codes"],
            r["devices"],
            f"{r['seconds']:.3f}",
            f"{r['queries_per_s']:,.0f}",
            f"{r['speed_up']:.2f}×",
            r["equal_to_one_device"],
        ]
        for r in records
    ]


def torus_bits_table(rng, faiss, *, nq: int, n: int, k: int, tune: dict, repeat: int) -> list[dict]:
    """Packed b-bit torus top-k on 64 angles, per b = 8, 4, 2, 1: geojax's best seconds, faiss
    IndexBinaryFlat's on the same bytes and the C header's queries/s (None where absent), with the checks."""
    import tempfile

    angles = 64
    t_q = rng.uniform(0, 1, (nq, angles)).astype(np.float32)
    t_db = rng.uniform(0, 1, (n, angles)).astype(np.float32)
    lib = None
    if clib.compiler() is not None:
        lib = clib.Library(tempfile.mkdtemp(prefix="gjt-bench-"), extra_flags=("-march=native",))
    records, base = [], None
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
        peer = c_qps = c_equal = None
        if faiss is not None:
            index = faiss.IndexBinaryFlat(8 * nbytes)
            index.add(db)
            peer = measure(index.search, q, k, repeats=repeat).best
        if lib is not None:
            sub = min(nq, 50)  # the C scan is single-threaded: time it on fewer queries, report per query
            c = measure(partial(lib.topk, bits=bits), q[:sub], db, k, repeats=1)
            c_qps = sub / c.best
            c_equal = bool((c.result[1] == gi[:sub]).all() and (c.result[0] == gd[:sub]).all())
        records.append(
            {
                "bits": bits,
                "angles": angles,
                "bytes": nbytes,
                "geojax_s": ours.best,
                "geojax_queries_per_s": nq / ours.best,
                "ps_per_code_bit": ours.best / (n * nq * nbytes * 8) * 1e12,
                "speed_vs_8_bit": base / ours.best,
                "faiss_binary_s": peer,
                "ratio": None if peer is None else peer / ours.best,
                "c_queries_per_s": c_qps,
                "c_equal_geojax": c_equal,
            }
        )
    return records


def torus_bits_cells(records: list[dict]) -> list[list]:
    """The printed rows of :func:`torus_bits_table`'s records."""
    return [
        [
            f"{r['bits']}-bit × {r['angles']}",
            r["bytes"],
            f"{r['geojax_s']:.3f}",
            f"{r['geojax_queries_per_s']:,.0f}",
            f"{r['ps_per_code_bit']:.2f}",
            f"{r['speed_vs_8_bit']:.2f}×",
            None if r["faiss_binary_s"] is None else f"{r['faiss_binary_s']:.3f}",
            None if r["ratio"] is None else f"{r['ratio']:.2f}×",
            None if r["c_queries_per_s"] is None else f"{r['c_queries_per_s']:,.0f}",
            "" if r["c_equal_geojax"] is None else f"C = geojax: {r['c_equal_geojax']}",
        ]
        for r in records
    ]


def search_record(row: Row, *, nq: int, n: int, bandwidth: float, ops: float) -> dict:
    """One faiss-comparison row's figures: medians of wall-clock and CPU seconds (all rounds kept), the
    ratios faiss / geojax, the check's figures and the floors of geojax's call on this CPU."""
    ours, peer = row.ours, row.peer
    memory, lanes = floors(row.work, nq=nq, n=n, bandwidth=bandwidth, ops=ops)
    return {
        "search": row.search,
        "faiss_peer": row.peer_name,
        "geojax_s": ours.median,
        "faiss_s": None if peer is None else peer.median,
        "ratio": None if peer is None else peer.median / ours.median,
        "geojax_cpu_s": ours.cpu_median,
        "faiss_cpu_s": None if peer is None else peer.cpu_median,
        "cpu_ratio": None if peer is None else peer.cpu_median / ours.cpu_median,
        "geojax_rounds_s": list(ours.seconds),
        "faiss_rounds_s": None if peer is None else list(peer.seconds),
        "check": row.note,
        "checks": row.checks,
        "lane_ops_per_pair": row.work.lane_ops,
        "row_bytes": row.work.row_bytes,
        "query_block": row.work.query_block,
        "memory_floor_s": memory,
        "lane_op_floor_s": lanes,
        "of_floor": max(memory, lanes) / ours.median,
    }


def search_cells(records: list[dict]) -> list[list]:
    """The printed rows of :func:`search_record`'s records."""
    return [
        [
            r["search"],
            r["faiss_peer"],
            f"{r['geojax_s']:.3f}",
            None if r["faiss_s"] is None else f"{r['faiss_s']:.3f}",
            None if r["ratio"] is None else f"**{r['ratio']:.2f}×**",
            f"{r['geojax_cpu_s']:.2f}",
            None if r["faiss_cpu_s"] is None else f"{r['faiss_cpu_s']:.2f}",
            f"{r['memory_floor_s']:.3f}",
            f"{r['lane_ops_per_pair']} → {r['lane_op_floor_s']:.3f}",
            f"{r['of_floor']:.2f}",
            r["check"],
        ]
        for r in records
    ]


def result_name(*, torus_bits: bool, index_devices: bool, cpu_devices: int | None, platform: str) -> str:
    """The results file's stem: ``search``, ``search_torus_bits`` or ``search_index_devices``, with ``_gpu``
    on a GPU and, outside --index-devices (whose devices are its subject), ``_cpu_devices_N`` when given."""
    name = "search_torus_bits" if torus_bits else "search_index_devices" if index_devices else "search"
    if platform == "gpu":
        name += "_gpu"
    if cpu_devices is not None and not index_devices:
        name += f"_cpu_devices_{cpu_devices}"
    return name


ROWS = {"hamming": hamming_row, "wrap-l1": wrap_l1_row, "pq": pq_row}
BANDWIDTH_MIB = 256
SEARCH_HEADER = [
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
TORUS_BITS_HEADER = [
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


def ratios(figures: dict) -> dict[str, float | None]:
    """Each faiss-comparison row's ratio faiss time / geojax time (None without faiss), by search."""
    return {r["search"]: r["ratio"] for r in figures["searches"]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="small sizes (seconds; writes no result unless --out)"
    )
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
    ap.add_argument(
        "--check",
        action="store_true",
        help="rerun the command search.json records (or search_cpu_devices_N.json) and exit 1 naming each "
        "row whose faiss/geojax ratio fell below 0.7× the stored one; writes nothing (--out: where the "
        "stored file is)",
    )
    add_out_argument(ap)
    args = ap.parse_args(argv)
    if args.check and (args.torus_bits or args.index_devices):
        ap.error("--check reruns the stored faiss comparison: not with --torus-bits or --index-devices")
    if args.cpu_devices is not None:
        search.use_cpu_cores(args.cpu_devices)
    machine = machine_info()  # after the device count is set, before any work
    stored = None
    if args.check:
        platform = jax.devices()[0].platform
        name = result_name(
            torus_bits=False, index_devices=False, cpu_devices=args.cpu_devices, platform=platform
        )
        args, stored = results.check_args(ap, name, args.out)

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
        print(f"NOTE: database reduced to {n:,} rows (default {full_rows:,})")
    print(
        f"queries {nq:,}, database rows {n:,}, top-{args.k}, "
        + (
            f"best of {args.repeat} runs, "
            if args.torus_bits or args.index_devices
            else f"medians of {args.repeat} alternating rounds, "
        )
        + f"chunk {args.chunk or 'default'}, query block {args.query_block or 'default'}"
    )
    tune = {
        name: value
        for name, value in (("chunk", args.chunk), ("query_block", args.query_block))
        if value is not None
    }
    rng = np.random.default_rng(0)
    sizes = {"nq": nq, "n": n, "k": args.k, "tune": tune, "repeat": args.repeat}
    figures = {
        "queries": nq,
        "rows": n,
        "k": args.k,
        "repeat": args.repeat,
        "chunk": args.chunk,
        "query_block": args.query_block,
        "jax_devices": jax.device_count(),
        "cpu_devices": args.cpu_devices,
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "faiss_threads": None if faiss is None else faiss.omp_get_max_threads(),
    }
    if args.torus_bits:
        figures["torus_bits"] = torus_bits_table(rng, faiss, **sizes)
        print()
        print(markdown_table(TORUS_BITS_HEADER, torus_bits_cells(figures["torus_bits"]), align="lrrrrrrrrl"))
    elif args.index_devices:
        figures["index_devices"] = index_devices_table(rng, nq=nq, n=n, k=args.k, repeat=args.repeat)
        header = ["codes", "devices", "seconds", "queries/s", "speed-up", "= 1 device"]
        print()
        print(markdown_table(header, index_devices_cells(figures["index_devices"]), align="lrrrrl"))
    else:
        rows = [ROWS[name](rng, faiss, **sizes) for name in args.searches.split(",")]
        bandwidth, ops = memory_bandwidth(BANDWIDTH_MIB), lane_ops_per_second()
        figures["floors"] = {
            "bandwidth_read_mib": BANDWIDTH_MIB,
            "memory_gb_per_s": bandwidth / 1e9,
            "lane_ops_g_per_s": ops / 1e9,
        }
        figures["searches"] = [search_record(r, nq=nq, n=n, bandwidth=bandwidth, ops=ops) for r in rows]
        print(
            f"floors on this CPU: memory read {bandwidth / 1e9:.1f} GB/s, "
            f"XLA uint32 lane operations {ops / 1e9:.1f} G/s (all threads)"
        )
        print()
        print(markdown_table(SEARCH_HEADER, search_cells(figures["searches"]), align="llrrrrrrrrl"))
    name = result_name(
        torus_bits=args.torus_bits,
        index_devices=args.index_devices,
        cpu_devices=args.cpu_devices,
        platform=dev.platform,
    )
    if stored is not None:
        results.exit_on_check(name, ratios(stored["figures"]), ratios(figures))
        return
    folder = destination(args.out, quick=args.quick)
    if folder is not None:
        command = invocation("benchmarks.search", argv)
        print(f"wrote {write_result(name, figures, argv=command, machine=machine, folder=folder)}")


if __name__ == "__main__":
    main()
