"""Float and quantised retrieval report of trained embeddings (Stowell 2026, Experiment 2, Table 3).

    python -m train.evaluate WORKDIR [WORKDIR ...] [--seed S] [--pq-iters N]

Each WORKDIR holds ``embeddings.npz`` (cross-helper contract: test-split queries, train-split reference,
labels, geometry and, when the run recorded it, the trained similarity). For each run: P@1, R@k and MAP@R
(geojax.metrics; queries = test, reference = train) in float and under every code of Stowell 2026 Table 3,
with bits per vector and codebook size. The Markdown table is printed; report_quantised.{json,md,png} go to
the first WORKDIR.

Codes (per geometry):
- float: the similarity ``geojax.similarity.retrieval_similarity`` names for the geometry (cosine on the
  sphere and on Clifford vectors, the trained vector similarity on ``euclidean``), or on an atlas the
  semi-metric d_M of Korman 2021 eq. 7 when chart coordinates are present (else Euclidean distance).
- 8-bit: torus geometries → flat angles (``clifford_to_angles``) → ``torus_uint8`` (no fitted range; D/2
  codes per vector, Table 3 footnote) ranked by the wraparound L1 of ``search``; others → the 8-bit grid
  fitted on the reference set, ranked by the float similarity of the cell centres.
- 4-bit, 2-bit (torus geometries only): the same angles as packed b-bit wraparound codes
  (``quantize.torus_codes``, Stowell 2026 §4 at a narrower word), ranked by their wraparound L1; b·D/2 bits.
- 1-bit: sign bits of the extrinsic coordinates (Clifford form for the torus), ranked by Hamming distance.
- PQ(a, b): named as in Stowell 2026 Table 3, where the *first* number is bits per sub-space and the second
  the number of sub-spaces (the table's codebook sizes 256D/16D and the paper's code, ``pq_nbits, pq_m``, fix
  this reading). As Stowell 2026 §5 ("apply[ied] to the 8-bit quantised values"), PQ is fitted and
  encoded on the 8-bit codes' values: the torus's uint8 codes c (as the grid angles c/256 turns), the other
  geometries' 8-bit grid cell centres; k-means is Euclidean on those values, as faiss's ``IndexPQ`` in the
  paper's code. Each query's own 8-bit values are ranked against the reference reconstructions by
  asymmetric distance (Jégou et al. 2011): squared Euclidean (= ``search.pq_distances``) or, on the torus,
  the squared wraparound distance of the angles. (The paper's public ``embeddings_eval.py`` instead
  replaces each query by the reconstruction of its PQ-nearest training vector, and fits the torus's 8-bit
  grid to the data's range where ``torus_uint8`` has none.)
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from geojax import geometries, manifolds, metrics, quantize, search
from geojax import similarity as sim
from train.helpers import files, plots, tables

# (name, sub-spaces m, bits per sub-space) in the order of Stowell 2026 Table 3.
PQ_CONFIGS: tuple[tuple[str, int, int], ...] = (
    ("PQ(8,16)", 16, 8),
    ("PQ(8,4)", 4, 8),
    ("PQ(8,2)", 2, 8),
    ("PQ(8,1)", 1, 8),
    ("PQ(4,4)", 4, 4),
    ("PQ(4,2)", 2, 4),
)
REPORT_NAME = "report_quantised"


def uint8_angles(turns: jax.Array) -> jax.Array:
    """The angles of ``torus_uint8``'s codes, c/256 turns (float32 [N, D]): the 8-bit values PQ fits."""
    return quantize.torus_uint8(turns).astype(jnp.float32) / 256


def _neg(
    distance: Callable[[jax.Array, jax.Array], jax.Array],
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """Similarity (higher = closer) from an integer or float distance [N, M]."""

    def similarity(a, b):
        return -distance(a, b).astype(jnp.float32)

    return similarity


# Built once, so that the metrics' jit cache (keyed on the similarity function) is reused across calls.
TORUS_L1_SIMILARITY = {
    b: _neg(functools.partial(search.torus_distances, bits=b)) for b in quantize.TORUS_BITS
}
# Narrower torus codes reported beside the 8-bit row (bits per angle).
TORUS_LOW_BITS: tuple[int, ...] = (4, 2)
_NEG_HAMMING = _neg(search.hamming_distances)


def _torus_angles_sq(a: jax.Array, b: jax.Array) -> jax.Array:
    """Similarity = minus the squared wraparound distance of angles in turns (``similarity.torus`` p=2)."""
    return sim.torus(a, b, p=2)


def _neg_atlas(a, b):
    return -sim.manifold_distance(a[0], a[1], b[0], b[1])


def _scores(
    query, query_labels, reference, reference_labels, similarity, ks: Sequence[int]
) -> dict[str, Any]:
    """P@1, R@k for k in ks, MAP@R of one ranking (geojax.metrics, ties to the lower reference index)."""
    args = (query, query_labels, reference, reference_labels)
    return {
        "p_at_1": metrics.precision_at_1(*args, similarity=similarity),
        "recall_at_k": {
            int(k): v for k, v in metrics.recall_at_k(*args, ks=ks, similarity=similarity).items()
        },
        "map_at_r": metrics.map_at_r(*args, similarity=similarity),
    }


def _row(method, bits, codebook, scores=None, *, m=None, nbits=None, note="") -> dict[str, Any]:
    row = {"method": method, "m": m, "nbits": nbits, "bits_per_vector": bits, "codebook_size": codebook}
    if scores is None:
        row.update(p_at_1=None, recall_at_k=None, map_at_r=None)
    else:
        row.update(scores)
    row["note"] = note
    return row


def quantised_report(
    query,
    query_labels,
    reference,
    reference_labels,
    *,
    geometry: str,
    key: jax.Array,
    similarity: str = "neg_euclidean",
    ks: Sequence[int] = (1, 2, 4, 8),
    pq_iters: int = 25,
    query_coords=None,
    query_q=None,
    reference_coords=None,
    reference_q=None,
) -> dict[str, Any]:
    """Retrieval metrics in float and under every quantisation of Stowell 2026 Table 3 (module docstring).

    query: [Nq, D] float (test split, extrinsic coordinates), query_labels: [Nq] int, reference: [Nr, D]
    float (train split), reference_labels: [Nr] int; geometry: a registered geometry's name
    (:mod:`geojax.geometries`); key: PRNG key for PQ k-means;
    similarity: the similarity the run was trained with (embeddings.npz ``similarity``), which ranks
    ``euclidean`` embeddings (``geojax.similarity.retrieval_similarity``; unit-norm geometries rank by
    cosine).
    For 'atlas', query_coords [Nq, n, d] / query_q [Nq, n] (and the reference's) rank the float row by d_M.
    Returns {'geometry', 'dim', 'n_query', 'n_reference', 'rows': [per method: method, m, nbits,
    bits_per_vector, codebook_size, p_at_1, recall_at_k {k: value}, map_at_r, note]}.
    """
    record = geometries.get(geometry)
    for x, name in ((query, "query"), (reference, "reference")):
        if np.ndim(x) != 2 or not np.issubdtype(np.asarray(x).dtype, np.floating):
            raise ValueError(f"{name} must be a float [N, D] matrix, got {np.asarray(x).dtype} {np.shape(x)}")
    if np.shape(query)[1] != np.shape(reference)[1]:
        raise ValueError(
            f"query and reference must have the same width, got {np.shape(query)} and {np.shape(reference)}"
        )
    if record.is_torus and np.shape(query)[1] % 2:
        raise ValueError(
            f"query must have an even width (Clifford pairs) for {geometry}, got {np.shape(query)}"
        )
    q = jnp.asarray(query, jnp.float32)
    r = jnp.asarray(reference, jnp.float32)
    labels = (query_labels, reference_labels)
    d = q.shape[1]
    rows = []

    def score(qx, rx, rank_by):
        return _scores(qx, labels[0], rx, labels[1], rank_by, ks)

    # Float. An atlas ranks by d_M (its retrieval similarity, "manifold") on chart coordinates; its extrinsic
    # vectors, which the 8-bit grid quantises, by Euclidean distance.
    float_sim = sim.retrieval_similarity(geometry, similarity)
    if float_sim == "manifold":
        float_sim = "neg_euclidean"
    if record.is_atlas and query_coords is not None:
        float_scores = score(
            (jnp.asarray(query_coords), jnp.asarray(query_q)),
            (jnp.asarray(reference_coords), jnp.asarray(reference_q)),
            _neg_atlas,
        )
        note = "d_M of Korman 2021 eq. 7 on chart coordinates"
    else:
        float_scores = score(q, r, float_sim)
        note = float_sim
    rows.append(_row("float32", 32 * d, 0, float_scores, note=note))

    # 8-bit.
    if record.is_torus:
        qa, ra = manifolds.clifford_to_angles(q), manifolds.clifford_to_angles(r)
        s = score(quantize.torus_uint8(qa), quantize.torus_uint8(ra), TORUS_L1_SIMILARITY[8])
        rows.append(_row("8-bit", 8 * (d // 2), 0, s, nbits=8, note="torus_uint8, wraparound L1"))
        for b in TORUS_LOW_BITS:
            if (d // 2) * b % 8:
                rows.append(_row(f"{b}-bit", b * (d // 2), 0, nbits=b, note="skipped: not whole bytes"))
                continue
            codes = quantize.torus_codes(qa, b), quantize.torus_codes(ra, b)
            s = score(*codes, TORUS_L1_SIMILARITY[b])
            rows.append(_row(f"{b}-bit", b * (d // 2), 0, s, nbits=b, note="torus_codes, wraparound L1"))
        pq_q, pq_r, pq_sim = uint8_angles(qa), uint8_angles(ra), _torus_angles_sq
    else:
        grid = quantize.grid_fit(r, nbits=8)
        dq = quantize.grid_decode(grid, quantize.grid_encode(grid, q))
        dr = quantize.grid_decode(grid, quantize.grid_encode(grid, r))
        rows.append(
            _row(
                "8-bit",
                8 * d,
                2 * d,
                score(dq, dr, float_sim),
                nbits=8,
                note=f"grid fitted on reference, {float_sim} on cell centres",
            )
        )
        pq_q, pq_r, pq_sim = dq, dr, "neg_sq_euclidean"

    # 1-bit.
    if d % 8 == 0:
        s = score(quantize.one_bit(q), quantize.one_bit(r), _NEG_HAMMING)
        rows.append(_row("1-bit", d, 0, s, nbits=1, note="sign bits, Hamming"))
    else:
        rows.append(_row("1-bit", d, 0, nbits=1, note=f"skipped: width {d} is not a multiple of 8"))

    # Product quantisation.
    dim = pq_q.shape[1]
    for i, (name, m, nbits) in enumerate(PQ_CONFIGS):
        bits, codebook = m * nbits, (1 << nbits) * dim
        if dim % m:
            skip = f"{m} sub-spaces do not divide {dim}"
        elif pq_r.shape[0] < (1 << nbits):
            skip = f"{pq_r.shape[0]} reference rows < {1 << nbits} centroids"
        else:
            skip = ""
        if skip:
            rows.append(_row(name, bits, codebook, m=m, nbits=nbits, note=f"skipped: {skip}"))
            continue
        pq = quantize.pq_fit(pq_r, m=m, nbits=nbits, key=jax.random.fold_in(key, i), iters=pq_iters)
        recon = quantize.pq_decode(pq, quantize.pq_encode(pq, pq_r))
        rows.append(
            _row(
                name,
                bits,
                codebook,
                score(pq_q, recon, pq_sim),
                m=m,
                nbits=nbits,
                note="fitted on the 8-bit values; asymmetric distance to reconstructions",
            )
        )
    return {
        "geometry": geometry,
        "dim": d,
        "n_query": int(q.shape[0]),
        "n_reference": int(r.shape[0]),
        "rows": rows,
    }


# --------------------------------------------------------------------------------------------------------
# Writers (atomic: a temporary file in the same folder, then os.replace).
# --------------------------------------------------------------------------------------------------------


def markdown_table(reports: Sequence[dict[str, Any]]) -> str:
    """One Markdown table over every run: geometry, method, bits, codebook size, P@1, R@k…, MAP@R."""
    ks = sorted(
        {int(k) for rep in reports for row in rep["rows"] if row["recall_at_k"] for k in row["recall_at_k"]}
    )
    head = [
        "geometry",
        "D",
        "method",
        "bits/vector",
        "codebook size",
        "P@1",
        *[f"R@{k}" for k in ks],
        "MAP@R",
        "note",
    ]
    rows = [
        [
            rep["geometry"],
            rep["dim"],
            row["method"],
            row["bits_per_vector"],
            row["codebook_size"],
            row["p_at_1"],
            *[(row["recall_at_k"] or {}).get(k) for k in ks],
            row["map_at_r"],
            row["note"],
        ]
        for rep in reports
        for row in rep["rows"]
    ]
    return tables.markdown_table(head, rows, align="---" + "r" * (len(head) - 4) + "-") + "\n"


def write_json(reports: Sequence[dict[str, Any]], path: str) -> None:
    """JSON list of reports (NaN written as null)."""

    def clean(v):
        if isinstance(v, float) and math.isnan(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    files.write_json(path, clean(list(reports)), indent=2)


def write_markdown(reports: Sequence[dict[str, Any]], path: str) -> None:
    files.write_text(path, markdown_table(reports))


# --------------------------------------------------------------------------------------------------------
# CLI.
# --------------------------------------------------------------------------------------------------------


def load_run(workdir: str) -> dict[str, Any]:
    """Arrays of WORKDIR/embeddings.npz as keyword arguments of :func:`quantised_report`."""
    path = os.path.join(workdir, "embeddings.npz")
    if not os.path.exists(path):
        raise ValueError(f"workdir must hold embeddings.npz, not found: {path}")
    with np.load(path) as z:
        run = {name: z[name] for name in z.files}
    out = {
        "query": run["query"],
        "query_labels": run["query_labels"],
        "reference": run["reference"],
        "reference_labels": run["reference_labels"],
        "geometry": str(run["geometry"]),
    }
    if "similarity" in run:  # the trained similarity, when the run recorded it
        out["similarity"] = str(run["similarity"])
    for name in ("query_coords", "query_q", "reference_coords", "reference_q"):
        if name in run:
            out[name] = run[name]
    return out


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m train.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("workdirs", nargs="+", metavar="WORKDIR")
    ap.add_argument("--seed", type=int, default=0, help="PRNG seed of the PQ k-means")
    ap.add_argument("--pq-iters", type=int, default=25)
    args = ap.parse_args(argv)
    reports = []
    for i, workdir in enumerate(args.workdirs):
        run = load_run(workdir)
        rep = quantised_report(
            **run, key=jax.random.fold_in(jax.random.key(args.seed), i), pq_iters=args.pq_iters
        )
        rep["workdir"] = workdir
        reports.append(rep)
    table = markdown_table(reports)
    print(table, end="")
    base = os.path.join(args.workdirs[0], REPORT_NAME)
    write_json(reports, base + ".json")
    write_markdown(reports, base + ".md")
    plots.plot_quantised(reports, base + ".png")
    return reports


if __name__ == "__main__":
    main(sys.argv[1:])
