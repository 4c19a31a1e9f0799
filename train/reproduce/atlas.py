"""Korman 2021, manifold (atlas) target spaces: n = 16 charts beat n = 1 at encoding dimension 2, for
MSimCLR (piecewise linear accuracy) and MTriplet (R@1)."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np

from train.app import config, data, probe
from train.app.data import Dataset
from train.helpers import plots
from train.reproduce.common import Context, Paper, recipe_encoder, scale_note
from train.reproduce.records import Claim, Findings, Run
from train.reproduce.rules import INCONCLUSIVE, Arms, above, mean_sd, welch_interval
from train.reproduce.rundirs import train_recipe, train_seeds
from train.reproduce.tables import records_table, runs_table

PAPER = Paper(
    key="001",
    citation="Korman 2021",
    title="Atlas / manifold target spaces: MSimCLR and MTriplet (Korman 2021, arXiv 2106.07062)",
    recipe="no clipping; A.1's crop, jitter, grayscale without a flip (crop area 0.08–1, SimCLR's); "
    "the heads of the public code; probe 20 epochs (geojax's; the paper gives none, its public code: "
    "100); MTriplet from scratch on a ResNet-18 (the paper: ImageNet-pretrained GoogLeNet, 227 px)",
    # gpu: MSimCLR 100 → 1.33 epochs, MTriplet 300 → 4, the share whose sweep fits one 9-minute command
    # (docs/paper_scale.md: its expected and measured times)
    fractions={"gpu": 1 / 75},
)
CLAIM_CHARTS = (1, 16)  # the claim: n = 16 beats n = 1 (every scale's first two chart counts)
ATLAS_DIM = 2
PLOT = "reproduce_001_charts"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sizes:
    """Korman 2021's sizes at one scale (``SIZES[scale.name]``)."""

    charts: tuple[int, ...]  # MSimCLR's chart counts at d = 2 (the claim compares the first two)
    atlas_seeds: int  # … and its training seeds per chart count (the paper: three)


SIZES: dict[str, Sizes] = {
    "paper": Sizes(charts=(1, 16, 4, 32), atlas_seeds=3),
    "gpu": Sizes(charts=(1, 16, 4, 32), atlas_seeds=3),
    "cpu": Sizes(charts=(1, 16, 4, 32), atlas_seeds=3),
    "quick": Sizes(charts=(1, 16), atlas_seeds=1),
    "tiny": Sizes(charts=(1, 16), atlas_seeds=1),
}
# Korman 2021 Table 2, encoding dimension 2: MSimCLR piecewise linear accuracy (%), mean ± sd over three
# training runs (appendix A.1), per data set, and plain SimCLR's linear accuracy at the same d.
TABLE2 = {
    "MNIST": {1: "35.4 ± 12.4", 4: "75.1 ± 3.8", 16: "90.4 ± 3.0", 32: "91.3 ± 2.8"},
    "Fashion-MNIST": {1: "36.1 ± 10.8", 4: "62.5 ± 1.2", 16: "68.5 ± 2.2", 32: "72.1 ± 1.0"},
}
TABLE2_SIMCLR = {"MNIST": "15.3 ± 6.8", "Fashion-MNIST": "39.8 ± 9.3"}


def encoder_name(scale_encoder: str | None, preset: str) -> str:
    """The encoder a run of ``preset`` builds at a scale whose encoder is ``scale_encoder`` (None: the
    recipe's own, common.recipe_encoder)."""
    return scale_encoder or recipe_encoder(config.make(preset=preset))


def run(ctx: Context) -> dict[str, Any]:
    """Training: Korman 2021's MSimCLR recipe (the msimclr_mnist preset) at d = ATLAS_DIM for each chart count
    of SIZES' charts (atlas_seeds seeds each), plain SimCLR at the same d, then its MTriplet recipe (the
    mtriplet preset) at the claim's chart counts (scale.seeds seeds). Returns the runs and the embeddings of
    the largest atlas's first MSimCLR run (for the chart plot)."""
    s, sizes = ctx.scale, SIZES[ctx.scale.name]
    simclr: dict[int, list[Run]] = {}
    picture: tuple[Run, dict[str, Any]] | None = None
    for n in sizes.charts:
        name = f"msimclr-d{ATLAS_DIM}-n{n}"
        runs = train_seeds(
            ctx,
            name,
            sizes.atlas_seeds,
            need_embeddings=False,  # only the chart plot reads them, where they are at hand
            preset="msimclr_mnist",
            dim=ATLAS_DIM,
            charts=n,
        )
        simclr[n] = [r for r, _ in runs]
        if n == max(CLAIM_CHARTS) and runs[0][1] is not None:
            picture = runs[0]
    # Table 2's baseline, plain SimCLR: the same recipe with a d-dimensional Euclidean code in place of the
    # atlas, the trunk mapped to it by one linear layer (the paper's encoder f: X → R^d, §3.1; the public
    # code's Linear(F, d)) and SimCLR's MLP projection head in place of the mixed heads; a linear probe on the
    # code.
    baseline = train_seeds(
        ctx,
        f"simclr-d{ATLAS_DIM}",
        sizes.atlas_seeds,
        need_embeddings=False,
        preset="msimclr_mnist",
        geometry="euclidean",
        head="linear",
        projection="mlp",
        probe="linear",
    )
    # Korman 2021's baseline of Tables 3-4 (§3.2.1): "standard, normalized triplet training in R^{d+1}", a
    # unit code one dimension wider than the charts' (the sphere S^d is d-dimensional), the trunk mapped to it
    # by one linear layer, under the same recipe and protocol.
    normalised = [
        train_recipe(
            ctx,
            f"triplet-d{ATLAS_DIM + 1}-seed{seed}",
            need_embeddings=False,
            preset="mtriplet",
            geometry="sphere",
            dim=ATLAS_DIM + 1,
            similarity="cosine",
            head="linear",
            classes="disjoint",
            seed=seed,
        )[0]
        for seed in range(s.seeds)
    ]
    triplet = {
        n: [
            train_recipe(
                ctx,
                f"mtriplet-d{ATLAS_DIM}-n{n}-seed{seed}",
                need_embeddings=False,
                preset="mtriplet",
                dim=ATLAS_DIM,
                charts=n,
                classes="disjoint",  # §3.2.1: train on the first half of the classes, retrieve among the rest
                seed=seed,
            )[0]
            for seed in range(s.seeds)
        ]
        for n in CLAIM_CHARTS
    }
    return {
        "msimclr": simclr,
        "simclr": [r for r, _ in baseline],
        "mtriplet": triplet,
        "triplet": normalised,
        "picture": picture,
    }


def _pca_codes(ds: Dataset, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(train [N, dim], test [M, dim]) float64: the pixels' first ``dim`` principal components, fitted on
    the training split (the top eigenvectors of its covariance)."""
    train = ds.train_x.reshape(len(ds.train_x), -1).astype(np.float64)
    test = ds.test_x.reshape(len(ds.test_x), -1).astype(np.float64)
    centre = train.mean(0)
    _, vectors = np.linalg.eigh(np.cov(train - centre, rowvar=False))
    top = vectors[:, ::-1][:, :dim]
    return (train - centre) @ top, (test - centre) @ top


def pca_probe(ds: Dataset, *, dim: int, epochs: int, seeds: int) -> list[float]:
    """Korman 2021's d-dimensional probe on no learning at all: the linear probe (train.app.probe, ``epochs``
    epochs, seeds 0 … seeds − 1) on the pixels' first ``dim`` principal components, test accuracy per seed.
    The baseline an encoding of dimension ``dim`` must beat."""
    code_train, code_test = _pca_codes(ds, dim)
    return [
        probe.linear_probe(
            code_train.astype(np.float32),
            ds.train_y,
            code_test.astype(np.float32),
            ds.test_y,
            num_classes=ds.num_classes,
            epochs=epochs,
            seed=seed,
        )
        for seed in range(seeds)
    ]


def pca_recall(ds: Dataset, *, dim: int, chunk: int = 1000) -> float:
    """R@1 with no learning at all, under MTriplet's protocol (Korman 2021 §3.2.1, ``classes=disjoint``): the
    pixels' first ``dim`` principal components fitted on the training images of the first half of the
    classes, then the fraction of the other half's test images whose nearest other test image (Euclidean in
    those components; ties to the lower index) has their class. The retrieval baseline of an encoding of
    dimension ``dim``."""
    split = data.disjoint_classes(ds)
    _, code = _pca_codes(split, dim)
    sq = (code**2).sum(1)
    hits = 0
    for start in range(0, len(code), chunk):
        q = code[start : start + chunk]
        dist = sq[None, :] - 2.0 * q @ code.T
        dist[np.arange(len(q)), start + np.arange(len(q))] = np.inf  # each query against the rest
        hits += int((split.test_y[np.argmin(dist, axis=1)] == split.test_y[start : start + chunk]).sum())
    return hits / len(code)


def pca_piecewise_probe(ds: Dataset, *, dim: int, cells: int, epochs: int, seeds: int) -> list[float]:
    """The baseline of an atlas of ``cells`` charts at dimension ``dim`` under a probe of the same capacity:
    the pixels' first ``dim`` principal components cut into ``cells`` k-means cells (fitted on the training
    split, k-means++ with the probe's seed), one linear classifier per cell (train.app.probe.piecewise_linear,
    ``epochs`` epochs), test accuracy per seed 0 … seeds − 1."""
    from sklearn.cluster import KMeans

    code_train, code_test = (c.astype(np.float32) for c in _pca_codes(ds, dim))
    out = []
    for seed in range(seeds):
        cells_fit = KMeans(n_clusters=cells, n_init=3, random_state=seed).fit(code_train)
        out.append(
            probe.piecewise_linear(
                code_train,
                cells_fit.labels_.astype(np.int32),
                ds.train_y,
                code_test,
                cells_fit.predict(code_test).astype(np.int32),
                ds.test_y,
                charts=cells,
                num_classes=ds.num_classes,
                epochs=epochs,
                seed=seed,
            )
        )
    return out


def analyse(trained: dict[str, Any]) -> dict[str, Any]:
    """Per chart count: MSimCLR's piecewise linear accuracies, MTriplet's R@1, the charts MSimCLR used; plain
    SimCLR's linear accuracies."""
    simclr, triplet = trained["msimclr"], trained["mtriplet"]
    return {
        "piecewise_linear_accuracy": {
            n: [r.metric("piecewise_linear_accuracy") for r in runs] for n, runs in simclr.items()
        },
        "simclr_linear_accuracy": [r.metric("linear_probe_accuracy") for r in trained["simclr"]],
        "recall_at_1": {n: [r.metric("recall_at_1") for r in runs] for n, runs in triplet.items()},
        "compressed_recall_at_1": {
            n: [r.metric("compressed_recall_at_1") for r in runs] for n, runs in triplet.items()
        },
        "triplet_recall_at_1": [r.metric("precision_at_1") for r in trained["triplet"]],
        "mtriplet_protocol": DISJOINT,
        "raw_recall_at_1": _raw_recall([r for runs in triplet.values() for r in runs]),
        "charts_used": {
            f"msimclr n={n}": [r.report["charts_used"] for r in runs if r.report is not None]
            for n, runs in simclr.items()
        },
    }


DISJOINT = "disjoint classes"  # MTriplet's protocol (§3.2.1), as results record it
SEEN = "seen classes"  # how results made before it trained and evaluated MTriplet


def _raw_recall(runs: list[Run]) -> float | None:
    """The raw pixels' R@1 under the runs' own protocol (every report holds the same), or None."""
    values = [r.report["baseline_raw_1nn"]["precision_at_1"] for r in runs if r.report is not None]
    return values[0] if values else None


def numbers(result: dict[str, Any]) -> dict[str, Any]:
    """:func:`analyse`'s numbers from a stored reproduce_001 JSON (no training); chart counts back to ints,
    a diverged run's None back to NaN. Runs made before plain SimCLR was part of it have no SimCLR values."""

    def values(vs: list[float | None]) -> list[float]:
        return [math.nan if v is None else v for v in vs]

    d = result["details"]
    n = {
        "piecewise_linear_accuracy": {int(k): values(v) for k, v in d["piecewise_linear_accuracy"].items()},
        "simclr_linear_accuracy": values(d.get("simclr_linear_accuracy", [])),
        "triplet_recall_at_1": values(d.get("triplet_recall_at_1", [])),
        "recall_at_1": {int(k): values(v) for k, v in d["recall_at_1"].items()},
        "charts_used": d["charts_used"],
        **{
            k: {int(c): values(v) for c, v in d[k].items()}
            for k in ("compressed_recall_at_1", "pca_kmeans_probe")
            if k in d
        },
        **{
            k: d[k]
            for k in ("mtriplet_protocol", "pca_probe", "pca_recall_at_1", "raw_recall_at_1")
            if k in d
        },
        "pca_recall": {int(w): v for w, v in d.get("pca_recall", {}).items()},
    }
    runs = [Run.from_json(r) for r in result["runs"]]
    return n | {"baselines": baselines(n, runs), "bars": bars(n, runs)}


PROBE_METRICS = {"msimclr-": "piecewise_linear_accuracy", "simclr-": "linear_probe_accuracy"}


def baselines(n: dict[str, Any], runs: list[Run]) -> list[dict[str, Any]]:
    """The untrained baselines of the same protocol beside each learned run's own number: MSimCLR's
    piecewise linear and SimCLR's linear accuracy against the linear probe on a 2-d PCA of the pixels (its
    seeds' mean), MTriplet's R@1 against 1-NN in that PCA; a baseline not recorded is left out."""
    groups = []
    if n.get("pca_probe"):
        groups.append(
            {
                "baseline": f"the linear probe on a {ATLAS_DIM}-d PCA of the pixels",
                "value": float(np.mean(n["pca_probe"])),
                "metric": "probe accuracy (MSimCLR piecewise linear, SimCLR linear)",
                "runs": {
                    r.name: r.metric(metric)
                    for prefix, metric in PROBE_METRICS.items()
                    for r in runs
                    if r.name.startswith(prefix)
                },
            }
        )
    for cells, values in sorted(n.get("pca_kmeans_probe", {}).items()):
        groups.append(
            {
                "baseline": f"a piecewise linear probe on {cells} k-means cells of a {ATLAS_DIM}-d PCA of "
                "the pixels (the same capacity)",
                "value": float(np.mean(values)),
                "metric": f"MSimCLR n={cells} piecewise linear accuracy",
                "runs": {
                    r.name: r.metric("piecewise_linear_accuracy")
                    for r in runs
                    if r.name.startswith(f"msimclr-d{ATLAS_DIM}-n{cells}-")
                },
            }
        )
    metric = _triplet_metric(n)
    triplet = {r.name: r.metric(metric) for r in runs if r.name.startswith("mtriplet-")}
    protocol = n.get("mtriplet_protocol", SEEN)
    pca = pca_recalls(n)
    for width, what, values in (
        (ATLAS_DIM, f"MTriplet {_TRIPLET_TEXT[metric]}", triplet),
        (ATLAS_DIM + 1, "normalised-triplet R@1", _normalised(runs)),
    ):
        if width in pca and values:
            groups.append(
                {
                    "baseline": f"1-NN on a {width}-d PCA of the pixels ({protocol}; the code's width)",
                    "value": pca[width],
                    "metric": what,
                    "runs": values,
                }
            )
    if n.get("raw_recall_at_1") is not None:
        groups.append(
            {
                "baseline": f"1-NN on the raw pixels ({protocol}; every pixel: a reference, not the bar of a "
                "smaller code)",
                "value": n["raw_recall_at_1"],
                "metric": f"MTriplet {_TRIPLET_TEXT[metric]}",
                "runs": triplet,
            }
        )
    return groups


NORMALISED = f"triplet-d{ATLAS_DIM + 1}-"  # the normalised-triplet baseline's run names


def _normalised(runs: list[Run]) -> dict[str, float]:
    """The normalised-triplet baseline's R@1 per run (its P@1: one neighbour)."""
    return {r.name: r.metric("precision_at_1") for r in runs if r.name.startswith(NORMALISED)}


def pca_recalls(n: dict[str, Any]) -> dict[int, float]:
    """1-NN R@1 on the pixels' PCA per width, under MTriplet's protocol (a result stored before the widths
    were recorded has the 2-d one alone, as ``pca_recall_at_1``)."""
    first = {ATLAS_DIM: n["pca_recall_at_1"]} if n.get("pca_recall_at_1") is not None else {}
    return first | dict(n.get("pca_recall", {}))


def code_width(name: str, metric: str) -> int | None:
    """The floats per image of the code a run's metric ranks (the width of its PCA bar): d for MTriplet's
    compressed code (φ_i*(x), i*) (its chart index aside), n(d + 1) for d_M with soft memberships (every
    chart's coordinates and membership), d + 1 for the normalised-triplet code; None for other runs.

    >>> code_width("mtriplet-d2-n16-seed0", "compressed_recall_at_1"), code_width("mtriplet-d2-n16-seed0",
    ...     "recall_at_1"), code_width("triplet-d3-seed1", "precision_at_1")
    (2, 48, 3)
    """
    if name.startswith(NORMALISED):
        return ATLAS_DIM + 1
    if not name.startswith("mtriplet-"):
        return None
    if metric == "compressed_recall_at_1":
        return ATLAS_DIM
    charts = int(name.split("-n")[1].split("-")[0])
    return charts * (ATLAS_DIM + 1)


# The widths whose PCA bars the claims need: the compressed code's, the normalised-triplet code's and d_M's
# with soft memberships at each chart count of the MTriplet claim.
PCA_WIDTHS = (ATLAS_DIM, ATLAS_DIM + 1, *(n * (ATLAS_DIM + 1) for n in CLAIM_CHARTS))


def bars(n: dict[str, Any], runs: list[Run]) -> dict[str, dict[str, float]]:
    """Per metric and run, the bar of the run's own code size (rules.Arms' ``bar="own"``): 1-NN on the
    pixels' PCA to its code's width (:func:`code_width`), where recorded."""
    pca = pca_recalls(n)
    out: dict[str, dict[str, float]] = {}
    for metric in ("compressed_recall_at_1", "recall_at_1", "precision_at_1"):
        for r in runs:
            width = code_width(r.name, metric)
            if width in pca:
                out.setdefault(metric, {})[r.name] = pca[width]
    return out


_TRIPLET_TEXT = {
    "compressed_recall_at_1": "R@1 on the compressed code (φ_i*(x), i*)",
    "recall_at_1": "R@1 on d_M with soft memberships",
}


def _triplet_metric(n: dict[str, Any]) -> str:
    """The R@1 MTriplet is judged on: the compressed code's (§2.4) where recorded, else d_M's with soft
    memberships (results made before the compressed code was)."""
    recorded = any(v for v in n.get("compressed_recall_at_1", {}).values())
    return "compressed_recall_at_1" if recorded else "recall_at_1"


def _beats(a: list[float], b: list[float]) -> tuple[str, str]:
    """(text, verdict) of "a beats b" on the seeds of each: Welch's 95% interval of mean(a) − mean(b)."""
    ci = welch_interval(a, b)
    return f"Δ {100 * ci[0]:+.1f} pts, 95% CI [{100 * ci[1]:+.1f}, {100 * ci[2]:+.1f}]", above(ci, 0.0)


RULE = "Welch's 95% interval of the difference of the seeds' means lies above 0 (below 0: does not hold)"


def claims(n: dict[str, Any]) -> list[Claim]:
    """The verdicts, from :func:`analyse`'s numbers alone (plain SimCLR's only where it was trained)."""
    acc, plain = n["piecewise_linear_accuracy"], n["simclr_linear_accuracy"]
    lo, hi = CLAIM_CHARTS
    charts_text, charts_verdict = _beats(acc[hi], acc[lo])
    out = [
        Claim(
            claim=f"MSimCLR: n={hi} charts beat n={lo} at d={ATLAS_DIM} (piecewise linear accuracy, %)",
            ours=f"n={lo}: {mean_sd(acc[lo])}, n={hi}: {mean_sd(acc[hi])}; {charts_text}",
            paper="MNIST n=1: 35.4 ± 12.4, n=16: 90.4 ± 3.0 "
            "(Fashion-MNIST 36.1 / 68.5, CIFAR-10 30.2 / 74.2)",
            source="Table 2, encoding dimension 2",
            rule=RULE,
            verdict=charts_verdict,
        )
    ]
    if plain:
        plain_text, plain_verdict = _beats(acc[hi], plain)
        out.append(
            Claim(
                claim=f"MSimCLR with n={hi} charts beats plain SimCLR at d={ATLAS_DIM} (accuracy, %)",
                ours=f"SimCLR (linear): {mean_sd(plain)}, MSimCLR n={hi} (piecewise linear): "
                f"{mean_sd(acc[hi])}; {plain_text}",
                paper="MNIST SimCLR 15.3 ± 6.8, n=16: 90.4 ± 3.0; Fashion-MNIST 39.8 ± 9.3 / 68.5 ± 2.2",
                source="Table 2, encoding dimension 2; §3.1",
                rule=RULE,
                verdict=plain_verdict,
            )
        )
    main = _triplet_metric(n)
    for metric in dict.fromkeys((main, "recall_at_1")):  # the judged R@1, then (if other) the soft one
        r1 = n["recall_at_1"] if metric == "recall_at_1" else n["compressed_recall_at_1"]
        text, verdict = _beats(r1[hi], r1[lo])
        second = "" if metric == main else ", second row: not the code the paper evaluates"
        out.append(
            Claim(
                claim=f"MTriplet: n={hi} charts beat n={lo} at d={ATLAS_DIM} ({_TRIPLET_TEXT[metric]}, "
                f"{n.get('mtriplet_protocol', SEEN)}{second}, %)",
                ours=f"n={lo}: {mean_sd(r1[lo])}, n={hi}: {mean_sd(r1[hi])}; {text}",
                paper="CUB-200 n=1: 7.03, n=16: 12.13; Stanford Cars n=1: 9.62, n=16: 14.07 (the first half "
                "of the classes to train, the second half to test; the compressed code)",
                source="Tables 3 and 4, encoding dim 2; §2.4, §3.2.1",
                rule=RULE,
                verdict=verdict,
            )
        )
    if n.get("mtriplet_protocol") == DISJOINT:
        out.append(baseline_claim(n))
    return out


BASELINE_CLAIM = (
    f"MTriplet with n={CLAIM_CHARTS[1]} charts beats normalised triplet training in small dimensions"
)


def baseline_claim(n: dict[str, Any]) -> Claim:
    """Korman 2021's "significant improvement over the baseline in small dimensions" (§1, Tables 3-4): R@1 of
    MTriplet's compressed code at d = 2 with n = 16 charts against the paper's baseline, normalised triplet
    training in R^{d+1}, both under the disjoint-class protocol; no baseline runs: inconclusive."""
    lo, hi = CLAIM_CHARTS
    ours, base = n["compressed_recall_at_1"].get(hi, []), n.get("triplet_recall_at_1", [])
    text, verdict = (
        _beats(ours, base) if base else ("no normalised-triplet runs in this result", INCONCLUSIVE)
    )
    return Claim(
        claim=f"{BASELINE_CLAIM} (d={ATLAS_DIM}: R@1 on the compressed code against a unit code in "
        f"R^{ATLAS_DIM + 1}, {DISJOINT}, %)",
        ours=f"normalised triplet in R^{ATLAS_DIM + 1}: {mean_sd(base)}, MTriplet n={hi}: {mean_sd(ours)}; "
        f"{text}",
        paper='"As in the case of SimCLR, we also see a significant improvement over the baseline in small '
        'dimensions"; encoding dim 2, R@1: CUB-200 Triplet 7.65, MTriplet n=16 12.13 (n=1: 7.03); Stanford '
        'Cars 10.92 / 14.07 (9.62); the baseline is "standard, normalized triplet training in R^{d+1}"',
        source="§1; §3.2.1; Tables 3 and 4, encoding dim 2",
        rule=f"{RULE}; the baseline's code is one float wider than the charts' (the sphere S^d is "
        "d-dimensional), as the paper sets it",
        verdict=verdict,
    )


def detail_tables(n: dict[str, Any], runs: list[Run], data_name: str, encoder: str) -> list[tuple[str, str]]:
    """Table 2 beside ours (with plain SimCLR and the 2-d PCA probe), and the runs with the raw-pixel row."""
    acc = n["piecewise_linear_accuracy"]
    msimclr_runs = [r for r in runs if r.name.startswith("msimclr")]
    length = ", ".join(sorted({f"{r.steps} steps = {r.epochs:.3g} epochs" for r in msimclr_runs}))
    ours = f"ours, {data_name} ({length}, {encoder})"
    papers = {f"{PAPER.citation} Table 2, {name}": row for name, row in TABLE2.items()}
    table2 = [
        {
            "charts n": k,
            **{c: row[k] for c, row in papers.items()},
            ours: mean_sd(acc[k]),
            "seeds": len(acc[k]),
        }
        for k in sorted(acc)
    ]
    if n["simclr_linear_accuracy"]:
        table2.append(
            {
                "charts n": "SimCLR (linear probe)",
                **{f"{PAPER.citation} Table 2, {name}": paper for name, paper in TABLE2_SIMCLR.items()},
                ours: mean_sd(n["simclr_linear_accuracy"]),
                "seeds": len(n["simclr_linear_accuracy"]),
            }
        )
    for cells, values in sorted(n.get("pca_kmeans_probe", {}).items()):
        table2.append(
            {
                "charts n": f"no training: piecewise linear probe on {cells} k-means cells of a "
                f"{ATLAS_DIM}-d PCA of the pixels",
                **{c: "–" for c in papers},
                ours: mean_sd(values),
                "seeds": len(values),
            }
        )
    pca = n.get("pca_probe")
    table2.append(
        {
            "charts n": f"no training: linear probe on a {ATLAS_DIM}-d PCA of the pixels",
            **{c: "–" for c in papers},
            ours: "not recorded (python -m train.reproduce render --data SPEC records it)"
            if pca is None
            else mean_sd(pca),
            "seeds": 0 if pca is None else len(pca),
        }
    )
    triplet = triplet_table(n)
    return [
        (
            f"MSimCLR at d={ATLAS_DIM}: piecewise linear accuracy (%, mean ± sample sd over seeds) beside "
            f"{PAPER.citation} Table 2 (ResNet-18, 100 epochs, three runs)",
            records_table(table2),
        ),
        *(
            [
                (
                    f"MTriplet at d={ATLAS_DIM}: R@1 (%, mean ± sample sd over seeds, {DISJOINT}) beside "
                    f"{PAPER.citation} Tables 3 and 4, with the untrained baselines of each code's width",
                    triplet,
                )
            ]
            if triplet
            else []
        ),
        ("Runs", runs_table(runs)),
    ]


# Korman 2021 Tables 3 and 4, encoding dimension 2, R@1 (%): the normalised-triplet baseline and MTriplet.
TABLES_3_4 = {"Triplet": ("7.65", "10.92"), 1: ("7.03", "9.62"), 16: ("12.13", "14.07")}


def triplet_table(n: dict[str, Any]) -> str:
    """MTriplet's R@1 on the compressed code and the normalised-triplet baseline's, beside Tables 3 and 4,
    then 1-NN on the pixels' PCA to each code's width and, as a reference, on the raw pixels; '' for a result
    of another protocol, or without the compressed code's R@1."""
    compressed = n.get("compressed_recall_at_1", {})
    if n.get("mtriplet_protocol") != DISJOINT or not any(compressed.values()):
        return ""
    paper = ("CUB-200 (Table 3)", "Stanford Cars (Table 4)")

    def row(what: str, papers: tuple[str, str], values: list[float], width: int | str) -> dict[str, Any]:
        return {
            "method": what,
            "code width": width,
            **dict(zip(paper, papers, strict=True)),
            "ours": mean_sd(values),
            "seeds": len(values) if len(values) > 1 else "–",
        }

    d = ATLAS_DIM
    rows = [
        row(
            f"normalised triplet in R^{d + 1}", TABLES_3_4["Triplet"], n.get("triplet_recall_at_1", []), d + 1
        )
    ]
    rows += [
        row(f"MTriplet n={c}", TABLES_3_4[c], compressed.get(c, []), f"{d} + chart") for c in CLAIM_CHARTS
    ]
    pca = pca_recalls(n)
    rows += [
        row(f"no training: 1-NN on a {w}-d PCA of the pixels", ("–", "–"), [pca[w]], w)
        for w in (d, d + 1)
        if w in pca
    ]
    if n.get("raw_recall_at_1") is not None:
        rows.append(
            row("reference: 1-NN on the raw pixels", ("–", "–"), [n["raw_recall_at_1"]], "all pixels")
        )
    return records_table(rows)


def findings(ctx: Context) -> Findings:
    """Train, analyse, judge; the claims with Table 2 beside ours, the runs, the chart plot and notes."""
    s, sizes = ctx.scale, SIZES[ctx.scale.name]
    trained = run(ctx)
    n = analyse(trained)
    picture = trained["picture"]
    probe_epochs = s.probe_epochs or config.make(preset="msimclr_mnist").probe_epochs
    n["pca_probe"] = pca_probe(ctx.dataset, dim=ATLAS_DIM, epochs=probe_epochs, seeds=sizes.atlas_seeds)
    n["pca_kmeans_probe"] = {
        cells: pca_piecewise_probe(
            ctx.dataset, dim=ATLAS_DIM, cells=cells, epochs=probe_epochs, seeds=sizes.atlas_seeds
        )
        for cells in sizes.charts
        if cells > 1
    }
    n["pca_recall_at_1"] = pca_recall(ctx.dataset, dim=ATLAS_DIM)
    n["pca_recall"] = {w: pca_recall(ctx.dataset, dim=w) for w in PCA_WIDTHS}
    n["baselines"] = baselines(n, ctx.runs)
    n["bars"] = bars(n, ctx.runs)
    plot = ctx.file(PLOT, "png")
    if picture is not None:
        plots.plot_charts(picture[1], os.path.join(ctx.out, plot), title=picture[0].name)
    return Findings(
        claims=claims(n),
        tables=detail_tables(n, ctx.runs, ctx.dataset.name, encoder_name(s.encoder, "msimclr_mnist")),
        details=n,
        plots=[plot] if picture is not None else [],
        notes=[
            f"MSimCLR: the 'msimclr_mnist' preset ({PAPER.citation} §3.1, appendix A.1: batch 128, τ = 1, "
            f"λ1 = 20, λ2 = 0.1, Adam 1e-4, SimCLR augmentations, 100 epochs) at d = {ATLAS_DIM} on "
            f"{ctx.dataset.name}, from scratch. Plain SimCLR: the same recipe with a {ATLAS_DIM}-d Euclidean "
            f"code, the trunk's features mapped to it by one linear layer ({PAPER.citation} §3.1's encoder "
            "f: X → R^d; its public code's Linear(F, d)) in place of the atlas's chart heads, and SimCLR's "
            "projection head Linear(d, d) → ReLU → Linear(d, 64) without biases (the loss on its output) in "
            "place of the mixed heads, evaluated by a linear probe on the code.",
            f"MTriplet: the 'mtriplet' preset ({PAPER.citation} §3.2.1: batch-all, margin 0.2, 8 classes "
            f"× 4, λ1 = 1, λ2 = 0.1, RMSProp 1e-5, 300 epochs) on {encoder_name(s.encoder, 'mtriplet')} "
            "from scratch, where the paper fine-tunes an ImageNet-pretrained GoogLeNet on CUB-200 and "
            "Stanford Cars (227 × 227 crops), a network geojax does not build. Its protocol is the paper's "
            "(§3.2.1, `classes=disjoint`): trained on the training images of the first half of the classes, "
            "evaluated among the test images of the other half, each against the rest, by R@1 on the "
            "compressed code (φ_i*(x), i*) (§2.4: the full representation would be 'cheating' into nd "
            "dimensions), with R@1 on d_M with soft memberships as a second row.",
            scale_note(ctx),
            f"Piecewise linear accuracy uses one linear classifier per chart on the compressed code "
            f"(train.app.probe), as {PAPER.citation} §3.1.",
            *baseline_notes(probe_epochs),
        ],
    )


BASELINES_NOTE = "Baselines with no training"  # how the baselines' note starts


def baseline_notes(probe_epochs: int) -> list[str]:
    """The notes on the untrained baselines (each of its claim's protocol and code size) and on the
    normalised-triplet baseline's recipe."""
    d = ATLAS_DIM
    return [
        f"{BASELINES_NOTE}, each of the same protocol and capacity: the linear probe ({probe_epochs} epochs) "
        f"on the pixels' first {d} principal components; for an atlas of n charts, one linear classifier per "
        "cell of n k-means cells of those components; for MTriplet and the normalised-triplet baseline, 1-NN "
        f"among the unseen classes' test images on the pixels' PCA to the width of the code ranked ({d} for "
        f"the compressed code, its chart index aside; {d + 1} for the unit code in R^{d + 1}; n({d} + 1) for "
        "d_M with soft memberships): the bar a claim's n = 16 runs must clear by 3 points to be worth "
        "having; and, as a reference, on every raw pixel.",
        f"The normalised-triplet baseline ({PAPER.citation} §3.2.1, Tables 3-4): the MTriplet recipe with a "
        f"unit code in R^{d + 1} (`geometry=sphere dim={d + 1}`, the trunk mapped to it by one linear layer, "
        "`head=linear`), batch-all triplet loss with margin 0.2 on the cosine, the same batches, length and "
        "protocol.",
    ]


def judge(result: dict[str, Any], runs: list[Run]) -> tuple[list[Claim], list[tuple[str, str]]]:
    """The claims and tables of a stored reproduce_001 JSON under the current rules (no training); a
    disjoint-class result's notes on the baselines are re-derived (held once however often it is judged)."""
    n = numbers(result)
    if n.get("mtriplet_protocol") == DISJOINT:
        epochs = result["scale"].get("probe_epochs") or config.make(preset="msimclr_mnist").probe_epochs
        notes = [note for note in result["notes"] if not note.startswith(BASELINES_NOTE)]
        notes = [note for note in notes if not note.startswith("The normalised-triplet baseline")]
        result["notes"] = notes + baseline_notes(epochs)
    encoder = encoder_name(result["scale"].get("encoder", "mlp"), "msimclr_mnist")
    return claims(n), detail_tables(n, runs, result["data"]["name"], encoder)


# The runs each claim rests on (rules.gate): a claim that MTriplet's n = 16 charts beat another arm is
# testable where those runs are worth having, each against 1-NN on the pixels' PCA to its own code's width
# (bars); MSimCLR's 2-d codes are judged against the pixels' 2-d PCA under probes of the same capacity
# (baselines).
_N16 = f"mtriplet-d{ATLAS_DIM}-n{CLAIM_CHARTS[1]}-*"
ARMS = {
    **{
        f"MTriplet: n={CLAIM_CHARTS[1]} charts beat n={CLAIM_CHARTS[0]} at d={ATLAS_DIM} ({text}": Arms(
            (_N16,), metric=metric, bar="own"
        )
        for metric, text in _TRIPLET_TEXT.items()
    },
    BASELINE_CLAIM: Arms((_N16,), metric="compressed_recall_at_1", bar="own"),
}
