"""Stowell 2026, torus embeddings: torusN ≈ sphere, torusC needs clipping at low D, and what quantisation
(8-bit, 1-bit, product quantisation of Table 3) costs in P@1."""

from __future__ import annotations

import os
from typing import Any

import jax

from train import config, evaluate, plots, tables
from train.reproduce.common import (
    PAPERS,
    Claim,
    Context,
    Findings,
    Run,
    mean,
    mean_sd,
    scale_note,
    t_interval,
    train_recipe,
    train_seeds,
)
from train.reproduce.render import records_table, runs_table

PAPER = PAPERS["000"]
# Stowell 2026's recipe is the app's CIFAR preset of each geometry (config.STOWELL_2026), run on the chosen
# data with the scale's encoder and length (common.run_keys).
RECIPE = config.STOWELL_2026
NO_CLIP = 1e30  # a clamp at 1e30 = no clipping
EQUIVALENT = 0.02  # torusN ≈ sphere: P@1 within 2 points
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


def matches(diff: float, lo: float, hi: float, margin: float = EQUIVALENT) -> bool:
    """The torusN ≈ sphere rule on a difference with its confidence interval [lo, hi]: the interval lies
    within ±margin, or it contains 0 and |diff| ≤ margin (False when any is NaN)."""
    return (-margin <= lo and hi <= margin) or (lo <= 0.0 <= hi and abs(diff) <= margin)


def run(ctx: Context) -> dict[str, Any]:
    """Training: sphere and torusN with the paper's recipe (scale.torus_seeds seeds each), and torusC at each
    of scale.unstable_dims with and without clipping. Returns the runs (with the embeddings of the sphere /
    torusN runs)."""
    s = ctx.scale
    main: dict[str, list[tuple[Run, dict[str, Any] | None]]] = {
        geometry: train_seeds(ctx, f"{geometry}-D{RECIPE['dim']}", s.torus_seeds, preset=preset(geometry))
        for geometry in ("sphere", "torus_n")
    }
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
    return {"main": main, "unstable": unstable}


def stability(unstable: dict[tuple[int, str], list[Run]], chance: float) -> dict[tuple[int, str], dict]:
    """Per (D, clipping): runs, diverged, failed (diverged, or P@1 below twice ``chance``), P@1, and the
    logged gradient norms."""

    def failures(runs: list[Run]) -> int:
        return sum(r.diverged or r.metric("precision_at_1") < 2 * chance for r in runs)

    return {
        (dim, label): {
            "D": dim,
            "clipping": label,
            "runs": len(runs),
            "diverged": sum(r.diverged for r in runs),
            "failed": failures(runs),
            "p_at_1": mean([r.metric("precision_at_1") for r in runs]),
            "steps_over_100": sum(r.steps_over_100 or 0 for r in runs),
            "max_grad_norm": max((r.max_grad_norm or 0.0) for r in runs),
            "p_at_1_runs": [r.metric("precision_at_1") for r in runs],
        }
        for (dim, label), runs in unstable.items()
    }


def stability_totals(stab: dict[tuple[int, str], dict]) -> dict[str, dict[str, float]]:
    """:func:`stability`'s rows summed over the dimensions, per clipping setting."""
    return {
        label: {
            "runs": sum(v["runs"] for (_, lab), v in stab.items() if lab == label),
            "diverged": sum(v["diverged"] for (_, lab), v in stab.items() if lab == label),
            "failed": sum(v["failed"] for (_, lab), v in stab.items() if lab == label),
            "p_at_1": mean([p for (_, lab), v in stab.items() if lab == label for p in v["p_at_1_runs"]]),
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


def analyse(ctx: Context, trained: dict[str, Any]) -> dict[str, Any]:
    """The numbers behind the claims: P@1 per geometry and seed, the paired torusN − sphere difference with
    its t interval, torusC's stability per D and clipping, and the quantised reports of each geometry's first
    seed (drawn to the plot)."""
    main = trained["main"]
    p1 = {g: [r.metric("precision_at_1") for r, _ in runs] for g, runs in main.items()}
    # Paired by training seed: Δ_seed = P@1(torusN) − P@1(sphere); a Student-t 95% CI over the seeds.
    deltas = [t - sp for t, sp in zip(p1["torus_n"], p1["sphere"], strict=True)]
    stab = stability(trained["unstable"], 1.0 / ctx.dataset.num_classes)
    key = jax.random.key(0)
    quant = []
    for i, geometry in enumerate(("sphere", "torus_n")):
        first, emb = main[geometry][0]
        if emb is None:
            continue
        rep = evaluate.quantised_report(**emb, key=jax.random.fold_in(key, i), pq_iters=ctx.scale.pq_iters)
        rep["run"] = first.name
        quant.append(rep)
    eight, low = quantisation_drops(quant)
    return {
        "p_at_1": p1,
        "deltas": deltas,
        "gap": t_interval(deltas),
        "stability": stab,
        "totals": stability_totals(stab),
        "quantised": quant,
        "eight_bit_drop": eight,
        "low_bit_drop": low,
        "dims": list(ctx.scale.unstable_dims),
        "steps": main["sphere"][0][0].steps,
        "epochs": main["sphere"][0][0].epochs,
    }


def claims(n: dict[str, Any]) -> list[Claim]:
    """The verdicts, from :func:`analyse`'s numbers alone."""
    p1, deltas, totals = n["p_at_1"], n["deltas"], n["totals"]
    gap, gap_lo, gap_hi = n["gap"]
    eight, low = n["eight_bit_drop"], n["low_bit_drop"]
    dims = "/".join(map(str, n["dims"]))
    steps, epochs = n["steps"], n["epochs"]
    clip_helps = totals["no clip"]["failed"] > totals["clip 100"]["failed"] or (
        totals["no clip"]["p_at_1"] < totals["clip 100"]["p_at_1"] - EQUIVALENT
    )
    return [
        Claim(
            claim="torusN ≈ sphere (P@1)",
            ours=f"sphere {mean_sd(p1['sphere'])}, torusN {mean_sd(p1['torus_n'])}; Δ {100 * gap:+.1f} pts, "
            f"95% CI [{100 * gap_lo:+.1f}, {100 * gap_hi:+.1f}] over {len(deltas)} paired seeds "
            f"(D={RECIPE['dim']}, KoLeo {RECIPE['koleo']}, {steps} steps = {epochs:.3g} epochs)",
            paper="no number: hypersphere generally strongest, torusN competitive (CIFAR-100, D=16 among "
            "others, 100 epochs, several KoLeo weights)",
            source="Fig. 3; §5 'Results using CIFAR'",
            rule="the 95% CI of Δ lies within ±2 pts, or contains 0 with |mean Δ| ≤ 2 pts",
            holds=matches(gap, gap_lo, gap_hi),
        ),
        Claim(
            claim=f"clipping prevents torusC's divergence at low D (D={dims}, KoLeo {RECIPE['koleo']})",
            ours=", ".join(f"{k}: {v['diverged']}/{v['runs']} diverged" for k, v in totals.items())
            + " (per D in the table below)",
            paper="no number: gradient clipping helped to stabilise torusC (with the clip at 100)",
            source="§3.1; §5 'Experiment 1'",
            rule="fewer runs diverge (non-finite loss) with clip 100 than without",
            holds=totals["clip 100"]["diverged"] < totals["no clip"]["diverged"],
        ),
        Claim(
            claim=f"torusC needs clipping at low D (D={dims}, KoLeo {RECIPE['koleo']})",
            ours="; ".join(
                f"{k}: {v['failed']}/{v['runs']} diverged or failed, mean P@1 of the runs that finished "
                f"{tables.fmt(v['p_at_1'], 3)}"
                for k, v in totals.items()
            ),
            paper="no number: torusC unstable at low D; some runs diverged or failed to learn even with "
            "clip 100",
            source="Fig. 3; §3.1, §5 'Experiment 1'",
            rule="without clipping more runs diverge or fail (P@1 < 2× chance), or mean P@1 lower by > 2 pts",
            holds=clip_helps,
        ),
        Claim(
            claim=f"torusC is unstable at low D even with clipping (D={dims})",
            ours=f"clip 100: {totals['clip 100']['failed']} of {totals['clip 100']['runs']} runs diverged or "
            "failed",
            paper="no number: some runs diverged, and some failed to learn, despite gradient clipping",
            source="§5 'Experiment 1'",
            rule="at least one clipped torusC run diverged or failed (P@1 < 2× chance)",
            holds=totals["clip 100"]["failed"] > 0,
        ),
        Claim(
            claim="8-bit costs < 1 pt (P@1)",
            ours=", ".join(f"{g}: {_change(d, 2)} pts" for g, d in eight.items()) or "–",
            paper="no number: 8-bit has only a mild impact (CIFAR-100)",
            source="Fig. 4; Table 3 (8-bit = 8·D bits, D/2 codes for torusN)",
            rule="float P@1 − 8-bit P@1 < 1 pt for every geometry",
            holds=bool(eight) and all(d < 0.01 for d in eight.values()),
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
            rule="1-bit and every PQ code at ≤ 16 bits/vector lose > 1 pt of P@1, for every geometry",
            holds=bool(low) and all(rows and all(d > 0.01 for d in rows.values()) for rows in low.values()),
        ),
    ]


def findings(ctx: Context) -> Findings:
    """Train, analyse, judge; the claims with their tables, details, plot and notes."""
    s = ctx.scale
    n = analyse(ctx, run(ctx))
    stab, quant = n["stability"], n["quantised"]
    plot = ctx.file(PLOT, "png")
    if quant:
        plots.plot_quantised(quant, os.path.join(ctx.out, plot))
    gap, gap_lo, gap_hi = n["gap"]
    steps, epochs = n["steps"], n["epochs"]
    return Findings(
        claims=claims(n),
        tables=[
            (
                "torusC with and without clipping, per dimension",
                records_table(
                    [
                        {
                            "D": v["D"],
                            "clipping": v["clipping"],
                            "runs": v["runs"],
                            "diverged": v["diverged"],
                            "failed": v["failed"],
                            "P@1": mean_sd(v["p_at_1_runs"]),
                            "steps with ‖g‖ > 100": v["steps_over_100"],
                            "max ‖g‖": f"{v['max_grad_norm']:.3g}",
                        }
                        for v in stab.values()
                    ]
                ),
            ),
            ("Runs", runs_table(ctx.runs)),
            (
                f"Quantised retrieval (train.evaluate, {PAPER.citation} Table 3 codes)",
                evaluate.markdown_table(quant),
            ),
        ],
        details={
            "stability": list(stab.values()),
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
            "A run 'failed' when it diverged (non-finite loss) or its P@1 stayed below twice chance.",
        ],
    )
