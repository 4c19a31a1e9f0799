"""Bouhsine et al. 2024, the SimO loss: it separates the classes, and without its orthogonality term
(the paper's ablation) classes collapse."""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from geojax import similarity as similarity_lib
from train.helpers import tables
from train.reproduce.common import (
    ABOVE_BASELINE,
    FAILS,
    HOLDS,
    PAPERS,
    Claim,
    Context,
    Findings,
    Run,
    above,
    mean,
    mean_sd,
    nearest_labels,
    scale_note,
    t_interval,
    train_recipe,
)
from train.reproduce.render import runs_table

PAPER = PAPERS["004"]
SIMO_SIMILARITY = "neg_euclidean"  # SimO is defined on Euclidean distances; retrieval ranks by them too
# At a scale whose small encoder carries batch norm (the cpu scale), SimO's runs train that encoder without
# it: SimO's loss on a batch-norm encoder collapses there (the control run below keeps batch norm and shows
# it), with class-subsampled batches and with random ones alike.
SIMO_NORM = "none"
DIM = 16  # the preset's D
# The controls, at D = 16 and seed 0 (run name → overrides): SimO with the scale's batch norm, then the same
# with random batches in place of the recipe's class-subsampled ones, then the loss control: the SimO runs'
# recipe and encoder (without batch norm) with SupCon on the cosine in place of SimO.
BN_OWN, BN_RANDOM, LOSS_CONTROL = (
    f"simo-D{DIM}-batch_norm-seed0",
    f"simo-D{DIM}-batch_norm-random_batches-seed0",
    f"supcon-D{DIM}-seed0",
)
CONTROLS = {
    BN_OWN: {},
    BN_RANDOM: {"sampler": "random"},
    LOSS_CONTROL: {"loss": "supcon", "similarity": "cosine", "norm": SIMO_NORM},
}
DISTINGUISHABLE = 0.5  # a class is distinguishable when ≥ half its test items have a same-class 1-NN
COLLAPSE = 1  # "classes collapse": the ablation loses more than this many distinguishable classes
FULL, ABLATION = "SimO", "SimO without orthogonality (ablation)"


def class_structure(emb: dict[str, Any]) -> dict[str, Any]:
    """Per-class 1-NN recall, distinguishable classes and mean |cos| between distinct class means.

    emb: ``embeddings.npz`` layout with the trained ``similarity``; 1-NN ranks as the run's report does
    (``geojax.similarity.retrieval_similarity``), so ``nn1`` is its P@1.
    """
    similarity = similarity_lib.retrieval_similarity(str(emb["geometry"]), emb["similarity"])
    pred = nearest_labels(emb["query"], emb["reference"], emb["reference_labels"], similarity)
    y = emb["query_labels"]
    classes = np.unique(y)
    recall = {int(c): float(np.mean(pred[y == c] == c)) for c in classes}
    means = np.stack([emb["reference"][emb["reference_labels"] == c].mean(0) for c in classes])
    cos = np.asarray(similarity_lib.cosine(jnp.asarray(means), jnp.asarray(means)))
    off = ~np.eye(len(classes), dtype=bool)
    return {
        "per_class_1nn_recall": recall,
        "distinguishable": int(sum(r >= DISTINGUISHABLE for r in recall.values())),
        "classes": len(classes),
        "mean_abs_cos_class_means": float(np.abs(cos[off]).mean()),
        "nn1": float(np.mean(pred == y)),
    }


def run(ctx: Context) -> tuple[dict[int, dict[str, list[tuple[Run, dict[str, Any] | None]]]], list[Run]]:
    """Training: the 'simo_cifar10' preset (Bouhsine et al. 2024's loss on SupContrast's CIFAR-10 recipe) at
    each D of scale.simo_dims (the preset's D = 16, geojax's choice: the paper names none; and a smaller one
    where classes have less room to stay apart), with and without its orthogonality term, scale.simo_seeds
    seeds each, the encoder without batch norm where the scale gives it one (:data:`SIMO_NORM`), and then the
    controls (:data:`CONTROLS`). Returns per D and variant the runs with their embeddings, and the
    control runs (none at a scale that keeps the encoder's own normalisation)."""
    own = {"norm": SIMO_NORM} if ctx.scale.norm == "batch" else {}
    runs = {
        dim: {
            label: [
                train_recipe(
                    ctx,
                    f"{'simo' if orthogonality else 'simo-no-orthogonality'}-D{dim}-seed{seed}",
                    preset="simo_cifar10",
                    dim=dim,
                    similarity=SIMO_SIMILARITY,
                    seed=seed,
                    simo_orthogonality=orthogonality,
                    **own,
                )
                for seed in range(ctx.scale.simo_seeds)
            ]
            for label, orthogonality in ((FULL, True), (ABLATION, False))
        }
        for dim in ctx.scale.simo_dims
    }
    recipe = {"preset": "simo_cifar10", "dim": DIM, "similarity": SIMO_SIMILARITY, "seed": 0}
    controls = [train_recipe(ctx, name, **{**recipe, **extra})[0] for name, extra in CONTROLS.items() if own]
    return runs, controls


def analyse(trained: dict[int, dict[str, list[tuple[Run, dict[str, Any] | None]]]]) -> dict[str, dict]:
    """Per D and variant, over the seeds that finished: distinguishable classes, 1NN, linear probe and mean
    |cos| of class means (each run's class structure is also kept in its record)."""
    details: dict[str, dict[str, dict[str, Any]]] = {}
    for dim, variants in trained.items():
        details[f"D={dim}"] = {}
        for label, runs in variants.items():
            structures = []
            for run_, emb in runs:
                run_.extra["ablation"] = label == ABLATION
                if emb is None:
                    continue
                structure = class_structure(emb)
                structure["linear_probe_accuracy"] = run_.metric("linear_probe_accuracy")
                structure["p_at_1"] = run_.metric("precision_at_1")
                run_.extra["class_structure"] = structure
                structures.append(structure)
            details[f"D={dim}"][label] = {
                "distinguishable": [r["distinguishable"] for r in structures],
                "classes": structures[0]["classes"] if structures else 0,
                "p_at_1": [r["p_at_1"] for r in structures],
                "probe": [r["linear_probe_accuracy"] for r in structures],
                "abs_cos": [r["mean_abs_cos_class_means"] for r in structures],
            }
    return details


def _describe(v: dict[str, Any]) -> str:
    return (
        f"{'/'.join(map(str, v['distinguishable'])) or '–'} of {v['classes']} classes distinguishable, "
        f"1NN {mean_sd(v['p_at_1'])}, linear probe {mean_sd(v['probe'])}, "
        f"mean |cos| of class means {tables.fmt(mean(v['abs_cos']), 3)}"
    )


def numbers(result: dict[str, Any]) -> dict[str, dict]:
    """:func:`analyse`'s numbers from a stored reproduce_004 JSON (no training)."""
    return result["details"]


def collapse_interval(full: list[int], ablation: list[int]) -> tuple[float, float, float]:
    """The 95% t-interval of the classes the ablation loses (distinguishable with SimO − without, paired by
    training seed); undefined (NaN) when a seed is missing from either."""
    if len(full) != len(ablation):
        return math.nan, math.nan, math.nan
    return t_interval([float(f - a) for f, a in zip(full, ablation, strict=True)])


def claims(details: dict[str, dict]) -> list[Claim]:
    """The verdicts, from :func:`analyse`'s numbers alone (two per embedding dimension)."""
    out = []
    for key, found in details.items():
        dim = key.removeprefix("D=")
        full, abl = found[FULL], found[ABLATION]
        drop = collapse_interval(full["distinguishable"], abl["distinguishable"])
        out += [
            Claim(
                claim=f"SimO separates the classes (D={dim})",
                ours=_describe(full),
                paper="CIFAR-10: distinct, orthogonal class neighbourhoods (the text gives no embedding "
                "dimension and no accuracy figure)",
                source="abstract; 'Results', Figs. 2-3",
                rule=f"every class distinguishable (1-NN recall ≥ {DISTINGUISHABLE}) in every seed",
                verdict=HOLDS
                if full["distinguishable"] and min(full["distinguishable"]) == full["classes"]
                else FAILS,
            ),
            Claim(
                claim=f"without the orthogonality term classes collapse (D={dim})",
                ours=_describe(abl)
                + f"; classes lost {drop[0]:+.1f}, 95% CI [{drop[1]:+.1f}, {drop[2]:+.1f}] "
                f"over {len(abl['distinguishable'])} paired seeds",
                paper="CIFAR-10: only 4 of 10 classes distinguishable, the other 6 grouped together "
                "(the text gives no embedding dimension)",
                source="'Ablation study'",
                rule=f"the ablation loses more than {COLLAPSE} class (a collapse merges at least two): the "
                f"95% t-interval of the classes lost, paired by seed, lies above {COLLAPSE} (below: does not "
                "hold)",
                verdict=above(drop, COLLAPSE),
            ),
        ]
    return out


def control_note(controls: list[Run], simo: list[float]) -> str:
    """The controls against SimO's runs at D = 16, in a few sentences whose conclusions follow the numbers."""
    p1 = {r.name: r.metric("precision_at_1") for r in controls}
    text = f"Controls (D = {DIM}, seed 0):"
    if BN_OWN in p1 and BN_RANDOM in p1:
        collapse = max(p1[BN_OWN], p1[BN_RANDOM]) < mean(simo) - ABOVE_BASELINE
        text += (
            f" SimO on the scale's encoder with its batch norm reaches P@1 {mean_sd([p1[BN_OWN]])} with the "
            f"recipe's class-subsampled batches and {mean_sd([p1[BN_RANDOM]])} with random batches "
            f"({BN_OWN}, {BN_RANDOM}), against {mean_sd(simo)} without batch norm (`norm={SIMO_NORM}`, the "
            "SimO runs above)"
            + (
                ": batch norm under SimO's loss, not the batches, makes the collapse, so the SimO rows train "
                "without it (the paper scale keeps ResNet-18's batch norm, as the paper's recipe)."
                if collapse
                else "; batch norm does not explain the SimO rows."
            )
        )
    if LOSS_CONTROL in p1:
        gap = p1[LOSS_CONTROL] - mean(simo)
        text += (
            f" The same recipe and encoder with SupCon on the cosine in place of SimO ({LOSS_CONTROL}) "
            f"reaches P@1 {mean_sd([p1[LOSS_CONTROL]])}"
            + (
                f", {100 * gap:.1f} points above SimO's: the loss, not the encoder, the batches or the "
                "length, accounts for that gap."
                if gap > ABOVE_BASELINE
                else f", within {100 * ABOVE_BASELINE:g} points of SimO's or below: the recipe at this "
                "length, not SimO's loss, holds the rows where they are."
            )
        )
    return text


def findings(ctx: Context) -> Findings:
    """Train, analyse, judge; the claims with the runs and notes."""
    trained, controls = run(ctx)
    details = analyse(trained)
    simo = details.get(f"D={DIM}", {}).get(FULL, {}).get("p_at_1", [])
    return Findings(
        claims=claims(details),
        tables=[("Runs", runs_table(ctx.runs))],
        details=details,
        notes=[
            "Recipe: the app's simo_cifar10 preset (D = 16, batch 128, AdamW: geojax's choices, the paper "
            "gives no embedding dimension, batch size or optimiser; batches of fewer than half the classes, "
            f"SimCLR views, 100 epochs, a one-epoch linear probe) on {ctx.dataset.name}. " + scale_note(ctx),
            "The ablation is the same preset with simo_orthogonality=false (geojax.losses.simo with "
            "orthogonality=False: every o_ij replaced by 1); everything else is unchanged.",
            f"Retrieval and per-class recall rank by {SIMO_SIMILARITY} (SimO's own distance).",
            *([control_note(controls, simo)] if any(r.report for r in controls) else []),
        ],
    )


def judge(result: dict[str, Any], runs: list[Run]) -> tuple[list[Claim], list[tuple[str, str]]]:
    """The claims and tables of a stored reproduce_004 JSON under the current rules (no training); its
    controls' note is re-derived from the control runs, held once however often it is judged."""
    details = numbers(result)
    result["notes"] = [note for note in result["notes"] if not note.startswith("Controls (D =")]
    controls = [r for r in runs if r.name in CONTROLS and r.report]
    simo = details.get(f"D={DIM}", {}).get(FULL, {}).get("p_at_1", [])
    result["notes"] += [control_note(controls, simo)] if controls else []
    return claims(details), [("Runs", runs_table(runs))]
