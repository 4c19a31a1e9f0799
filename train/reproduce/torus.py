"""Stowell 2026, torus embeddings: torusN ≈ sphere, torusC needs clipping at low D, and what quantisation
(8-bit, 1-bit, product quantisation of Table 3) costs in P@1."""

from __future__ import annotations

import math
import os
from typing import Any

import jax

from train import evaluate
from train.app import config
from train.helpers import plots
from train.reproduce.common import (
    EQUIVALENT,
    FAILS,
    HOLDS,
    LEARNED,
    PAPERS,
    Claim,
    Context,
    Findings,
    Run,
    above,
    every,
    fewer,
    learned,
    mean,
    mean_sd,
    point,
    provided,
    scale_note,
    t_interval,
    train_recipe,
    train_seeds,
    within,
)
from train.reproduce.render import raw_pixel_line, records_table, runs_table

PAPER = PAPERS["000"]
# Stowell 2026's recipe is the app's CIFAR preset of each geometry (config.STOWELL_2026), run on the chosen
# data with the scale's encoder and length (common.run_keys).
RECIPE = config.STOWELL_2026
NO_CLIP = 1e30  # a clamp at 1e30 = no clipping
PLOT = "reproduce_000_quantised"


def preset(geometry: str) -> str:
    """The app's preset of Stowell 2026's CIFAR-100 recipe for ``geometry``."""
    return f"supcon_{geometry}_cifar100"


def _low_bit(row: dict[str, Any]) -> bool:
    """Codes far below 8 bits per dimension: 1-bit, and PQ at ≤ 16 bits per vector."""
    return row["method"] == "1-bit" or (row["method"].startswith("PQ") and row["bits_per_vector"] <= 16)


def _change(drop: float, digits: int) -> str:
    """A P@1 drop (fraction) as the signed change in points: 0.012 → '−1.2', −0.004 → '+0.4'."""
    return f"{100 * -drop + 0.0:+.{digits}f}".replace("-", "−")


CONTROL = f"sphere-D{RECIPE['dim']}-crop_flip-seed0"  # the recipe control's run name


def run(ctx: Context) -> dict[str, Any]:
    """Training: sphere and torusN with the paper's recipe (scale.torus_seeds seeds each), the recipe control
    (at a scale with its own small encoder), and torusC at each of scale.unstable_dims with and without
    clipping. Returns the runs (with the embeddings of the sphere / torusN runs)."""
    s = ctx.scale
    main: dict[str, list[tuple[Run, dict[str, Any] | None]]] = {
        geometry: train_seeds(ctx, f"{geometry}-D{RECIPE['dim']}", s.torus_seeds, preset=preset(geometry))
        for geometry in ("sphere", "torus_n")
    }
    # The recipe control at a small-encoder scale that trains the paper's own recipe: the sphere recipe (seed
    # 0) with ±2 px crops and flips in place of its SimCLR views, which tells a short run's augmentations
    # apart from the geometry and loss (a scale with a recipe of its own trains every arm with those views).
    control = None
    if s.encoder is not None and s.recipe is None:
        control = train_recipe(ctx, CONTROL, preset=preset("sphere"), augment="crop_flip")[0]
    unstable: dict[tuple[int, str], list[Run]] = {}
    for dim in s.unstable_dims:
        for label, clip in (("clip 100", RECIPE["clip"]), ("no clip", NO_CLIP)):
            unstable[(dim, label)] = [
                train_recipe(
                    ctx,
                    f"torus_c-D{dim}-{label.replace(' ', '')}-seed{seed}",
                    preset=preset("torus_c"),
                    dim=dim,
                    clip=clip,
                    steps=s.unstable_steps,
                    log_every=1,
                    seed=seed,
                )[0]
                for seed in range(s.unstable_seeds)
            ]
    return {"main": main, "unstable": unstable, "control": control}


RUN_STATES = (
    f"A run 'diverged' when its loss became non-finite; it 'failed to learn' when it finished with a P@1 "
    f"below {LEARNED:g}× chance; the two are counted apart."
)
MIN_FAILURES = 2  # "unstable even with clipping": at least this many clipped runs fail (one may be a fluke)


def stability_row(
    dim: int,
    label: str,
    p_at_1_runs: list[float],
    chance: float,
    *,
    steps_over_100: int,
    max_grad_norm: float,
) -> dict[str, Any]:
    """One (D, clipping) row: its runs' P@1 (NaN where a run diverged) split into diverged, failed to learn
    (finite P@1 below LEARNED × ``chance``) and learned, with the logged gradient norms."""
    p = [math.nan if v is None else float(v) for v in p_at_1_runs]
    diverged = sum(math.isnan(v) for v in p)
    learned_runs = sum(learned(v, chance) for v in p)
    return {
        "D": dim,
        "clipping": label,
        "runs": len(p),
        "diverged": diverged,
        "failed_to_learn": len(p) - diverged - learned_runs,
        "learned": learned_runs,
        "p_at_1": mean(p),
        "steps_over_100": steps_over_100,
        "max_grad_norm": max_grad_norm,
        "p_at_1_runs": p,
    }


def stability(unstable: dict[tuple[int, str], list[Run]], chance: float) -> list[dict[str, Any]]:
    """:func:`stability_row` per (D, clipping) of the torusC runs."""
    return [
        stability_row(
            dim,
            label,
            [r.metric("precision_at_1") for r in runs],
            chance,
            steps_over_100=sum(r.steps_over_100 or 0 for r in runs),
            max_grad_norm=max((r.max_grad_norm or 0.0) for r in runs),
        )
        for (dim, label), runs in unstable.items()
    ]


def stability_totals(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """:func:`stability_row`s summed over the dimensions, per clipping setting."""
    keys = ("runs", "diverged", "failed_to_learn", "learned")
    return {
        label: {
            **{k: sum(r[k] for r in rows if r["clipping"] == label) for k in keys},
            "p_at_1": mean([p for r in rows if r["clipping"] == label for p in r["p_at_1_runs"]]),
        }
        for label in ("clip 100", "no clip")
    }


def quantisation_drops(quant: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """From ``train.evaluate.quantised_report``s: each geometry's P@1 drop at 8 bits, and at 1 bit and the
    low-bit PQ codes (:func:`_low_bit`)."""
    drops = {}
    for rep in quant:
        rows = {row["method"]: row for row in rep["rows"]}
        base = rows["float32"]["p_at_1"]
        drops[rep["geometry"]] = {
            name: base - row["p_at_1"] for name, row in rows.items() if row["p_at_1"] is not None
        }
    eight = {g: d["8-bit"] for g, d in drops.items()}
    low = {
        rep["geometry"]: {
            row["method"]: drops[rep["geometry"]][row["method"]]
            for row in rep["rows"]
            if row["p_at_1"] is not None and _low_bit(row)
        }
        for rep in quant
    }
    return eight, low


def _numbers(
    p1: dict[str, list[float]],
    rows: list[dict[str, Any]],
    quant: list[dict[str, Any]],
    *,
    dims: list[int],
    steps: int,
    epochs: float,
    chance: float,
) -> dict[str, Any]:
    """What the claims are judged on, from the P@1 per geometry and seed, the stability rows and the
    quantised reports."""
    deltas = [t - sp for t, sp in zip(p1["torus_n"], p1["sphere"], strict=True)]
    eight, low = quantisation_drops(quant)
    return {
        "p_at_1": p1,
        "deltas": deltas,  # paired by training seed: P@1(torusN) − P@1(sphere)
        "gap": t_interval(deltas),
        "stability": rows,
        "totals": stability_totals(rows),
        "quantised": quant,
        "quantised_p_at_1": {
            rep["geometry"]: next(r["p_at_1"] for r in rep["rows"] if r["method"] == "float32")
            for rep in quant
        },
        "eight_bit_drop": eight,
        "low_bit_drop": low,
        "dims": dims,
        "steps": steps,
        "epochs": epochs,
        "chance": chance,
    }


def analyse(ctx: Context, trained: dict[str, Any]) -> dict[str, Any]:
    """The numbers behind the claims: P@1 per geometry and seed, the paired torusN − sphere difference with
    its t interval, torusC's stability per D and clipping, and the quantised reports of each geometry's first
    seed (drawn to the plot)."""
    main = trained["main"]
    chance = 1.0 / ctx.dataset.num_classes
    key = jax.random.key(0)
    quant = []
    for i, geometry in enumerate(("sphere", "torus_n")):
        first, emb = main[geometry][0]
        if emb is None:
            continue
        rep = evaluate.quantised_report(**emb, key=jax.random.fold_in(key, i), pq_iters=ctx.scale.pq_iters)
        rep["run"] = first.name
        quant.append(rep)
    first = main["sphere"][0][0]
    return _numbers(
        {g: [r.metric("precision_at_1") for r, _ in runs] for g, runs in main.items()},
        stability(trained["unstable"], chance),
        quant,
        dims=list(ctx.scale.unstable_dims),
        steps=first.steps,
        epochs=first.epochs,
        chance=chance,
    )


def numbers(result: dict[str, Any]) -> dict[str, Any]:
    """:func:`analyse`'s numbers from a stored reproduce_000 JSON (no training)."""
    d = result["details"]
    chance = 1.0 / result["data"]["classes"]
    rows = [
        stability_row(
            r["D"],
            r["clipping"],
            r["p_at_1_runs"],
            chance,
            steps_over_100=r["steps_over_100"],
            max_grad_norm=r["max_grad_norm"],
        )
        for r in d["stability"]
    ]
    p1 = {g: [math.nan if v is None else v for v in vs] for g, vs in d["p_at_1"].items()}
    first = next(r for r in result["runs"] if r["name"].startswith("sphere"))
    return _numbers(
        p1,
        rows,
        d["quantised"],
        dims=sorted({r["D"] for r in rows}),
        steps=first["steps"],
        epochs=first.get("epochs", d["recipe"].get("epochs", math.nan)),
        chance=chance,
    )


def _stability_text(totals: dict[str, dict[str, float]]) -> str:
    return "; ".join(
        f"{k}: {v['diverged']} diverged, {v['failed_to_learn']} failed to learn, {v['learned']} learned "
        f"of {v['runs']}"
        for k, v in totals.items()
    )


def claims(n: dict[str, Any]) -> list[Claim]:
    """The verdicts, from :func:`analyse`'s numbers alone."""
    p1, deltas, totals, chance = n["p_at_1"], n["deltas"], n["totals"], n["chance"]
    gap, gap_lo, gap_hi = n["gap"]
    eight, low, float_p1 = n["eight_bit_drop"], n["low_bit_drop"], n["quantised_p_at_1"]
    dims = "/".join(map(str, n["dims"]))
    steps, epochs = n["steps"], n["epochs"]
    clip, free = totals["clip 100"], totals["no clip"]
    main_learned = all(learned(v, chance) for vs in p1.values() for v in vs)
    # A claim about stability needs runs that learn: at least half of the clipped runs.
    clipped_learn = 2 * clip["learned"] >= clip["runs"] > 0
    quant_learned = bool(float_p1) and all(learned(v, chance) for v in float_p1.values())
    stability_ours = _stability_text(totals) + " (per D in the table below)"
    need = f"needs at least half of the clipped runs to learn (P@1 ≥ {LEARNED:g}× chance), else inconclusive"
    return [
        Claim(
            claim="torusN ≈ sphere (P@1)",
            ours=f"sphere {mean_sd(p1['sphere'])}, torusN {mean_sd(p1['torus_n'])}; Δ {100 * gap:+.1f} pts, "
            f"95% CI [{100 * gap_lo:+.1f}, {100 * gap_hi:+.1f}] over {len(deltas)} paired seeds "
            f"(D={RECIPE['dim']}, KoLeo {RECIPE['koleo']}, {steps} steps = {epochs:.3g} epochs)",
            paper="no number: hypersphere generally strongest, torusN competitive (CIFAR-100, D=16 among "
            "others, 100 epochs, several KoLeo weights)",
            source="Fig. 3; §5 'Results using CIFAR'",
            rule=f"equivalence: the 95% t-interval of the paired Δ lies within ±{100 * EQUIVALENT:g} pts "
            f"(wholly outside: does not hold); every seed must learn (P@1 ≥ {LEARNED:g}× chance)",
            verdict=provided(within(n["gap"], EQUIVALENT), main_learned),
        ),
        Claim(
            claim=f"clipping prevents torusC's divergence at low D (D={dims}, KoLeo {RECIPE['koleo']})",
            ours=stability_ours,
            paper="no number: gradient clipping helped to stabilise torusC (with the clip at 100)",
            source="§3.1; §5 'Experiment 1'",
            rule="fewer runs diverge (non-finite loss) with clip 100 than without: Fisher's exact test, "
            f"one-sided p < 0.05 (no fewer: does not hold); {need}",
            verdict=provided(
                fewer(clip["diverged"], clip["runs"], free["diverged"], free["runs"]), clipped_learn
            ),
        ),
        Claim(
            claim=f"torusC needs clipping at low D (D={dims}, KoLeo {RECIPE['koleo']})",
            ours=stability_ours,
            paper="no number: torusC unstable at low D; some runs diverged or failed to learn even with "
            "clip 100",
            source="Fig. 3; §3.1, §5 'Experiment 1'",
            rule="fewer runs diverge or fail to learn with clip 100 than without: Fisher's exact test, "
            f"one-sided p < 0.05 (no fewer: does not hold); {need}",
            verdict=provided(
                fewer(
                    clip["runs"] - clip["learned"], clip["runs"], free["runs"] - free["learned"], free["runs"]
                ),
                clipped_learn,
            ),
        ),
        Claim(
            claim=f"torusC is unstable at low D even with clipping (D={dims})",
            ours=f"clip 100: {clip['diverged']} diverged, {clip['failed_to_learn']} failed to learn, "
            f"{clip['learned']} learned of {clip['runs']}",
            paper="no number: some runs diverged, and some failed to learn, despite gradient clipping",
            source="§5 'Experiment 1'",
            rule=f"at least {MIN_FAILURES} clipped runs diverge or fail to learn; {need}",
            verdict=provided(
                HOLDS if clip["runs"] - clip["learned"] >= MIN_FAILURES else FAILS, clipped_learn
            ),
        ),
        Claim(
            claim="8-bit costs < 1 pt (P@1)",
            ours=", ".join(f"{g}: {_change(d, 2)} pts" for g, d in eight.items()) or "–",
            paper="no number: 8-bit has only a mild impact (CIFAR-100)",
            source="Fig. 4; Table 3 (8-bit = 8·D bits, D/2 codes for torusN)",
            rule="8-bit P@1 − float P@1 > −1 pt for every geometry (one run each: the first seed's); the run "
            f"must learn (P@1 ≥ {LEARNED:g}× chance)",
            verdict=provided(every([above(point(-d), -0.01) for d in eight.values()]), quant_learned),
        ),
        Claim(
            claim="1-bit and low-bit PQ degrade (P@1)",
            ours="; ".join(
                f"{g}: " + ", ".join(f"{m} {_change(d, 1)}" for m, d in rows.items())
                for g, rows in low.items()
            )
            or "–",
            paper="no number: 1-bit and high-compression PQ degrade P@1 to varying extents",
            source="Fig. 4; Table 3",
            rule="1-bit and every PQ code at ≤ 16 bits/vector lose > 1 pt of P@1, for every geometry "
            f"(the first seed's run); the run must learn (P@1 ≥ {LEARNED:g}× chance)",
            verdict=provided(
                every([above(point(d), 0.01) for rows in low.values() for d in rows.values()]), quant_learned
            ),
        ),
    ]


def detail_tables(n: dict[str, Any], runs: list[Run]) -> list[tuple[str, str]]:
    """The stability table per D and clipping, the runs (with the raw-pixel row), the quantised retrieval."""
    return [
        (
            "torusC with and without clipping, per dimension",
            records_table(
                [
                    {
                        "D": v["D"],
                        "clipping": v["clipping"],
                        "runs": v["runs"],
                        "diverged": v["diverged"],
                        "failed to learn": v["failed_to_learn"],
                        "learned": v["learned"],
                        "P@1 (%)": mean_sd(v["p_at_1_runs"]),
                        "steps with ‖g‖ > 100": v["steps_over_100"],
                        "max ‖g‖": f"{v['max_grad_norm']:.3g}",
                    }
                    for v in n["stability"]
                ]
            ),
        ),
        ("Runs", runs_table(runs)),
        (
            f"Quantised retrieval (train.evaluate, {PAPER.citation} Table 3 codes; the first seed of each "
            "geometry)",
            evaluate.markdown_table(n["quantised"]) + raw_pixel_line(runs),
        ),
    ]


def findings(ctx: Context) -> Findings:
    """Train, analyse, judge; the claims with their tables, details, plot and notes."""
    s = ctx.scale
    trained = run(ctx)
    n = analyse(ctx, trained)
    quant = n["quantised"]
    plot = ctx.file(PLOT, "png")
    if quant:
        plots.plot_quantised(quant, os.path.join(ctx.out, plot))
    gap, gap_lo, gap_hi = n["gap"]
    steps, epochs = n["steps"], n["epochs"]
    return Findings(
        claims=claims(n),
        tables=detail_tables(n, ctx.runs),
        details={
            "stability": n["stability"],
            "stability_totals": n["totals"],
            "quantised": quant,
            "p_at_1": n["p_at_1"],
            "torus_n_minus_sphere": {"per_seed": n["deltas"], "mean": gap, "ci95": [gap_lo, gap_hi]},
            "recipe": {
                "presets": [preset(g) for g in ("sphere", "torus_n", "torus_c")],
                "steps": steps,
                "epochs": epochs,
            },
        },
        plots=[plot] if quant else [],
        notes=[
            f"Recipe: the app's {preset('sphere')} / {preset('torus_n')} / {preset('torus_c')} presets "
            f"({PAPER.citation}'s public code: "
            + ", ".join(f"{k}={v}" for k, v in RECIPE.items())
            + f"), on {ctx.dataset.name}: {steps} steps = {epochs:.3g} epochs (the paper: 100). "
            + scale_note(ctx)
            + f" torusC runs: the same recipe at D ∈ {{{', '.join(map(str, s.unstable_dims))}}}, "
            f"{s.unstable_steps} steps (the paper places the instabilities at the start of training, §3.1), "
            "every step's gradient norm logged; 'no clip' clamps at 1e30.",
            RUN_STATES,
            *([control_note(trained["control"], n["p_at_1"]["sphere"])] if trained["control"] else []),
        ],
    )


def control_note(control: Run, sphere: list[float]) -> str:
    """The recipe control against the recipe's sphere runs, in a few sentences."""
    return (
        f"Recipe control: run {control.name}, the sphere recipe with ±2 px crops and flips "
        f"(`augment=crop_flip`) in place of its SimCLR views, same steps, seed 0: P@1 "
        f"{mean_sd([control.metric('precision_at_1')])} against the recipe's {mean_sd(sphere)}. Both are "
        f"runs of {control.epochs:.3g} epochs of a recipe made for 100 (SGD at 0.1 without momentum); the "
        "sphere and the loss are not what holds them near the raw pixels: Stowell 2026's objective on the "
        "sphere at D = 16 with KoLeo at 0.1, trained by geojax's CPU recipe (`preset=supcon_sphere_cpu`: "
        "AdamW, one crop_flip view, 12 epochs), reaches P@1 above 90 on Fashion-MNIST "
        "(benchmarks/results/cpu_recipe.json)."
    )


def judge(result: dict[str, Any], runs: list[Run]) -> tuple[list[Claim], list[tuple[str, str]]]:
    """The claims and tables of a stored reproduce_000 JSON under the current rules (no training); its notes'
    old definition of a failed run and its recipe-control note are replaced by the current ones, which it
    holds once however often it is judged."""
    n = numbers(result)
    old = [note for note in result["notes"] if note.startswith(("A run 'failed'", "Recipe control:"))]
    old.append(RUN_STATES)
    control = [r for r in runs if r.name == CONTROL and r.report]
    result["notes"] = [note for note in result["notes"] if note not in old] + [RUN_STATES]
    result["notes"] += [control_note(control[0], n["p_at_1"]["sphere"])] if control else []
    return claims(n), detail_tables(n, runs)
