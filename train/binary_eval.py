"""ITQ vs Tensorized Projection by the protocol of Hong, Meng & Yuan 2018 §6.1: Hamming-ranking mAP,
parameters, encode time.

Ground truth (after Xia et al. 2015, as Hong, Meng & Yuan 2018 use it): the threshold is the average
Euclidean distance of database items to their 50th nearest database neighbour; a database item is a true
neighbour of a query when it lies within that distance. The database is ranked by Hamming distance to the
query's code (ties by the lower database index) and mAP is the mean over queries of the average precision
of that ranking (queries with no true neighbour are left out and counted in the report).

Features are centred and scaled once by a global constant (mean squared norm = d), so that the
projected values and the ±1 codes of Hong, Meng & Yuan 2018 eq. 9 are of the same size whatever the data's
units; a global scale changes neither the Euclidean ground truth nor the ITQ codes.

    python -m train.binary_eval [--data digits|npz:PATH[:KEY]] [--quick] [--out binary_eval.json]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Sequence

import jax
import numpy as np

from geojax import binary, search, tt
from train.helpers import files, tables, timing

FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
QUICK_FACTORS = (0.5, 1.0, 2.0)
NPZ_KEYS = ("x", "features", "embeddings", "images")


def load_features(spec: str) -> tuple[str, np.ndarray]:
    """(name, features [N, D] float32) for ``digits`` or ``npz:PATH[:KEY]`` (arrays are flattened per row)."""
    if spec == "digits":
        from sklearn.datasets import load_digits

        return "digits", load_digits().data.astype(np.float32)
    if not spec.startswith("npz:"):
        raise ValueError(f"data must be 'digits' or 'npz:PATH[:KEY]', got {spec!r}")
    path, key = spec[4:], ""
    if not os.path.exists(path) and ":" in path:
        path, _, key = path.rpartition(":")
    if not os.path.exists(path):
        raise ValueError(f"data npz:{path}: no such file")
    with np.load(path) as f:
        keys = [key] if key else [k for k in NPZ_KEYS if k in f]
        if not keys or keys[0] not in f:
            raise ValueError(f"data npz:{path} needs one of {list(NPZ_KEYS)} or a named key, has {f.files}")
        x = np.asarray(f[keys[0]])
    if x.ndim < 2 or x.shape[0] < 2:
        raise ValueError(f"data npz:{path}:{keys[0]} must be [N, ...] with N ≥ 2, got shape {x.shape}")
    return os.path.basename(path), x.reshape(x.shape[0], -1).astype(np.float32)


def tt_shape(d: int, cores: int) -> tuple[int, tuple[int, ...]]:
    """(padded width d' ≥ d, in_modes): the smallest d' whose balanced modes are all ≤ 2·⌈d'^(1/t)⌉."""
    n = d
    while max(modes := tt.balanced_modes(n, cores)) > 2 * math.ceil(n ** (1 / cores) - 1e-9):
        n += 1
    return n, modes


def radius(db: np.ndarray, *, k: int = 50, sample: int = 1000, seed: int = 0) -> float:
    """Mean Euclidean distance of database items (a seeded sample of ``sample``) to their k-th neighbour."""
    if db.shape[0] <= k:
        raise ValueError(f"db must have more than k = {k} rows, got {db.shape[0]}")
    rows = np.random.default_rng(seed).permutation(db.shape[0])[:sample]
    dist = _euclidean(db[rows], db)
    dist[np.arange(len(rows)), rows] = np.inf  # the item itself is not its own neighbour
    return float(np.mean(np.sort(dist, axis=1)[:, k - 1]))


def _euclidean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances [len(a), len(b)] in float64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    sq = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.sqrt(np.maximum(sq, 0.0))


def ground_truth(queries: np.ndarray, db: np.ndarray, threshold: float) -> np.ndarray:
    """relevant [Q, N] bool: database items within ``threshold`` (Euclidean) of each query."""
    return _euclidean(queries, db) <= threshold


def average_precision(distances: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """AP [Q] of each query's ranking by ascending distance (ties: lower index first); NaN if none relevant.

    distances, relevant: [Q, N]. AP = mean over relevant items of the precision at their rank.
    """
    order = np.argsort(distances, axis=1, kind="stable")
    hits = np.take_along_axis(relevant, order, axis=1)
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    total = hits.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (precision * hits).sum(1) / total, np.nan)


def hamming_ap(query_codes, db_codes, relevant: np.ndarray) -> np.ndarray:
    """Hong, Meng & Yuan 2018 §6.1: AP [Q] of each query's Hamming ranking over packed codes (NaN for a query
    with no true neighbour)."""
    dist = np.asarray(search.hamming_distances(query_codes, db_codes))
    return average_precision(dist, relevant)


def hamming_map(query_codes, db_codes, relevant: np.ndarray) -> float:
    """Hong, Meng & Yuan 2018 §6.1: mAP of Hamming ranking over packed codes (queries with no true
    neighbour left out)."""
    return float(np.nanmean(hamming_ap(query_codes, db_codes, relevant)))


def code_bits(factor: float, d_padded: int) -> int:
    """Bits of the code at b / d = ``factor`` on features padded to ``d_padded``: whole bytes, at least one.

    >>> code_bits(1.0, 784), code_bits(0.25, 784), code_bits(4.0, 64)
    (784, 192, 256)
    """
    return 8 * max(1, round(factor * d_padded / 8))


def itq_vs_tp(
    x: np.ndarray,
    *,
    factors: Sequence[float] = FACTORS,
    rank: int = 4,
    cores: int | None = None,
    queries: int | None = None,
    itq_iters: int = 50,
    tp_iters: int = 10,
    seed: int = 0,
    per_query: bool = False,
    encode_repeats: int = 3,
) -> dict:
    """Run the ITQ vs TP comparison (Hong, Meng & Yuan 2018 §6.1) on features x [N, D]; returns the report
    as a JSON-able dict. With ``per_query``, each row also holds ``ap``: every query's AP (None for a query
    with no true neighbour), the same queries in every row, for a paired comparison of two rows. Encoding the
    database is timed ``encode_repeats`` times after a warm-up call, the two fits of a code length in turn
    (train.helpers.timing.interleaved): each row holds the median
    (``encode_us_per_vector``) and every timing (``encode_us_samples``), µs per vector."""
    n, d = x.shape
    n_q = queries if queries is not None else max(1, min(1000, n // 10))
    t = cores if cores is not None else max(2, int(math.log(d, 4) + 1e-9))
    d_pad, in_modes = tt_shape(d, t)
    x = x - x.mean(0)
    x = np.pad(x / np.sqrt(np.mean((x * x).sum(1)) / d), ((0, 0), (0, d_pad - d))).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(n)
    q, db = x[perm[:n_q]], x[perm[n_q:]]
    threshold = radius(db, seed=seed)
    relevant = ground_truth(q, db, threshold)
    encode = jax.jit(binary.encode)
    key = jax.random.key(seed)
    rows = []
    for f in factors:
        bits = code_bits(f, d_pad)
        out_modes = tt.balanced_modes(bits, t)
        fits = {
            "ITQ": lambda bits=bits: binary.itq_fit(db, bits, key=key, iters=itq_iters),
            "TP": lambda bits=bits, out_modes=out_modes: binary.tp_fit(
                db, bits, in_modes=in_modes, out_modes=out_modes, rank=rank, key=key, iters=tp_iters
            ),
        }
        models, fit_s = {}, {}
        for method, fit in fits.items():
            start = time.perf_counter()
            models[method] = jax.block_until_ready(fit())
            fit_s[method] = time.perf_counter() - start
        # in turn, so that a change of the machine's load between timings falls on both fits alike
        calls = {method: timing.Call(encode, (model, db)) for method, model in models.items()}
        timings = timing.interleaved(calls, rounds=encode_repeats)
        for method, model in models.items():
            db_codes, seconds = timings[method].result, timings[method].median
            params = tt.num_params(model.projection) if method == "TP" else int(model.projection.size)
            ap = hamming_ap(encode(model, q), db_codes, relevant)
            rows.append(
                {
                    "bits": bits,
                    "method": method,
                    "map": float(np.nanmean(ap)),
                    "params": params,
                    "encode_us_per_vector": 1e6 * seconds / db.shape[0],
                    "encode_us_samples": [1e6 * t / db.shape[0] for t in timings[method].seconds],
                    "fit_s": fit_s[method],
                    "out_modes": list(out_modes) if method == "TP" else None,
                    "tt_ranks": list(model.projection.ranks) if method == "TP" else None,
                    "objective_first": float(model.objective[0]),
                    "objective_last": float(model.objective[-1]),
                    **({"ap": [None if math.isnan(v) else float(v) for v in ap]} if per_query else {}),
                }
            )
    return {
        "protocol": "Hong, Meng & Yuan 2018 §6.1: Hamming-ranking mAP, "
        "ground truth = within the mean 50-NN distance",
        "n_database": int(db.shape[0]),
        "n_queries": int(n_q),
        "queries_without_true_neighbour": int((relevant.sum(1) == 0).sum()),
        "mean_true_neighbours": float(relevant.sum(1).mean()),
        "d": int(d),
        "d_padded": int(d_pad),
        "in_modes": list(in_modes),
        "rank": rank,
        "itq_iters": itq_iters,
        "tp_iters": tp_iters,
        "threshold": threshold,
        "device": str(jax.devices()[0]),
        "rows": rows,
    }


def to_markdown(report: dict) -> str:
    """A line on the data and protocol sizes, then the report's rows as a Markdown table."""
    intro = (
        f"{report.get('data', 'data')}: {report['n_database']} database / {report['n_queries']} queries, "
        f"d = {report['d']} (TT input modes {'×'.join(map(str, report['in_modes']))}, "
        f"rank {report['rank']}), "
        f"{report['mean_true_neighbours']:.1f} true neighbours per query on average; {report['device']}"
    )
    header = ["bits", "method", "mAP", "parameters", "encode µs/vector", "TT output modes"]
    rows = [
        [
            r["bits"],
            r["method"],
            r["map"],
            f"{r['params']:,}",
            f"{r['encode_us_per_vector']:.3f}",
            "×".join(map(str, r["out_modes"])) if r["out_modes"] else "dense",
        ]
        for r in report["rows"]
    ]
    return intro + "\n\n" + tables.markdown_table(header, rows, align="rlrrrl")


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m train.binary_eval", description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="digits", help="digits | npz:PATH[:KEY] (default digits)")
    parser.add_argument("--quick", action="store_true", help="b ∈ {d/2, d, 2d}, fewer iterations")
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--cores", type=int, default=None, help="TT cores (default ⌊log₄ d⌋)")
    parser.add_argument("--queries", type=int, default=None, help="default min(1000, N/10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="binary_eval.json")
    args = parser.parse_args(argv)
    name, x = load_features(args.data)
    report = itq_vs_tp(
        x,
        factors=QUICK_FACTORS if args.quick else FACTORS,
        rank=args.rank,
        cores=args.cores,
        queries=args.queries,
        itq_iters=10 if args.quick else 50,
        tp_iters=3 if args.quick else 10,
        seed=args.seed,
    )
    report["data"] = name
    print(to_markdown(report))
    files.write_json(args.out, report, indent=2)
    print(f"\nwrote {args.out}")
    return report


if __name__ == "__main__":
    main()
