"""Inverted-file search over compact codes: geojax.search.IndexIVF vs faiss-cpu, side by side in one run.

    python benchmarks/ivf.py              # 1,000,000 rows, 1,000 queries, nlist 1,024
    python benchmarks/ivf.py --quick      # 20,000 rows, seconds (writes no result unless --out)
    python benchmarks/ivf.py --learned RUN_DIR [RUN_DIR …]   # a trained run's embeddings (nlist 256)

Data (seeded): (a) the torus: 64 angles per row (turns), each row one of 1,000 centres drawn uniformly on
the torus plus N(0, 0.05²) per angle, wrapped to [0, 1); (b) the sphere: 64-d unit vectors, each one of
1,000 uniform centres plus N(0, 0.1²) per coordinate, renormalised. Queries are 1,000 fresh rows of the
same mixtures. Codes and peers, with the same nlist, the same 100,000 training rows and the same 10 k-means
rounds for both coarse quantisers (faiss's default for IVF, ``cp.niter``, set on both; geojax's PQ codebooks
from the first 20,000):

- torus 8-bit codes (64 B/row), ``TorusCodec`` wraparound L1, circular k-means quantiser, against faiss
  ``IndexIVFScalarQuantizer`` (QT_8bit, L2: 64 B/row over the same angles, no wraparound);
- sign bits of the sphere vectors (64 bits, 8 B/row), ``BinaryCodec('sign')``, against faiss
  ``IndexBinaryIVF`` over the same codes;
- PQ(m=8, 8 bits) of the sphere vectors (8 B/row), ``PQCodec`` on the sphere, against faiss ``IndexIVFPQ``
  (m=8, 8 bits, residual codes: faiss's default).

With ``--learned``, the rows are the embeddings of trained runs instead (each run directory's
``embeddings.npz``: its training split as the rows, its test split as the queries, one index per codec that
fits the run's geometry): a torus run (torusC or torusN) gives its angles (``clifford_to_angles``) as 8-bit
torus codes of D/2 B/row ranked by wraparound L1 and by wraparound squared L2 (the one that orders near
neighbours as the trained chordal distance does), each beside faiss IVF-SQ8 over the same angles; a sphere
run gives sign bits (D/8 B/row) and PQ(m = D/4, 8 bits; D/4 B/row) of its unit vectors. nlist 256 unless
given: about √N lists for the 54,000 training rows of a Fashion-MNIST run (about 210 rows per list, well above
faiss's minimum of 39 training rows per centroid; every row trains both quantisers). Everything else is as
above; the result is written as ``ivf_learned`` (or ``--name``).

For each ``nprobe``: recall@10 against the exact search over the same codes (geojax: ``IndexFlat`` over
them, equal to nprobe = nlist; faiss: the same index at nprobe = nlist), recall@10 against exact float
search (the torus: the squared chordal distance Σ 2 − 2cos 2πΔ of the angles, the distance of the Clifford
embedding; the sphere: cosine), queries/s (geojax and faiss timed in alternating rounds, after one warm-up
each, the median of --repeat), build time (train + add) and bytes per row (geojax: host lists + device
blocks; faiss: its serialised index). faiss uses every core (OpenMP); geojax runs JAX's default single CPU
device, whose loops XLA splits over the cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from search import interleaved, load_faiss, recall_at  # noqa: E402

from geojax import manifolds, search  # noqa: E402
from train.helpers.results import add_out_argument, destination, machine_info, write_result  # noqa: E402
from train.helpers.tables import markdown_table  # noqa: E402

K = 10
NPROBES = (1, 2, 4, 8, 16, 32, 64)
CODEC_TRAIN_ROWS = 20_000  # rows that train geojax's PQ codebooks (faiss's IVFPQ samples up to 65,536)
KMEANS_ROUNDS = 10  # both coarse quantisers' k-means rounds: faiss's IVF default (cp.niter)


def torus_data(rng, n: int, centres: np.ndarray) -> np.ndarray:
    pick = rng.integers(0, len(centres), n)
    return np.mod(centres[pick] + 0.05 * rng.standard_normal((n, centres.shape[1])), 1.0).astype(np.float32)


def sphere_data(rng, n: int, centres: np.ndarray) -> np.ndarray:
    x = centres[rng.integers(0, len(centres), n)] + 0.1 * rng.standard_normal((n, centres.shape[1]))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def float_truth(q: np.ndarray, x: np.ndarray, *, torus: bool, block: int = 100_000) -> np.ndarray:
    """Exact top-K ids by chordal distance on the torus's Clifford features, or by cosine on the sphere."""

    def feats(a):
        if not torus:
            return a
        t = 2 * np.pi * a
        return np.concatenate([np.cos(t), np.sin(t)], axis=1)

    fq = feats(q)
    best_s = np.full((len(q), K), -np.inf, np.float32)
    best_i = np.zeros((len(q), K), np.int64)
    for start in range(0, len(x), block):
        s = fq @ feats(x[start : start + block]).T
        s = np.concatenate([best_s, s], axis=1)
        i = np.concatenate([best_i, np.arange(start, start + s.shape[1] - K)[None].repeat(len(q), 0)], axis=1)
        part = np.argpartition(-s, K - 1, axis=1)[:, :K]
        s, i = np.take_along_axis(s, part, 1), np.take_along_axis(i, part, 1)
        top = np.argsort(-s, axis=1, kind="stable")
        best_s, best_i = np.take_along_axis(s, top, 1), np.take_along_axis(i, top, 1)
    return best_i


def learned_data(runs: list[str]) -> tuple[dict, list, list[dict]]:
    """({space: (rows, queries)}, cases, sources) from run directories' embeddings.npz (module docstring)."""
    data, cases, sources = {}, [], []
    for run in runs:
        z = np.load(os.path.join(run, "embeddings.npz"))
        geometry = str(z["geometry"])
        x, q = z["reference"].astype(np.float32), z["query"].astype(np.float32)
        if geometry in manifolds.TORUS_GEOMETRIES:
            x, q = (np.asarray(manifolds.clifford_to_angles(a)) for a in (x, q))
            data["torus"] = (x, q)
            cases += [
                (f"torus 8-bit L{p} ({x.shape[1]} B)", "torus", search.TorusCodec(x.shape[1], p=p))
                for p in (1, 2)
            ]
        elif geometry == "sphere":
            d = x.shape[1]
            data["sphere"] = (x, q)
            cases += [
                (f"sign bits ({d // 8} B)", "sphere", search.BinaryCodec(d)),
                (f"PQ {d // 4}×8 ({d // 4} B)", "sphere", search.PQCodec(d, m=d // 4, geometry="sphere")),
            ]
        else:
            raise SystemExit(f"{run}: a {geometry!r} run; --learned takes torus or sphere runs")
        sources.append(
            {"run": run, "geometry": geometry, "rows": len(x), "queries": len(q), "dim": x.shape[1]}
        )
    return data, cases, sources


def synthetic_data(rng, n: int, nq: int, dim: int) -> tuple[dict, list]:
    """({space: (rows, queries)}, cases) of the clustered torus and sphere mixtures (module docstring)."""
    torus_centres = rng.random((1000, dim))
    sphere_centres = rng.standard_normal((1000, dim))
    sphere_centres /= np.linalg.norm(sphere_centres, axis=1, keepdims=True)
    data = {
        "torus": (torus_data(rng, n, torus_centres), torus_data(rng, nq, torus_centres)),
        "sphere": (sphere_data(rng, n, sphere_centres), sphere_data(rng, nq, sphere_centres)),
    }
    cases = [
        ("torus 8-bit (64 B)", "torus", search.TorusCodec(dim)),
        ("sign bits (8 B)", "sphere", search.BinaryCodec(dim)),
        ("PQ 8×8 (8 B)", "sphere", search.PQCodec(dim, m=8, geometry="sphere")),
    ]
    return data, cases


def sweep(
    name, ours_index, exact_ours, peer_index, set_peer_nprobe, queries, peer_queries, truth, nlist, repeat
):
    """Rows of (codes, library, nprobe, recall vs same codes, recall vs float, queries/s) for the sweep."""
    rows = []
    set_peer_nprobe(nlist)
    peer_exact = peer_index.search(peer_queries, K)[1] if peer_index is not None else None
    for nprobe in [p for p in NPROBES if p <= nlist]:
        ours_index.nprobe = nprobe
        fns = {"geojax": (ours_index.search, (queries, K))}
        if peer_index is not None:
            set_peer_nprobe(nprobe)
            fns["faiss"] = (peer_index.search, (peer_queries, K))
        times = interleaved(fns, repeat=repeat)
        for lib, t in times.items():
            ids = np.asarray(t.result[1])
            same = exact_ours if lib == "geojax" else peer_exact
            rows.append(
                {
                    "codes": name,
                    "library": lib,
                    "nprobe": nprobe,
                    "recall_same_codes": recall_at(ids, same),
                    "recall_float": recall_at(ids, truth),
                    "qps": len(queries) / float(np.median(t.seconds)),
                }
            )
    return rows


def timed(fn):
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return out, time.perf_counter() - start


def main(argv=None) -> None:
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
    parser.add_argument("--name", default=None, help="result file stem (default: ivf, or ivf_learned)")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    if args.name is not None and (not args.name or "/" in args.name or args.name.startswith(".")):
        parser.error(f"--name must be a plain file stem, got {args.name!r}")
    faiss = load_faiss()
    sources = None
    if args.learned:
        data, cases, sources = learned_data(args.learned)
        n, nq = (len(data[cases[0][1]][i]) for i in (0, 1))
        nlist = args.nlist or 256
    else:
        n = args.rows or (20_000 if args.quick else 1_000_000)
        nq = args.queries or (200 if args.quick else 1_000)
        nlist = args.nlist or (64 if args.quick else 1024)
        data, cases = synthetic_data(np.random.default_rng(0), n, nq, 64)
    truth = {name: float_truth(q, x, torus=name == "torus") for name, (x, q) in data.items()}

    builds, rows = [], []
    for name, space, codec in cases:
        x, q = data[space]
        train = x[:100_000]
        ours = search.IndexIVF(codec, nlist, iters=KMEANS_ROUNDS)

        def build(ours=ours, codec=codec, x=x, train=train):
            if not codec.is_trained:
                codec.train(train[:CODEC_TRAIN_ROWS])
            ours.train(train)
            ours.add(x)

        _, ours_build = timed(build)
        flat = search.IndexFlat(codec)
        flat.add(x)  # ids 0 … n − 1, as the IVF index's
        exact_ours = np.asarray(flat.search(q, K)[1])
        del flat
        peer, peer_q, set_nprobe, peer_build, peer_bytes = None, None, (lambda p: None), None, None
        if faiss is not None:
            peer, peer_q, peer_build = build_peer(faiss, name, codec, x, q, train, nlist)

            def set_nprobe(p, peer=peer):
                peer.nprobe = p

            peer_bytes = len(
                faiss.serialize_index_binary(peer) if "sign" in name else faiss.serialize_index(peer)
            ) / len(x)
        builds.append(
            {
                "codes": name,
                "geojax_build_s": ours_build,
                "faiss_build_s": peer_build,
                "geojax_bytes_per_row": ours.nbytes / len(x),
                "faiss_bytes_per_row": peer_bytes,
            }
        )
        rows += sweep(name, ours, exact_ours, peer, set_nprobe, q, peer_q, truth[space], nlist, args.repeat)
        del ours, peer

    what = "learned embeddings: " + ", ".join(s["run"] for s in sources) + "; " if sources else ""
    print(
        f"{what}{n:,} rows, {nq:,} queries, nlist {nlist}, top-{K}; load before {machine.get('load_before')}"
    )
    print(
        markdown_table(
            ["codes", "library", "nprobe", "recall@10 vs same codes", "recall@10 vs float", "queries/s"],
            [
                [
                    r["codes"],
                    r["library"],
                    r["nprobe"],
                    f"{r['recall_same_codes']:.3f}",
                    f"{r['recall_float']:.3f}",
                    f"{r['qps']:,.0f}",
                ]
                for r in rows
            ],
            align="llrrrr",
        )
    )
    print()
    print(
        markdown_table(
            ["codes", "geojax build s", "faiss build s", "geojax B/row", "faiss B/row"],
            [
                [
                    b["codes"],
                    f"{b['geojax_build_s']:.1f}",
                    _fmt(b["faiss_build_s"], ".1f"),
                    f"{b['geojax_bytes_per_row']:.1f}",
                    _fmt(b["faiss_bytes_per_row"], ".1f"),
                ]
                for b in builds
            ],
            align="lrrrr",
        )
    )
    targets = at_recall(rows, 0.95)
    for t in targets:
        print(f"{t['codes']}: at recall ≥ 0.95 (same codes) {t['summary']}")
    if args.plot:
        plot(rows, args.plot, f"{n:,} rows, {nq:,} queries, nlist {nlist}")
    folder = destination(args.out, quick=args.quick)
    if folder is not None:
        figures = {
            "rows": n,
            "queries": nq,
            "nlist": nlist,
            "k": K,
            "kmeans_rounds": KMEANS_ROUNDS,
            "sweep": rows,
            "builds": builds,
            "targets": targets,
            **({"learned": sources} if sources else {}),
        }
        command = sys.argv if argv is None else [sys.argv[0], *argv]
        name = args.name or ("ivf_learned" if sources else "ivf")
        print(f"wrote {write_result(name, figures, argv=command, machine=machine, folder=folder)}")


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def build_peer(faiss, name: str, codec, x, q, train, nlist: int):
    """(faiss index, its queries, build seconds) for the case ``name``."""
    dim = x.shape[1]
    start = time.perf_counter()
    if "sign" in name:
        codes, qcodes = codec.encode(x), codec.encode(q)
        index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(dim), dim, nlist)
        index.cp.niter = KMEANS_ROUNDS
        index.train(codec.encode(train))
        index.add(codes)
        return index, qcodes, time.perf_counter() - start
    if "PQ" in name:
        index = faiss.IndexIVFPQ(faiss.IndexFlatL2(dim), dim, nlist, codec.m, codec.nbits)
    else:
        index = faiss.IndexIVFScalarQuantizer(
            faiss.IndexFlatL2(dim), dim, nlist, faiss.ScalarQuantizer.QT_8bit
        )
    index.cp.niter = KMEANS_ROUNDS
    index.train(train)
    index.add(x)
    return index, q, time.perf_counter() - start


def at_recall(rows: list[dict], target: float) -> list[dict]:
    """Per codes: each library's fastest setting reaching ``target`` recall against the same codes, and the
    queries/s ratio geojax / faiss."""
    out = []
    for codes in dict.fromkeys(r["codes"] for r in rows):
        best = {}
        for lib in ("geojax", "faiss"):
            ok = [
                r
                for r in rows
                if r["codes"] == codes and r["library"] == lib and r["recall_same_codes"] >= target
            ]
            best[lib] = max(ok, key=lambda r: r["qps"]) if ok else None
        ratio = best["geojax"]["qps"] / best["faiss"]["qps"] if best["geojax"] and best["faiss"] else None
        parts = [
            f"{lib} nprobe {b['nprobe']} {b['qps']:,.0f} q/s (float recall {b['recall_float']:.3f})"
            if b
            else f"{lib} never"
            for lib, b in best.items()
        ]
        summary = "; ".join(parts) + (f"; geojax/faiss {ratio:.2f}×" if ratio else "")
        out.append(
            {
                "codes": codes,
                "geojax": best["geojax"],
                "faiss": best["faiss"],
                "ratio": ratio,
                "summary": summary,
            }
        )
    return out


def plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    codes = list(dict.fromkeys(r["codes"] for r in rows))
    fig, axes = plt.subplots(2, len(codes), figsize=(4.2 * len(codes), 7), squeeze=False)
    for col, c in enumerate(codes):
        for row, (key, label) in enumerate(
            (("recall_same_codes", "vs same codes"), ("recall_float", "vs float"))
        ):
            ax = axes[row, col]
            for lib, style in (("geojax", "o-"), ("faiss", "s--")):
                pts = [r for r in rows if r["codes"] == c and r["library"] == lib]
                if pts:
                    ax.plot([r[key] for r in pts], [r["qps"] for r in pts], style, label=lib)
                    for r in pts:
                        ax.annotate(str(r["nprobe"]), (r[key], r["qps"]), fontsize=7)
            ax.set_yscale("log")
            ax.set_xlabel(f"recall@10 {label}")
            ax.set_ylabel("queries/s")
            ax.set_title(c, fontsize=9)
            ax.legend(fontsize=8)
    fig.suptitle(title + " (numbers: nprobe)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
