"""Inverted-file search over compact codes: geojax.search.IndexIVF vs faiss-cpu, side by side in one run.

    python -m benchmarks.ivf              # 1,000,000 rows, 1,000 queries, nlist 1,024
    python -m benchmarks.ivf --quick      # 20,000 rows, seconds (writes no result unless --out)
    python -m benchmarks.ivf --rows 100000 --nlist 256 --name ivf_check   # the comparison --check reruns
    python -m benchmarks.ivf --check      # rerun ivf_check.json's command; exit 1 if a ratio fell below 0.7×
    python -m benchmarks.ivf --learned RUN_DIR [RUN_DIR …]   # a trained run's embeddings (nlist 256)
    python -m benchmarks.ivf --filtered   # also filtered search: a random allowed-id mask at three densities
    python -m benchmarks.ivf --gpu --quick   # geojax on an accelerator, faiss-cpu on the host; filtered too

Data (seeded): (a) the torus: 64 angles per row (turns), each row one of 1,000 centres drawn uniformly on
the torus plus N(0, 0.05²) per angle, wrapped to [0, 1); (b) the sphere: 64-d unit vectors, each one of
1,000 uniform centres plus N(0, 0.1²) per coordinate, renormalised. Queries are 1,000 fresh rows of the
same mixtures. Every index gets the same nlist, the same 100,000 training rows and the same 10 k-means rounds
for its coarse quantiser (faiss's default for IVF, ``cp.niter``, set on both; geojax's PQ codebooks from the
first 20,000). The indexes of one data set are timed together, in alternating rounds at each nprobe:

- the torus: geojax ``TorusCodec`` 8-bit codes (64 B/row) ranked by wraparound L1 and by wraparound squared
  L2, circular k-means quantiser; against what a faiss user who knows the torus builds: faiss on the
  Clifford features (cos 2πt_k, sin 2πt_k) (128 floats) under L2, whose squared distance Σ_k 2 − 2cos 2πΔ_k
  is the chordal distance — ``IndexIVFScalarQuantizer`` QT_4bit (128 features at 4 bits: 64 B/row, the
  bytes of geojax's codes), QT_8bit (128 B/row) and ``IndexIVFFlat`` (512 B/row);
- sign bits of the sphere vectors (64 bits, 8 B/row), ``BinaryCodec('sign')``, against faiss
  ``IndexBinaryIVF`` over the same codes;
- PQ(m=8, 8 bits) of the sphere vectors (8 B/row), ``PQCodec`` on the sphere, against faiss ``IndexIVFPQ``
  (m=8, 8 bits, residual codes: faiss's default).

With ``--learned``, the rows are the embeddings of trained runs instead (each run directory's
``embeddings.npz``: its training split as the rows, its test split as the queries): a torus run (torusC or
torusN) gives its D angles (``clifford_to_angles``) as 8-bit torus codes (D B/row) ranked by wraparound L1
and by wraparound squared L2, beside faiss IVF-SQ4 (D B/row), IVF-SQ8 and IVF-flat on their Clifford
features; a sphere run gives sign bits (D/8 B/row) and PQ(m = D/4, 8 bits; D/4 B/row) of its unit vectors.
nlist 256 unless given: about √N lists for the 54,000 training rows of a Fashion-MNIST run (about 210 rows
per list, well above faiss's minimum of 39 training rows per centroid; every row trains both quantisers).
The result is written as ``ivf_learned`` (or ``--name``).

For each index and ``nprobe``: recall@10 against the exact search over the index's own codes (geojax:
``IndexFlat`` over them, equal to nprobe = nlist; faiss: the same index at nprobe = nlist); recall@10 against
exact float search — on the torus under two distances: the chordal distance of the Clifford features
(``recall_float``) and the torus's own, the flat torus's geodesic distance √Σ_k δ_k², δ_k the wraparound
difference of the angles (``recall_torus``); on the sphere the cosine (``recall_float``); queries/s (the
median of --repeat rounds); build time (train + add) and bytes per row (geojax: ``IndexIVF.nbytes``, the
devices' codes, ids and segment padding, the host's segment table and centroids; faiss: its serialised
index, code bytes + 8-byte ids + its quantiser). faiss uses every core (OpenMP); geojax runs JAX's default
single CPU device, whose loops XLA splits over the cores.

Where each side wins, per pair of a geojax and a faiss index: *queries/s at recall ≥ 0.95 against the same
codes* (each side's fastest nprobe there); *recall at its bytes* (each index's float recall at the largest
nprobe, with its code bytes per row: the 8-bit torus codes and IVF-SQ4 hold the same bytes); *queries/s at
equal recall* (for each float distance, the highest recall both reach, and each side's fastest nprobe
reaching it). ``--check`` compares, per pair, the geometric mean over nprobe of geojax's queries/s over
faiss's.

Filtered search (``--filtered``; ``--gpu`` implies it): each index searches with a seeded random mask of
allowed ids at densities :data:`FILTER_DENSITIES`, at nprobe :data:`FILTER_NPROBE` — geojax's
``search(q, k, allowed=mask)``, faiss's ``SearchParametersIVF`` with an ``IDSelectorBitmap`` (faiss's
``IndexBinaryIVF`` refuses a selector: its row says so). Per index and density: queries/s, its unfiltered
queries/s at the same nprobe, recall@10 against its own filtered search at nprobe = nlist, and whether every
id returned is allowed (or −1). ``--gpu`` runs geojax on JAX's default device (the accelerator) and faiss
on the host's cores, writing ``ivf_gpu`` (or ``--name``); where JAX sees no accelerator it says that the run
is a dry run on the CPU.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

from benchmarks.search import load_faiss, recall_at
from geojax import manifolds, search, similarity
from train.helpers import results
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.timing import Call, interleaved

K = 10
NPROBES = (1, 2, 4, 8, 16, 32, 64)
TRAIN_ROWS = 100_000  # rows that train every coarse quantiser
CODEC_TRAIN_ROWS = 20_000  # rows that train geojax's PQ codebooks (faiss's IVFPQ samples up to 65,536)
KMEANS_ROUNDS = 10  # both coarse quantisers' k-means rounds: faiss's IVF default (cp.niter)
SAME_CODES_TARGET = 0.95
FILTER_DENSITIES = (0.5, 0.05, 0.005)  # the share of ids a filtered search allows
FILTER_NPROBE = 8
CHECK_NAME = "ivf_check"


class Case(NamedTuple):
    """One data set's indexes, timed together: its label, the rows' space ("torus" or "sphere") and the
    indexes as (label, library, code bytes per row, maker); a maker builds the index from (x, q, train,
    nlist) and returns :class:`Built`."""

    label: str
    space: str
    indexes: list[tuple[str, str, int, Callable[..., Built]]]


class Built(NamedTuple):
    """A trained index filled with the rows: its search call (queries/s are timed on it), how to set its
    nprobe, its serialised or held bytes per row, and its search restricted to a boolean mask of allowed ids
    at the current nprobe (None where the library refuses one)."""

    search: Call
    set_nprobe: Callable[[int], None]
    bytes_per_row: float
    filtered: Callable[[np.ndarray], Call] | None


def torus_data(rng, n: int, centres: np.ndarray) -> np.ndarray:
    pick = rng.integers(0, len(centres), n)
    return np.mod(centres[pick] + 0.05 * rng.standard_normal((n, centres.shape[1])), 1.0).astype(np.float32)


def sphere_data(rng, n: int, centres: np.ndarray) -> np.ndarray:
    x = centres[rng.integers(0, len(centres), n)] + 0.1 * rng.standard_normal((n, centres.shape[1]))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clifford(t: np.ndarray) -> np.ndarray:
    """[n, D] turns → [n, 2D] float32 (cos 2πt_k, sin 2πt_k) pairs, unscaled (as a faiss user writes them)."""
    angle = 2 * np.pi * t.astype(np.float64)
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1).reshape(len(t), -1).astype(np.float32)


_torus_score = jax.jit(lambda a, b: similarity.torus(a, b, p=2))  # −Σ δ², the squared geodesic distance

SCORES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "chordal": lambda q, x: clifford(q) @ clifford(x).T,  # −½ squared chordal distance + a constant
    "torus": lambda q, x: np.asarray(_torus_score(q, x)),
    "cosine": lambda q, x: q @ x.T,  # unit rows
}


def float_truth(q: np.ndarray, x: np.ndarray, score: str, *, block: int = 20_000) -> np.ndarray:
    """Exact top-K ids of every query by ``SCORES[score]`` (higher = nearer), ties to the lower id."""
    best_s = np.full((len(q), K), -np.inf, np.float32)
    best_i = np.zeros((len(q), K), np.int64)
    for start in range(0, len(x), block):
        s = np.concatenate([best_s, SCORES[score](q, x[start : start + block])], axis=1)
        i = np.concatenate([best_i, np.arange(start, start + s.shape[1] - K)[None].repeat(len(q), 0)], axis=1)
        part = np.argpartition(-s, K - 1, axis=1)[:, :K]
        s, i = np.take_along_axis(s, part, 1), np.take_along_axis(i, part, 1)
        top = np.lexsort((i, -s), axis=1)
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    return best_i


def truths(data: dict, cases: list[Case]) -> dict[str, dict[str, np.ndarray]]:
    """Per space, the float top-K under each of its distances (torus: chordal and geodesic)."""
    spaces = {c.space for c in cases}
    out = {}
    for space in spaces:
        x, q = data[space]
        names = ("chordal", "torus") if space == "torus" else ("cosine",)
        out[space] = {name: float_truth(q, x, name) for name in names}
    return out


# ----------------------------------------------------------------------------------------------------------
# the indexes


def geojax_index(codec) -> Callable[..., Built]:
    """Maker of a geojax IndexIVF over ``codec`` (trained on the training rows first if it has parameters)."""

    def make(x, q, train, nlist) -> Built:
        if not codec.is_trained:
            codec.train(train[:CODEC_TRAIN_ROWS])
        index = search.IndexIVF(codec, nlist, iters=KMEANS_ROUNDS)
        index.train(train)
        index.add(x)

        def set_nprobe(p: int) -> None:
            index.nprobe = p

        def filtered(mask: np.ndarray) -> Call:
            return Call(functools.partial(index.search, allowed=mask), (q, K))

        return Built(Call(index.search, (q, K)), set_nprobe, index.nbytes / len(x), filtered)

    return make


def faiss_index(faiss, kind: str, codec=None) -> Callable[..., Built]:
    """Maker of a faiss IVF index: ``kind`` "sq4", "sq8" or "flat" on the Clifford features of angles,
    "binary" over ``codec``'s sign bits, "pq" (IndexIVFPQ, ``codec``'s m and bits) on the vectors."""

    def make(x, q, train, nlist) -> Built:
        if kind == "binary":
            x, q, train = (np.asarray(codec.encode(a)) for a in (x, q, train))
            index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(x.shape[1] * 8), x.shape[1] * 8, nlist)
        else:
            if kind != "pq":
                x, q, train = (clifford(a) for a in (x, q, train))
            coarse = faiss.IndexFlatL2(x.shape[1])
            if kind == "pq":
                index = faiss.IndexIVFPQ(coarse, x.shape[1], nlist, codec.m, codec.nbits)
            elif kind == "flat":
                index = faiss.IndexIVFFlat(coarse, x.shape[1], nlist)
            else:
                qtype = {"sq4": faiss.ScalarQuantizer.QT_4bit, "sq8": faiss.ScalarQuantizer.QT_8bit}[kind]
                index = faiss.IndexIVFScalarQuantizer(coarse, x.shape[1], nlist, qtype)
        index.cp.niter = KMEANS_ROUNDS
        index.train(train)
        index.add(x)
        serialise = faiss.serialize_index_binary if kind == "binary" else faiss.serialize_index

        def set_nprobe(p: int) -> None:
            index.nprobe = p

        def filtered(mask: np.ndarray) -> Call:
            bits = np.packbits(mask, bitorder="little")  # faiss's IDSelectorBitmap order
            selector = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
            params = faiss.SearchParametersIVF(sel=selector, nprobe=index.nprobe)
            return Call(lambda a, k, _keep=(bits, selector): index.search(a, k, params=params), (q, K))

        refuses = kind == "binary"  # IndexBinaryIVF: "IDSelector is not supported"
        return Built(
            Call(index.search, (q, K)),
            set_nprobe,
            len(serialise(index)) / len(x),
            None if refuses else filtered,
        )

    return make


def torus_case(faiss, label: str, dim: int) -> Case:
    """geojax's 8-bit torus codes by wraparound L1 and squared L2 against faiss on the Clifford features."""
    indexes = [
        (f"geojax IVF 8-bit L1 ({dim} B)", "geojax", dim, geojax_index(search.TorusCodec(dim))),
        (f"geojax IVF 8-bit L2 ({dim} B)", "geojax", dim, geojax_index(search.TorusCodec(dim, p=2))),
    ]
    if faiss is not None:
        indexes += [
            (f"faiss IVF-SQ4 Clifford ({dim} B)", "faiss", dim, faiss_index(faiss, "sq4")),
            (f"faiss IVF-SQ8 Clifford ({2 * dim} B)", "faiss", 2 * dim, faiss_index(faiss, "sq8")),
            (f"faiss IVF-flat Clifford ({8 * dim} B)", "faiss", 8 * dim, faiss_index(faiss, "flat")),
        ]
    return Case(label, "torus", indexes)


def sphere_cases(faiss, dim: int, m: int) -> list[Case]:
    """Sign bits against IndexBinaryIVF and PQ(m × 8 bits) against IndexIVFPQ, on unit vectors of ``dim``."""
    signs, pq = search.BinaryCodec(dim), search.PQCodec(dim, m=m, geometry="sphere")
    bits = [(f"geojax IVF, Hamming ({dim // 8} B)", "geojax", dim // 8, geojax_index(signs))]
    products = [(f"geojax IVF, PQ of the vectors ({m} B)", "geojax", m, geojax_index(pq))]
    if faiss is not None:
        bits.append(
            (f"faiss IndexBinaryIVF ({dim // 8} B)", "faiss", dim // 8, faiss_index(faiss, "binary", signs))
        )
        products.append((f"faiss IndexIVFPQ, residuals ({m} B)", "faiss", m, faiss_index(faiss, "pq", pq)))
    return [Case(f"sign bits ({dim // 8} B)", "sphere", bits), Case(f"PQ {m}×8 ({m} B)", "sphere", products)]


def learned_data(faiss, runs: list[str]) -> tuple[dict, list[Case], list[dict]]:
    """({space: (rows, queries)}, cases, sources) from run directories' embeddings.npz (module docstring)."""
    data, cases, sources = {}, [], []
    for run in runs:
        z = np.load(os.path.join(run, "embeddings.npz"))
        geometry = str(z["geometry"])
        x, q = z["reference"].astype(np.float32), z["query"].astype(np.float32)
        if geometry in manifolds.TORUS_GEOMETRIES:
            x, q = (np.asarray(manifolds.clifford_to_angles(a)) for a in (x, q))
            data["torus"] = (x, q)
            cases.append(torus_case(faiss, f"torus, {x.shape[1]} angles", x.shape[1]))
        elif geometry == "sphere":
            data["sphere"] = (x, q)
            cases += sphere_cases(faiss, x.shape[1], x.shape[1] // 4)
        else:
            raise SystemExit(f"{run}: a {geometry!r} run; --learned takes torus or sphere runs")
        sources.append(
            {"run": run, "geometry": geometry, "rows": len(x), "queries": len(q), "dim": x.shape[1]}
        )
    return data, cases, sources


def synthetic_data(faiss, rng, n: int, nq: int, dim: int) -> tuple[dict, list[Case]]:
    """({space: (rows, queries)}, cases) of the clustered torus and sphere mixtures (module docstring)."""
    torus_centres = rng.random((1000, dim))
    sphere_centres = rng.standard_normal((1000, dim))
    sphere_centres /= np.linalg.norm(sphere_centres, axis=1, keepdims=True)
    data = {
        "torus": (torus_data(rng, n, torus_centres), torus_data(rng, nq, torus_centres)),
        "sphere": (sphere_data(rng, n, sphere_centres), sphere_data(rng, nq, sphere_centres)),
    }
    return data, [torus_case(faiss, f"torus, {dim} angles", dim), *sphere_cases(faiss, dim, 8)]


# ----------------------------------------------------------------------------------------------------------
# the sweep


def run_case(
    case: Case, data: dict, truth: dict[str, np.ndarray], nlist: int, repeat: int, filtered: bool = False
):
    """(sweep rows, build rows, filtered rows) of one case: every index built, its exhaustive result over its
    own codes, then for each nprobe all of them timed in alternating rounds; with ``filtered``, the filtered
    searches (module docstring)."""
    x, q = data[case.space]
    train = x[:TRAIN_ROWS]
    built, exact, builds = {}, {}, []
    for label, library, code_bytes, make in case.indexes:
        start = time.perf_counter()
        built[label] = make(x, q, train, nlist)
        seconds = time.perf_counter() - start
        built[label].set_nprobe(nlist)  # every list: the exact search over the index's own codes
        exact[label] = np.asarray(built[label].search.fn(*built[label].search.args)[1])
        builds.append(
            {
                "case": case.label,
                "index": label,
                "library": library,
                "code_bytes": code_bytes,
                "bytes_per_row": built[label].bytes_per_row,
                "build_s": seconds,
            }
        )
    floats = list(truth.values())  # the chordal distance or the cosine first, then the torus's own
    rows = []
    for nprobe in [p for p in NPROBES if p <= nlist]:
        for b in built.values():
            b.set_nprobe(nprobe)
        times = interleaved({label: b.search for label, b in built.items()}, rounds=repeat)
        for label, library, code_bytes, _ in case.indexes:
            ids = np.asarray(times[label].result[1])
            row = {
                "case": case.label,
                "index": label,
                "library": library,
                "code_bytes": code_bytes,
                "nprobe": nprobe,
                "recall_same_codes": recall_at(ids, exact[label]),
                "recall_float": recall_at(ids, floats[0]),
            }
            if len(floats) > 1:
                row["recall_torus"] = recall_at(ids, floats[1])
            rows.append({**row, "qps": len(q) / times[label].median})
    return rows, builds, (filtered_rows(case, built, rows, len(x), nlist, repeat) if filtered else [])


def _recall_allowed(found: np.ndarray, exact: np.ndarray) -> float:
    """Recall of ``found`` [Q, K] against ``exact``'s ids other than −1 (a sparse filter may allow fewer
    than K rows); a query with none counts 1."""
    per_query = [
        len(set(f) & set(t[t >= 0])) / max(1, int(np.sum(t >= 0))) for f, t in zip(found, exact, strict=True)
    ]
    return float(np.mean(per_query))


def filtered_rows(
    case: Case, built: dict[str, Built], sweep: list[dict], n: int, nlist: int, repeat: int
) -> list[dict]:
    """Per density of :data:`FILTER_DENSITIES` and index: the filtered search at :data:`FILTER_NPROBE`
    timed in alternating rounds, its recall against the same filtered search at nprobe = nlist, and whether
    it returned only allowed ids."""
    nprobe = min(FILTER_NPROBE, nlist)
    rng = np.random.default_rng(1)
    unfiltered = {r["index"]: r["qps"] for r in sweep if r["nprobe"] == nprobe}
    rows = []
    for density in FILTER_DENSITIES:
        mask = rng.random(n) < density
        can = {label: b for label, b in built.items() if b.filtered is not None}
        exact = {}
        for label, b in can.items():
            b.set_nprobe(nlist)
            call = b.filtered(mask)
            exact[label] = np.asarray(call.fn(*call.args)[1])
            b.set_nprobe(nprobe)
        times = interleaved({label: b.filtered(mask) for label, b in can.items()}, rounds=repeat)
        for label, library, _, _ in case.indexes:
            row = {
                "case": case.label,
                "index": label,
                "library": library,
                "density": density,
                "nprobe": nprobe,
            }
            row["qps_unfiltered"] = unfiltered[label]
            if label not in can:
                rows.append({**row, "qps": None, "note": "refuses an id selector"})
                continue
            ids = np.asarray(times[label].result[1])
            allowed = np.all((ids == -1) | mask[np.clip(ids, 0, n - 1)])
            rows.append(
                {
                    **row,
                    "qps": len(ids) / times[label].median,
                    "recall_same_codes": _recall_allowed(ids, exact[label]),
                    "only_allowed": bool(allowed),
                    "note": "",
                }
            )
    return rows


def _pairs(rows: list[dict]) -> list[tuple[str, str, str]]:
    """(case, geojax index, faiss index) for every pair of a geojax and a faiss index of one case."""
    indexes = {(r["case"], r["index"], r["library"]): None for r in rows}
    return [
        (case, ours, theirs)
        for case, ours, lib in indexes
        if lib == "geojax"
        for case2, theirs, lib2 in indexes
        if case2 == case and lib2 == "faiss"
    ]


def _fastest(rows: list[dict], index: str, key: str, level: float) -> dict | None:
    """The row of ``index`` with the most queries/s among those whose ``key`` recall is ≥ ``level``."""
    ok = [r for r in rows if r["index"] == index and r[key] >= level]
    return max(ok, key=lambda r: r["qps"]) if ok else None


def _setting(row: dict | None, key: str) -> str:
    return "never" if row is None else f"nprobe {row['nprobe']} {row['qps']:,.0f} q/s (recall {row[key]:.3f})"


def at_same_codes(rows: list[dict], target: float = SAME_CODES_TARGET) -> list[dict]:
    """Per geojax–faiss pair: each side's fastest setting at recall ≥ ``target`` against its own codes, and
    the queries/s ratio geojax / faiss."""
    out = []
    for case, ours, theirs in _pairs(rows):
        a, b = (_fastest(rows, i, "recall_same_codes", target) for i in (ours, theirs))
        ratio = a["qps"] / b["qps"] if a and b else None
        summary = (
            f"{ours} {_setting(a, 'recall_same_codes')}; {theirs} {_setting(b, 'recall_same_codes')}"
            + (f"; geojax/faiss {ratio:.2f}×" if ratio else "")
        )
        out.append({"case": case, "geojax": a, "faiss": b, "ratio": ratio, "summary": summary})
    return out


def at_equal_recall(rows: list[dict]) -> list[dict]:
    """Per geojax–faiss pair and float distance: the highest recall both reach, each side's fastest setting
    reaching it and the queries/s ratio geojax / faiss there."""
    out = []
    for case, ours, theirs in _pairs(rows):
        mine = [r for r in rows if r["index"] in (ours, theirs)]
        for key in ["recall_float"] + ["recall_torus"] * ("recall_torus" in mine[0]):
            level = min(max(r[key] for r in mine if r["index"] == i) for i in (ours, theirs))
            a, b = (_fastest(rows, i, key, level) for i in (ours, theirs))
            ratio = a["qps"] / b["qps"]
            out.append(
                {
                    "case": case,
                    "recall": key,
                    "level": level,
                    "geojax": a,
                    "faiss": b,
                    "ratio": ratio,
                    "summary": f"{key} {level:.3f}: {ours} {_setting(a, key)}; {theirs} {_setting(b, key)}; "
                    f"geojax/faiss {ratio:.2f}×",
                }
            )
    return out


def at_bytes(rows: list[dict]) -> list[dict]:
    """Per index: its code bytes per row and its float recalls at the largest nprobe swept."""
    out = []
    for index in dict.fromkeys(r["index"] for r in rows):
        last = max((r for r in rows if r["index"] == index), key=lambda r: r["nprobe"])
        keep = ("case", "index", "library", "code_bytes", "nprobe", "recall_float", "recall_torus")
        out.append({k: last[k] for k in keep if k in last})
    return out


def ratios(figures: dict) -> dict[str, float | None]:
    """Per geojax–faiss pair: the geometric mean over nprobe of geojax's queries/s over faiss's (the figure
    ``--check`` compares)."""
    rows = figures["sweep"]
    out = {}
    for case, ours, theirs in _pairs(rows):
        qps = {(r["index"], r["nprobe"]): r["qps"] for r in rows}
        logs = [math.log(qps[ours, p] / qps[theirs, p]) for i, p in qps if i == ours and (theirs, p) in qps]
        out[f"{case}: {ours} / {theirs}"] = math.exp(sum(logs) / len(logs))
    return out


# ----------------------------------------------------------------------------------------------------------
# the command


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def print_tables(rows: list[dict], builds: list[dict]) -> None:
    torus = any("recall_torus" in r for r in rows)
    header = ["case", "index", "nprobe", "recall@10 same codes", "recall@10 float (chordal / cosine)"]
    header += ["recall@10 float (torus)"] * torus + ["queries/s"]
    cells = [
        [r["case"], r["index"], r["nprobe"], f"{r['recall_same_codes']:.3f}", f"{r['recall_float']:.3f}"]
        + [_fmt(r.get("recall_torus"), ".3f")] * torus
        + [f"{r['qps']:,.0f}"]
        for r in rows
    ]
    print(markdown_table(header, cells, align="llrrr" + "r" * torus + "r"))
    print()
    cells = [
        [b["case"], b["index"], b["code_bytes"], f"{b['bytes_per_row']:.1f}", f"{b['build_s']:.1f}"]
        for b in builds
    ]
    print(markdown_table(["case", "index", "code B/row", "index B/row", "build s"], cells, align="llrrr"))


def print_filtered(rows: list[dict]) -> None:
    print(f"\nfiltered search (a random mask of allowed ids), nprobe {rows[0]['nprobe']}:")
    header = [
        "case",
        "index",
        "allowed",
        "queries/s",
        "unfiltered q/s",
        "recall@10 same filter",
        "only allowed",
    ]
    cells = [
        [r["case"], r["index"], f"{r['density']:.1%}", _fmt(r["qps"], ",.0f"), f"{r['qps_unfiltered']:,.0f}"]
        + [_fmt(r.get("recall_same_codes"), ".3f"), r["note"] or ("yes" if r["only_allowed"] else "NO")]
        for r in rows
    ]
    print(markdown_table(header, cells, align="llrrrrl"))


def main(argv: list[str] | None = None) -> None:
    machine = machine_info()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 rows, 200 queries, nlist 64")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--queries", type=int, default=None)
    parser.add_argument("--nlist", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--plot", default=None, help="PNG of recall against queries/s (default: none)")
    parser.add_argument(
        "--learned", nargs="+", default=None, metavar="RUN_DIR", help="trained runs' embeddings"
    )
    parser.add_argument(
        "--name", default=None, help="result file stem (default: ivf, ivf_learned or ivf_gpu)"
    )
    parser.add_argument(
        "--filtered", action="store_true", help="also time filtered search (a mask of allowed ids)"
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="geojax on JAX's accelerator, faiss on the host; filtered search too; writes ivf_gpu.json",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"rerun the command {CHECK_NAME}.json (or --name's file) records and exit 1 naming each "
        "geojax–faiss pair whose queries/s ratio fell below 0.7× the stored one; writes nothing "
        "(--out: where the stored file is)",
    )
    add_out_argument(parser)
    args = parser.parse_args(argv)
    if args.name is not None and (not args.name or "/" in args.name or args.name.startswith(".")):
        parser.error(f"--name must be a plain file stem, got {args.name!r}")
    stored = None
    if args.check:
        check_name = args.name or CHECK_NAME
        args, stored = results.check_args(parser, check_name, args.out)
    args.filtered = args.filtered or args.gpu
    print(f"geojax on {jax.devices()[0].device_kind} ({jax.default_backend()})")
    if args.gpu and jax.default_backend() == "cpu":
        print("--gpu: JAX sees no accelerator here: geojax runs on the CPU (a dry run)")
    faiss = load_faiss()
    sources = None
    if args.learned:
        data, cases, sources = learned_data(faiss, args.learned)
        n, nq = (len(a) for a in data[cases[0].space])
        nlist = args.nlist or 256
    else:
        n = args.rows or (20_000 if args.quick else 1_000_000)
        nq = args.queries or (200 if args.quick else 1_000)
        nlist = args.nlist or (64 if args.quick else 1024)
        data, cases = synthetic_data(faiss, np.random.default_rng(0), n, nq, 64)
    truth = truths(data, cases)

    rows, builds, filtered = [], [], []
    for case in cases:
        case_rows, case_builds, case_filtered = run_case(
            case, data, truth[case.space], nlist, args.repeat, args.filtered
        )
        rows += case_rows
        builds += case_builds
        filtered += case_filtered

    what = "learned embeddings: " + ", ".join(s["run"] for s in sources) + "; " if sources else ""
    print(
        f"{what}{n:,} rows, {nq:,} queries, nlist {nlist}, top-{K}; load before {machine.get('load_before')}"
    )
    print_tables(rows, builds)
    if filtered:
        print_filtered(filtered)
    same_codes, equal_recall, bytes_ = at_same_codes(rows), at_equal_recall(rows), at_bytes(rows)
    print(f"\nqueries/s at recall ≥ {SAME_CODES_TARGET} against the same codes:")
    for t in same_codes:
        print(f"  {t['case']}: {t['summary']}")
    print("\nqueries/s at equal float recall (the highest both reach):")
    for t in equal_recall:
        print(f"  {t['case']}: {t['summary']}")
    print(f"\nfloat recall at each index's bytes (nprobe {bytes_[0]['nprobe']}):")
    for b in bytes_:
        torus = f", torus {b['recall_torus']:.3f}" if "recall_torus" in b else ""
        print(f"  {b['index']}: {b['code_bytes']} B/row of code, float {b['recall_float']:.3f}{torus}")
    figures = {
        "rows": n,
        "queries": nq,
        "nlist": nlist,
        "k": K,
        "kmeans_rounds": KMEANS_ROUNDS,
        "sweep": rows,
        "builds": builds,
        "same_codes": same_codes,
        "equal_recall": equal_recall,
        "at_bytes": bytes_,
        **({"learned": sources} if sources else {}),
        **({"filtered": filtered} if filtered else {}),
        "jax_backend": jax.default_backend(),
    }
    if stored is not None:
        results.exit_on_check(check_name, ratios(stored["figures"]), ratios(figures))
        return
    if args.plot:
        plot(rows, args.plot, f"{n:,} rows, {nq:,} queries, nlist {nlist}")
    folder = destination(args.out, quick=args.quick)
    if folder is not None:
        name = args.name or ("ivf_learned" if sources else "ivf_gpu" if args.gpu else "ivf")
        command = invocation("benchmarks.ivf", argv)
        print(f"wrote {write_result(name, figures, argv=command, machine=machine, folder=folder)}")


def plot(rows: list[dict], path: str, title: str) -> None:
    """Queries/s against recall, one column per case, one row per recall (same codes, float, torus)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    keys = [("recall_same_codes", "vs same codes"), ("recall_float", "vs float (chordal / cosine)")]
    if any("recall_torus" in r for r in rows):
        keys.append(("recall_torus", "vs float (torus geodesic)"))
    fig, axes = plt.subplots(
        len(keys), len(cases), figsize=(4.6 * len(cases), 3.5 * len(keys)), squeeze=False
    )
    for col, case in enumerate(cases):
        for row, (key, label) in enumerate(keys):
            ax = axes[row, col]
            mine = [r for r in rows if r["case"] == case and key in r]
            if not mine:
                ax.axis("off")
                continue
            for index in dict.fromkeys(r["index"] for r in mine):
                pts = [r for r in mine if r["index"] == index]
                style = "o-" if pts[0]["library"] == "geojax" else "s--"
                ax.plot([r[key] for r in pts], [r["qps"] for r in pts], style, label=index)
                for r in pts:
                    ax.annotate(str(r["nprobe"]), (r[key], r["qps"]), fontsize=6)
            ax.set_yscale("log")
            ax.set_xlabel(f"recall@10 {label}")
            ax.set_ylabel("queries/s")
            ax.set_title(case, fontsize=9)
            ax.legend(fontsize=6)
    fig.suptitle(title + " (numbers: nprobe)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
