"""Bouhsine et al. 2024, the SimO loss: it separates the classes (but for one confusable pair, as the paper
concedes its Dog/Cat), calibrated against a SupCon control on the same data; and without its orthogonality
term (the paper's ablation) classes collapse."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from geojax import similarity as similarity_lib
from train.app import config
from train.helpers import tables
from train.reproduce.common import CPU_RECIPE, Context, Paper, data_tag, scale_note
from train.reproduce.records import Claim, Findings, Run
from train.reproduce.rules import (
    ABOVE_BASELINE,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    Arms,
    Interval,
    above,
    count_interval,
    every,
    interval_text,
    learned,
    mean,
    mean_sd,
    nearest_labels,
    t_interval,
    value_text,
    welch_interval,
)
from train.reproduce.rundirs import recipe_trials, run_analysis, train_recipe
from train.reproduce.tables import records_table, runs_table

PAPER = Paper(
    key="004",
    citation="Bouhsine et al. 2024",
    title="SimO loss and its orthogonality ablation (Bouhsine et al. 2024)",
    recipe="D = 16, batch 128, AdamW: geojax's choices",
    fractions={"gpu": 1 / 16},  # the sweep 532 s expected (docs/paper_scale.md)
)
SIMO_SIMILARITY = "neg_euclidean"  # SimO is defined on Euclidean distances; retrieval ranks by them too
# At a scale whose small encoder carries batch norm (the cpu scale), SimO's runs train that encoder without
# it: SimO's loss on a batch-norm encoder collapses there (the control run below keeps batch norm and shows
# it), with class-subsampled batches and with random ones alike.
SIMO_NORM = "none"
DIM = 16  # the preset's D


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sizes:
    """Bouhsine et al. 2024's sizes at one scale (``SIZES[scale.name]``)."""

    simo_dims: tuple[int, ...]  # embedding dimensions of the SimO ablation …
    simo_seeds: int  # … and its training seeds per dimension and variant


SIZES: dict[str, Sizes] = {
    "paper": Sizes(simo_dims=(16, 4), simo_seeds=3),
    "gpu": Sizes(simo_dims=(16, 4), simo_seeds=3),
    "cpu": Sizes(simo_dims=(16,), simo_seeds=3),  # D = 4 too would take the sweep past 6 hours on two cores
    "quick": Sizes(simo_dims=(16,), simo_seeds=1),
    "tiny": Sizes(simo_dims=(8,), simo_seeds=1),
}
# The controls, at D = 16 (run name → overrides): SimO with the scale's batch norm (seed 0), then the same
# with the scale's random batches in place of the recipe's class-subsampled ones (seed 0), then the loss
# controls, the SimO runs' recipe and encoder (without batch norm) with SupCon in place of SimO, on the cosine
# (normalised) and on SimO's own similarity (unnormalised Euclidean), CONTROL_SEEDS seeds each; last, the
# tuning of SimO's orthogonality learning factor on a validation split (:data:`WEIGHTS`).
BN_OWN, BN_RANDOM = f"simo-D{DIM}-batch_norm-seed0", f"simo-D{DIM}-batch_norm-random_batches-seed0"
SUPCON = {"cosine": f"supcon-D{DIM}", SIMO_SIMILARITY: f"supcon-euclidean-D{DIM}"}  # similarity → run stem
LOSS_CONTROL = f"{SUPCON['cosine']}-seed0"  # the control whose confusions calibrate "separates the classes"
CONTROL_SEEDS = 3
# "The performance of SimO is notably influenced by the orthogonality learning factor [...] this factor often
# needs to be tuned specifically for each dataset and task" (Bouhsine et al. 2024, 'The Orthogonality Learning
# Factor'): a grid of factors of 3 about eq. 1's 1, each scored by the P@1 of a tenth of the training images
# held out (select_best's validation, every epoch), never by the test split.
WEIGHTS = (0.1, 0.3, 1.0, 3.0, 10.0)
VAL_FRACTION = 0.1
# One validation, at the last step (select_best always validates the last step): each weight is scored at
# the sweep's length, as the SimO arms train, not early-stopped.
VAL_ONCE = 10**9


def tuning_name(weight: float) -> str:
    """The tuning run of orthogonality weight ``weight``: ``simo-D16-w0.3-validation-seed0``."""
    return f"simo-D{DIM}-w{weight:g}-validation-seed0"


CONTROLS: dict[str, dict[str, Any]] = {
    BN_OWN: {},
    BN_RANDOM: {"sampler": "random"},
    **{
        f"{stem}-seed{seed}": {"loss": "supcon", "similarity": similarity, "norm": SIMO_NORM, "seed": seed}
        for similarity, stem in SUPCON.items()
        for seed in range(CONTROL_SEEDS)
    },
    **{
        tuning_name(w): {
            "norm": SIMO_NORM,
            "simo_orthogonality_weight": w,
            "select_best": True,
            "val_fraction": VAL_FRACTION,
            "val_every": VAL_ONCE,
        }
        for w in WEIGHTS
    },
}
DISTINGUISHABLE = 0.5  # a class is distinguishable when ≥ half its test items have a same-class 1-NN
COLLAPSE = 1  # "classes collapse": the ablation loses more than this many distinguishable classes
FULL, ABLATION = "SimO", "SimO without orthogonality (ablation)"
# The classes' names where the data set is known by its tag (Xiao et al. 2017; Krizhevsky 2009), for the text.
CLASS_NAMES: dict[str, tuple[str, ...]] = {
    "fashion_mnist": (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    "cifar10": ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"),
}


def class_structure(emb: dict[str, Any]) -> dict[str, Any]:
    """Per-class 1-NN recall, the classes distinguishable and those missed, the 1-NN confusion matrix, and
    mean |cos| between distinct class means.

    emb: ``embeddings.npz`` layout with the trained ``similarity``; 1-NN ranks as the run's report does
    (``geojax.similarity.retrieval_similarity``), so ``nn1`` is its P@1. ``confusion[i][j]``: test queries
    of class ``labels[i]`` whose nearest training item is of class ``labels[j]``.
    """
    similarity = similarity_lib.retrieval_similarity(str(emb["geometry"]), emb["similarity"])
    pred = nearest_labels(emb["query"], emb["reference"], emb["reference_labels"], similarity)
    y = emb["query_labels"]
    classes = np.unique(y)
    labels = np.unique(np.concatenate([y, emb["reference_labels"]]))
    recall = {int(c): float(np.mean(pred[y == c] == c)) for c in classes}
    confusion = np.zeros((len(labels), len(labels)), dtype=np.int64)
    np.add.at(confusion, (np.searchsorted(labels, y), np.searchsorted(labels, pred)), 1)
    means = np.stack([emb["reference"][emb["reference_labels"] == c].mean(0) for c in classes])
    cos = np.asarray(similarity_lib.cosine(jnp.asarray(means), jnp.asarray(means)))
    off = ~np.eye(len(classes), dtype=bool)
    return {
        "per_class_1nn_recall": recall,
        "distinguishable": int(sum(r >= DISTINGUISHABLE for r in recall.values())),
        "missed": [c for c, r in recall.items() if r < DISTINGUISHABLE],
        "classes": len(classes),
        "labels": labels.tolist(),
        "confusion": confusion.tolist(),
        "mean_abs_cos_class_means": float(np.abs(cos[off]).mean()),
        "nn1": float(np.mean(pred == y)),
    }


def structure(run: Run, emb: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's :func:`class_structure` (computed from its embeddings once and kept in its run directory:
    rundirs.run_analysis) with its P@1 and linear probe accuracy, also kept in its record; None when it
    diverged."""
    found = run_analysis(run, emb, "class_structure", class_structure)
    if found is None:
        return None
    found = {
        **found,
        "linear_probe_accuracy": run.metric("linear_probe_accuracy"),
        "p_at_1": run.metric("precision_at_1"),
    }
    run.extra["class_structure"] = found
    return found


def confusable_pair(
    confusion: list[list[int]], labels: list[int]
) -> tuple[tuple[int, int], tuple[float, float]]:
    """The pair of classes that 1-NN confuses most with each other: the largest share of a's test queries
    whose nearest neighbour is of class b plus the share of b's whose is of a (ties to the lower labels).
    Returns ((a, b), (share a → b, share b → a))."""
    c = np.asarray(confusion, dtype=np.float64)
    share = c / np.maximum(c.sum(1, keepdims=True), 1.0)
    mutual = share + share.T
    np.fill_diagonal(mutual, -1.0)
    i, j = sorted(np.unravel_index(int(np.argmax(mutual)), mutual.shape))
    return (int(labels[i]), int(labels[j])), (float(share[i, j]), float(share[j, i]))


def run(
    ctx: Context,
) -> tuple[
    dict[int, dict[str, list[tuple[Run, dict[str, Any] | None]]]], list[tuple[Run, dict[str, Any] | None]]
]:
    """Training: the 'simo_cifar10' preset (Bouhsine et al. 2024's loss on SupContrast's CIFAR-10 recipe) at
    each D of SIZES' simo_dims (the preset's D = 16, geojax's choice: the paper names none; and a smaller
    one where classes have less room to stay apart), with and without its orthogonality term, simo_seeds
    seeds each, the encoder without batch norm where the scale gives it one (:data:`SIMO_NORM`), and then the
    controls (:data:`CONTROLS`). Returns per D and variant the runs with their embeddings, and the
    control runs with theirs (none at a scale that keeps the encoder's own normalisation); embeddings are
    None where a finished run's directory holds none (its analyses are then read from its analysis.json)."""
    own = {"norm": SIMO_NORM} if ctx.scale.norm == "batch" else {}
    sizes = SIZES[ctx.scale.name]
    runs = {
        dim: {
            label: [
                train_recipe(
                    ctx,
                    f"{'simo' if orthogonality else 'simo-no-orthogonality'}-D{dim}-seed{seed}",
                    need_embeddings=False,
                    preset="simo_cifar10",
                    dim=dim,
                    similarity=SIMO_SIMILARITY,
                    seed=seed,
                    simo_orthogonality=orthogonality,
                    **own,
                )
                for seed in range(sizes.simo_seeds)
            ]
            for label, orthogonality in ((FULL, True), (ABLATION, False))
        }
        for dim in sizes.simo_dims
    }
    recipe = {"preset": "simo_cifar10", "dim": DIM, "similarity": SIMO_SIMILARITY, "seed": 0}
    controls = [
        train_recipe(ctx, name, need_embeddings=False, **{**recipe, **extra})
        for name, extra in CONTROLS.items()
        if own
    ]
    return runs, controls


def analyse(
    trained: dict[int, dict[str, list[tuple[Run, dict[str, Any] | None]]]],
    controls: Sequence[tuple[Run, dict[str, Any] | None]] = (),
    *,
    names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Per D and variant, over the seeds: distinguishable classes, classes missed (None for a diverged
    seed), 1NN, linear probe and mean |cos| of class means over the seeds that finished (each run's class
    structure is also kept in its record); the SupCon control's class structure ('control', where it was
    trained) and the classes' ``names`` ('class_names', None where the data set's are not known)."""
    details: dict[str, Any] = {}
    for dim, variants in trained.items():
        details[f"D={dim}"] = {}
        for label, runs in variants.items():
            found = []
            for run_, emb in runs:
                run_.extra["ablation"] = label == ABLATION
                found.append(structure(run_, emb))
            structures = [f for f in found if f is not None]
            details[f"D={dim}"][label] = {
                "distinguishable": [r["distinguishable"] for r in structures],
                "missed": [None if f is None else f["missed"] for f in found],
                "classes": structures[0]["classes"] if structures else 0,
                "p_at_1": [r["p_at_1"] for r in structures],
                "probe": [r["linear_probe_accuracy"] for r in structures],
                "abs_cos": [r["mean_abs_cos_class_means"] for r in structures],
            }
    supcon = {r.name: structure(r, e) for r, e in controls if r.name.startswith(tuple(SUPCON.values()))}
    if (found := supcon.get(LOSS_CONTROL)) is not None:
        details["control"] = {"run": LOSS_CONTROL, **{k: found[k] for k in CONTROL_KEYS}}
    details["class_names"] = None if names is None else list(names)
    return details | controlled([r for r, _ in controls])


def controlled(runs: Sequence[Run]) -> dict[str, Any]:
    """What the control runs show, from their records (a run read back from a stored result too): per
    similarity of the SupCon controls ('supcon'), the P@1 and mean |cos| of class means of each seed that
    finished (the latter where its class structure is recorded); per orthogonality weight of the tuning runs
    that finished ('tuning'), the best validation P@1 (select_best's, on the held-out tenth of the training
    images), its epoch and the test P@1 of those weights."""
    supcon = {}
    for similarity, stem in SUPCON.items():
        done = [r for r in runs if r.name.startswith(f"{stem}-seed") and r.report]
        supcon[similarity] = {
            "runs": [r.name for r in done],
            "p_at_1": [r.metric("precision_at_1") for r in done],
            "abs_cos": [
                r.extra["class_structure"]["mean_abs_cos_class_means"]
                for r in done
                if "class_structure" in r.extra
            ],
        }
    tuning = []
    for w in WEIGHTS:
        done = next((r for r in runs if r.name == tuning_name(w) and r.report), None)
        if done is not None and done.report.get("selection"):
            (best,) = done.report["selection"]
            tuning.append(
                {
                    "weight": w,
                    "val_p_at_1": best["precision_at_1"],
                    "epoch": best["epoch"],
                    "p_at_1": done.metric("precision_at_1"),
                }
            )
    return {"supcon": supcon, "tuning": tuning}


CONTROL_KEYS = ("distinguishable", "missed", "classes", "labels", "confusion", "p_at_1")  # kept in details


def _describe(v: dict[str, Any]) -> str:
    return (
        f"{'/'.join(map(str, v['distinguishable'])) or '–'} of {v['classes']} classes distinguishable, "
        f"1NN {mean_sd(v['p_at_1'])}, linear probe {mean_sd(v['probe'])}, "
        f"mean |cos| of class means {tables.fmt(mean(v['abs_cos']), 3)}"
    )


def numbers(result: dict[str, Any]) -> dict[str, Any]:
    """:func:`analyse`'s numbers from a stored reproduce_004 JSON (no training); a result stored before the
    SupCon control's class structure was recorded has none ('control' absent), nor the classes' names."""
    return {"class_names": CLASS_NAMES.get(data_tag(result["data"]["spec"])), **result["details"]}


def collapse_interval(full: list[int], ablation: list[int]) -> Interval:
    """The 95% t-interval of the classes the ablation loses (distinguishable with SimO − without, paired by
    training seed; rules.count_interval: undefined where every seed loses as many); undefined (NaN) when a
    seed is missing from either."""
    if len(full) != len(ablation):
        return math.nan, math.nan, math.nan
    return count_interval([float(f - a) for f, a in zip(full, ablation, strict=True)])


def separation(missed: Sequence[Sequence[int] | None], control: dict[str, Any] | None) -> str:
    """The verdict of "SimO separates the classes" from the classes each SimO seed misses (None: the seed
    diverged, and separates none) and the SupCon control's class structure (:func:`analyse`'s 'control').

    The one pair allowed is the control's most confused pair (:func:`confusable_pair`), as Bouhsine et al.
    2024 concede one (their Dog/Cat). HOLDS when every seed distinguishes every class outside that pair;
    FAILS when a seed misses a class outside it that the control distinguishes; INCONCLUSIVE when the seeds
    miss only classes the control misses too (the data at this scale do not separate them under SupCon
    either), when there is no control or it did not learn (P@1 under LEARNED × chance), or no seed.
    """
    if not control or not missed or not learned(control["p_at_1"], 1.0 / control["classes"]):
        return INCONCLUSIVE
    pair, _ = confusable_pair(control["confusion"], control["labels"])
    outside = [set(control["labels"] if m is None else m) - set(pair) for m in missed]
    if not any(outside):
        return HOLDS
    return FAILS if any(o - set(control["missed"]) for o in outside) else INCONCLUSIVE


def _name(c: int, names: Sequence[str] | None) -> str:
    return names[c] if names is not None and 0 <= c < len(names) else str(c)


def _separation_text(v: dict[str, Any], control: dict[str, Any] | None, names: Sequence[str] | None) -> str:
    """Our numbers of "SimO separates the classes": the SupCon control's separable classes and its allowed
    pair, then SimO's seeds, with the classes each misses outside that pair."""
    if not control:
        return f"no SupCon control's class structure recorded: no calibration; SimO: {_describe(v)}"
    (a, b), (ab, ba) = confusable_pair(control["confusion"], control["labels"])
    na, nb = _name(a, names), _name(b, names)
    missed = [
        "diverged" if m is None else ", ".join(_name(c, names) for c in sorted(set(m) - {a, b})) or "none"
        for m in v.get("missed", [])
    ]
    return (
        f"SupCon control ({control['run']}): {control['distinguishable']} of {control['classes']} classes "
        f"separable (missed: {', '.join(_name(c, names) for c in control['missed']) or 'none'}), P@1 "
        f"{mean_sd([control['p_at_1']])}; its most confused pair, the one allowed: {na}/{nb} ({na} → {nb} "
        f"{100 * ab:.1f} %, {nb} → {na} {100 * ba:.1f} % of their queries' 1-NN). SimO: {_describe(v)}; "
        f"missed outside {na}/{nb}, per seed: {' / '.join(missed) or '–'}"
    )


def _count_text(ci: Interval, seeds: int) -> str:
    no_interval = f"over {seeds} paired seeds, no interval: one seed, or every seed alike"
    text = value_text(ci, fmt="+.1f", over=f"{seeds} paired seeds", single=no_interval)
    return f"classes lost {text}"


def claims(details: dict[str, Any]) -> list[Claim]:
    """The verdicts, from :func:`analyse`'s numbers alone (two per embedding dimension)."""
    control, names = details.get("control"), details.get("class_names")
    out = []
    for key, found in details.items():
        if not key.startswith("D="):
            continue
        dim = key.removeprefix("D=")
        full, abl = found[FULL], found[ABLATION]
        drop = collapse_interval(full["distinguishable"], abl["distinguishable"])
        out += [
            Claim(
                claim=f"SimO separates the classes, but for one confusable pair (D={dim})",
                ours=_separation_text(full, control, names),
                paper='"Our results illustrate the formation of distinct, orthogonal class neighborhoods" '
                '(CIFAR-10; no embedding dimension, no accuracy figure); conceded: "our model struggled to '
                "separate the neighborhoods of Dog and Cat classes even though it learned from the 120,000th "
                "iteration to the 1 millionth iteration, despite having learned most other classes "
                'effectively"; "class representations remain distinct, even in lower dimensions"',
                source="Abstract; 'Sensitivity to Data Biases'; Conclusion",
                rule=f"every class outside one allowed pair is distinguishable (1-NN recall ≥ "
                f"{DISTINGUISHABLE}) in every seed (a diverged seed distinguishes none); the pair allowed is "
                "the SupCon control's most confused pair, as the paper concedes one (its Dog/Cat); a seed "
                "missing a class outside the pair that the control distinguishes: does not hold; seeds "
                "missing only classes the control misses too, no control, or a control that did not "
                f"learn: inconclusive (the control is one run: D = {DIM}, the first training seed)",
                verdict=separation(full.get("missed", []), control),
            ),
            Claim(
                claim=f"without the orthogonality term classes collapse (D={dim})",
                ours=_describe(abl) + "; " + _count_text(drop, len(abl["distinguishable"])),
                paper='"only 4 out of 10 classes from CIFAR-10 were distinguishable, with the remaining 6 '
                'classes grouped together" (no embedding dimension given)',
                source="'Ablation study'",
                rule=f"the ablation loses more than {COLLAPSE} class (a collapse merges at least two): the "
                f"95% t-interval of the classes lost, paired by seed, lies above {COLLAPSE} (below: does not "
                "hold); one seed, or the same count in every seed (a zero-width interval): inconclusive",
                verdict=above(drop, COLLAPSE),
            ),
            orthogonality_claim(dim, full, abl, details.get("supcon", {})),
        ]
    return out


ORTHOGONAL = "SimO's class neighbourhoods are orthogonal"  # the claim's words, before its dimension


def orthogonality_claim(dim: str, full: dict[str, Any], abl: dict[str, Any], supcon: dict[str, Any]) -> Claim:
    """Bouhsine et al. 2024's "formation of distinct, orthogonal class neighborhoods" (Abstract) as a
    comparison of mean |cos| between class means (0: orthogonal): SimO's against its ablation's (paired by
    seed) and against SupCon's on SimO's own similarity (Welch), both lower; SupCon on the cosine is reported
    beside it."""
    simo_cos, abl_cos = full.get("abs_cos", []), abl.get("abs_cos", [])
    paired = len(simo_cos) == len(abl_cos)
    vs_ablation = (
        t_interval([a - b for a, b in zip(abl_cos, simo_cos, strict=True)]) if paired else (math.nan,) * 3
    )
    control = supcon.get(SIMO_SIMILARITY, {}).get("abs_cos", [])
    vs_control = welch_interval(control, simo_cos)
    arms = {
        "SimO": simo_cos,
        "its ablation": abl_cos,
        f"SupCon on {SIMO_SIMILARITY}": control,
        "SupCon on the cosine": supcon.get("cosine", {}).get("abs_cos", []),
    }
    return Claim(
        claim=f"{ORTHOGONAL} (D={dim}: mean absolute cosine between class means)",
        ours="mean |cos| between class means (0: orthogonal), mean ± sd over seeds: "
        + ", ".join(f"{k} {_cos_text(v)}" for k, v in arms.items())
        + f"; ablation − SimO {_difference(vs_ablation, f'{len(simo_cos)} paired seeds')}; SupCon on "
        f"{SIMO_SIMILARITY} − SimO {_difference(vs_control, f'{len(control)} SupCon seeds (Welch)')}",
        paper='"Our results illustrate the formation of distinct, orthogonal class neighborhoods"; "each '
        'fiber corresponds to a specific class and is orthogonal to other fibers"',
        source="Abstract; 'Discussion and Limitations'",
        rule="SimO's class means are more nearly orthogonal than its ablation's and than those of SupCon on "
        "SimO's own similarity (the loss's control): the 95% t-interval of ablation − SimO mean |cos| "
        "(paired by seed) and Welch's 95% interval of SupCon − SimO both lie above 0 (either below 0: does "
        "not hold); no SupCon runs on that similarity, or one seed: inconclusive",
        verdict=every([above(vs_ablation, 0.0), above(vs_control, 0.0)]),
    )


def _difference(ci: Interval, over: str) -> str:
    return value_text(ci, fmt="+.3f", over=over, single="no interval: one seed", missing="– (no runs)")


def _cos_text(values: Sequence[float]) -> str:
    if not values:
        return "–"
    sd = f" ± {np.std(values, ddof=1):.3f}" if len(values) > 1 else ""
    return f"{np.mean(values):.3f}{sd} ({len(values)} seed{'s' if len(values) > 1 else ''})"


def control_note(
    controls: list[Run],
    simo: list[float],
    trials: Sequence[dict[str, Any]] = (),
    steps: int | None = None,
) -> str:
    """The controls against SimO's runs at D = 16 (their P@1 per seed, ``steps`` steps each), in a few
    sentences that say what each control changes and no more than its numbers show: the batch-norm controls
    (one seed each), the SupCon controls on the cosine and on SimO's own similarity, and the length (the
    recipe trials' base against the sweep's seed 0; ``trials``: rundirs.recipe_trials)."""
    p1 = {r.name: r.metric("precision_at_1") for r in controls}
    text = f"Controls (D = {DIM}):"
    if BN_OWN in p1 and BN_RANDOM in p1:
        own_steps = {r.name: r.steps for r in controls}
        lower = max(p1[BN_OWN], p1[BN_RANDOM]) < mean(simo) - ABOVE_BASELINE
        text += (
            " SimO on the scale's encoder with its batch norm (the first training seed) reaches P@1 "
            f"{mean_sd([p1[BN_OWN]])} with the recipe's class-subsampled batches of {BATCH} "
            f"({own_steps[BN_OWN]:,} steps) and "
            f"{mean_sd([p1[BN_RANDOM]])} with the scale's random batches of {RANDOM_BATCH} in their place "
            f"({own_steps[BN_RANDOM]:,} steps over the same epochs) ({BN_OWN}, {BN_RANDOM}), against "
            f"{mean_sd(simo)} without batch norm (`norm={SIMO_NORM}`, the SimO runs above)"
            + (
                f": with SimO's loss, batch norm goes with a P@1 more than {100 * ABOVE_BASELINE:g} points "
                "lower whichever the batches, so the SimO rows train without it (the paper scale keeps "
                "ResNet-18's batch norm, as the paper's recipe)."
                if lower
                else f"; with batch norm neither is more than {100 * ABOVE_BASELINE:g} points lower."
            )
        )
    supcon = controlled(controls)["supcon"]
    cosine, own = supcon["cosine"]["p_at_1"], supcon[SIMO_SIMILARITY]["p_at_1"]
    if cosine or own:
        reached = [
            f"{mean_sd(p)} on {what} ({len(p)} seed{'s' if len(p) > 1 else ''})"
            for p, what in (
                (cosine, "the cosine (normalised)"),
                (own, f"SimO's own {SIMO_SIMILARITY} (unnormalised)"),
            )
            if p
        ]
        text += (
            " SupCon in place of SimO, with the same recipe, encoder, batches and steps, reaches P@1 "
            + " and ".join(reached)
            + ". "
            + _loss_gap(own, simo)
        )
    return text + _length(simo, steps, trials)


BATCH = config.PRESETS["simo_cifar10"]["batch_size"]  # the recipe's class-subsampled batches
RANDOM_BATCH = CPU_RECIPE["batch_size"]  # the cpu scale's batches where they are drawn at random


def _loss_gap(own: list[float], simo: list[float]) -> str:
    """Whether the loss, on SimO's own similarity, accounts for the gap to SupCon: Welch's interval of
    SupCon − SimO P@1, or why it is not shown."""
    ci = welch_interval(own, simo)
    if math.isnan(ci[1]):
        return (
            f"The cosine control changes the similarity and the normalisation with the loss: which of them "
            f"accounts for its gap to SimO is shown only by SupCon on {SIMO_SIMILARITY} over seeds, which "
            "is not trained yet."
        )
    gap = interval_text(ci, len(own), over="SupCon seeds (Welch)")
    if ci[1] > 0:
        return f"On the same similarity SupCon − SimO is {gap}: the loss accounts for the gap."
    if ci[2] < 0:
        return f"On the same similarity SupCon − SimO is {gap}: SupCon is the lower, so the loss does not."
    return f"On the same similarity SupCon − SimO is {gap}: whether the loss accounts for a gap is not shown."


def _length(simo: list[float], steps: int | None, trials: Sequence[dict[str, Any]]) -> str:
    """The one control of the length: the recipe trials' base (the sweep's recipe, seed 0, at the trials'
    length) against the sweep's seed 0 at its ``steps``; '' where either is missing."""
    base = next((t for t in trials if t["name"] == "base"), None)
    if base is None or not simo or steps is None or base["steps"] == steps:
        return ""
    return (
        f" Length: SimO's first training seed reached P@1 {mean_sd([base['p_at_1']])} at {base['steps']:,} "
        f"steps (the recipe trials' base) and {mean_sd(simo[:1])} at {steps:,} (the sweep's run): "
        f"{steps / base['steps']:.3g} times the steps changed it by "
        f"{100 * (simo[0] - base['p_at_1']):+.1f} points (one seed each)."
    )


def findings(ctx: Context) -> Findings:
    """Train, analyse, judge; the claims with the tuning and run tables and notes."""
    trained, controls = run(ctx)
    details = analyse(trained, controls, names=CLASS_NAMES.get(data_tag(ctx.data)))
    control_runs = [r for r, _ in controls]
    simo = details.get(f"D={DIM}", {}).get(FULL, {}).get("p_at_1", [])
    steps = next((r.steps for r, _ in trained.get(DIM, {}).get(FULL, [])), None)
    probe_epochs = ctx.scale.probe_epochs or config.PRESETS["simo_cifar10"]["probe_epochs"]
    trials = recipe_trials(ctx.runs_dir)
    notes = [control_note(control_runs, simo, trials, steps)] if any(r.report for r in control_runs) else []
    return Findings(
        claims=claims(details),
        tables=detail_tables(details, ctx.runs),
        details=details,
        notes=[
            f"{RECIPE_NOTE} (D = 16, batch 128, AdamW: geojax's choices, the paper gives no embedding "
            "dimension, batch size or optimiser; batches of fewer than half the classes, SimCLR views, 100 "
            f"epochs, {_probe_text(probe_epochs)}) on {ctx.dataset.name}. " + scale_note(ctx),
            "The ablation is the same preset with simo_orthogonality=false (geojax.losses.simo with "
            "orthogonality=False: every o_ij replaced by 1); everything else is unchanged.",
            f"Retrieval and per-class recall rank by {SIMO_SIMILARITY} (SimO's own distance).",
            WEIGHT_NOTE,
            *notes,
        ],
    )


RECIPE_NOTE = "Recipe: the app's simo_cifar10 preset"  # how the recipe's note starts


def _probe_text(epochs: int) -> str:
    """The linear probe, as the recipe's note states it: the paper's one epoch, and this scale's."""
    return f"the paper's linear probe on the frozen encoder for one epoch ('Results'), here {epochs} epochs"


WEIGHT_NOTE = (
    "The paper's 'orthogonality learning factor', \"a hyperparameter that balances the trade-off between "
    "similarity and orthogonality objectives\" ('The Orthogonality Learning Factor'), has no value and no "
    "place in its eq. 1; geojax offers it as `simo_orthogonality_weight` (geojax.losses.simo's "
    "orthogonality_weight), a weight on the dissimilar pairs' term Σ_diff o_ij / (ε + Σ_diff d_ij), the term "
    "that makes the classes orthogonal, so that 1.0 is eq. 1 as written: the SimO runs above train with 1.0. "
    f"Its tuning runs ({', '.join(f'{w:g}' for w in WEIGHTS)}; the first training seed, D = {DIM}) hold out "
    f"{100 * VAL_FRACTION:g} % of the training images and score each weight by their P@1 after the last step "
    "(select_best's validation), never by the test split."
)


def chosen(tuning: list[dict[str, Any]]) -> dict[str, Any]:
    """The tuning run of the best validation P@1 (never the test split's)."""
    return max(tuning, key=lambda t: t["val_p_at_1"])


def detail_tables(details: dict[str, Any], runs: list[Run]) -> list[tuple[str, str]]:
    """The orthogonality weight's tuning (where a tuning run finished) and the runs."""
    tuning = details.get("tuning") or []
    if not tuning:
        return [("Runs", runs_table(runs))]
    table = records_table(
        [
            {
                "orthogonality weight": f"{t['weight']:g}",
                "validation P@1 (%)": mean_sd([t["val_p_at_1"]]),
                "best epoch": f"{t['epoch']:g}",
                "test P@1 of those weights (%)": mean_sd([t["p_at_1"]]),
            }
            for t in tuning
        ]
    )
    best = chosen(tuning)
    title = (
        f"SimO's orthogonality weight on a validation split (D = {DIM}, the first training seed): the best "
        f"of {len(tuning)} tried, {best['weight']:g}"
    )
    return [(title, table), ("Runs", runs_table(runs))]


TUNED_NOTE = "The weight the validation split chose"  # how tuned_note's line starts


def tuned_note(tuning: list[dict[str, Any]], runs: list[Run]) -> str | None:
    """The page's line on the weight the tuning chose, beside the bar the SimO claims need (raw-pixel 1-NN +
    ABOVE_BASELINE); None before a tuning run finished."""
    raw = next((r.report["baseline_raw_1nn"]["precision_at_1"] for r in runs if r.report), math.nan)
    if not tuning or not math.isfinite(raw):
        return None
    best = chosen(tuning)
    gap = 100 * (raw + ABOVE_BASELINE - best["p_at_1"])
    where = f"{gap:.1f} points short of" if gap > 0 else f"{-gap:.1f} points above"
    return (
        f"{TUNED_NOTE}, {best['weight']:g}, reached a test P@1 of {100 * best['p_at_1']:.1f} in its tuning "
        f"run, {where} raw-pixel 1-NN + {100 * ABOVE_BASELINE:g} points, the bar the SimO claims need; "
        "the SimO rows keep 1.0, eq. 1 as written."
    )


def judge(result: dict[str, Any], runs: list[Run]) -> tuple[list[Claim], list[tuple[str, str]]]:
    """The claims and tables of a stored reproduce_004 JSON under the current rules (no training): the
    controls' numbers and note are re-derived from the stored runs, its notes' earlier wording of the probe
    replaced and the weight's note added, each held once however often it is judged."""
    details = numbers(result) | controlled(runs)
    simo = details.get(f"D={DIM}", {}).get(FULL, {}).get("p_at_1", [])
    steps = next((r.steps for r in runs if r.name == f"simo-D{DIM}-seed0"), None)
    epochs = result["scale"].get("probe_epochs") or config.PRESETS["simo_cifar10"]["probe_epochs"]
    notes = [n for n in result["notes"] if not n.startswith(("Controls (D =", WEIGHT_NOTE[:40], TUNED_NOTE))]
    notes = [n.replace("a one-epoch linear probe", _probe_text(epochs)) for n in notes]
    controls = [r for r in runs if r.name in CONTROLS and r.report]
    trials = result["details"].get("recipe_trials") or []
    tuned = tuned_note(details.get("tuning") or [], runs)
    result["notes"] = (
        notes
        + [WEIGHT_NOTE]
        + ([tuned] if tuned else [])
        + ([control_note(controls, simo, trials, steps)] if controls else [])
    )
    return claims(details), detail_tables(details, runs)


# The runs each claim rests on (rules.gate): every seed of the arms worth having.
ARMS = {
    **{f"{ORTHOGONAL} (D={d}": Arms((f"simo-D{d}-seed*",)) for d in (16, 4)},
    **{
        f"SimO separates the classes, but for one confusable pair (D={d})": Arms((f"simo-D{d}-seed*",))
        for d in (16, 4)
    },
    **{
        f"without the orthogonality term classes collapse (D={d})": Arms(
            (f"simo-D{d}-seed*", f"simo-no-orthogonality-D{d}-seed*")
        )
        for d in (16, 4)
    },
}
