"""Markdown of the reproduction: ``reproduction.md`` from the JSON results, one section per paper (the tables
a paper's reproduction makes of its runs and records are :mod:`.tables`'s).

Every table goes through ``train.helpers.tables.markdown_table``.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from train.app import report
from train.helpers import files, tables
from train.reproduce.papers import MODULES, PAPERS
from train.reproduce.records import Run, version_text
from train.reproduce.rules import ABOVE_BASELINE, EQUIVALENT, LEARNED, arms_of
from train.reproduce.same_code import same_results
from train.reproduce.tables import raw_pixels


def _cell(text: str) -> str:
    """A free-text cell: a '|' inside it must not end the cell."""
    return text.replace("|", "\\|")


def _below(values: Mapping[str, float], floor: float) -> str:
    return ", ".join(f"{name} {100 * v:.1f}" for name, v in values.items() if not v >= floor)


SHORT = f"short of +{100 * ABOVE_BASELINE:.0f} pts"  # the runs under their baseline + ABOVE_BASELINE


def baseline_gap(res: Mapping[str, Any]) -> str:
    """Sentences on the learned runs of a result against their untrained baseline: how many reach
    ABOVE_BASELINE over it, and which do not, with their number; '' when no run of it has a report.

    The baseline is the raw pixels' 1-NN P@1 (a learned run: P@1 at least LEARNED × chance), or, where the
    paper's details name baselines of their own protocol (``details['baselines']``: Korman 2021's 2-d codes
    against a 2-d PCA of the pixels), each of those against its runs' own metric."""
    groups = res.get("details", {}).get("baselines")
    if groups is not None:
        return " ".join(
            f"**Against {g['baseline']}** ({100 * g['value']:.1f}, no training): "
            f"{sum(v >= g['value'] + ABOVE_BASELINE for v in g['runs'].values())} of {len(g['runs'])} runs' "
            f"{g['metric']} reach {100 * ABOVE_BASELINE:.0f} points above it or more"
            + (f"; {SHORT}: {below}." if (below := _below(g["runs"], g["value"] + ABOVE_BASELINE)) else ".")
            for g in groups
            if g["runs"]
        )
    runs = [Run.from_json(r) for r in res["runs"]]
    raw = raw_pixels(runs)
    if raw is None:
        return ""
    learned = [r for r in runs if r.report and r.learned(1.0 / res["data"]["classes"])]
    floor = raw["precision_at_1"] + ABOVE_BASELINE
    below = _below({r.name: r.metric("precision_at_1") for r in learned}, floor)
    head = (
        f"**Against the raw pixels** (P@1 {100 * raw['precision_at_1']:.1f}): "
        f"{sum(r.metric('precision_at_1') >= floor for r in learned)} of {len(learned)} learned runs reach "
        f"{100 * ABOVE_BASELINE:.0f} points of P@1 above them or more"
    )
    return head + (f"; {SHORT}: {below}." if below else ".")


def _sizes(scale: Mapping[str, Any]) -> str:
    return (
        f"Sizes (scale {scale['name']}, train/reproduce/common.py SCALES, each paper module's SIZES): "
        + ", ".join(f"{k} {v}" for k, v in scale.items() if k != "name")
    )


def stale_runs(res: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """A sentence on the runs of ``res`` that predate the ``current`` code (train.app.report.code_version): by
    name with the version each was trained by; '' when none is stale."""
    runs = [Run.from_json(r) for r in res["runs"]]
    stale = [r for r in runs if r.stale(dict(current))]
    if not stale:
        return ""
    by_version: dict[str, list[str]] = {}
    for r in stale:
        by_version.setdefault(version_text(r.code_version), []).append(r.name)
    if len(stale) == len(runs):  # every run: the versions with their counts, no names
        which = f"all {len(runs)} runs"
        listed = "; ".join(f"{version}: {len(names)}" for version, names in by_version.items())
    else:
        which = f"{len(stale)} of {len(runs)} runs"
        listed = "; ".join(f"{version}: {', '.join(names)}" for version, names in by_version.items())
    return (
        f"**Stale runs**: {which} of this section were trained by code other than the current "
        f"({version_text(dict(current))}) or recorded no code version (trained by: {listed}). Their numbers "
        "are what that code measured; rerunning the command without their run directories retrains them."
    )


def same_code_runs(res: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """A sentence on the runs of ``res`` trained by other code that is checked to give the same results as
    the ``current`` code (:mod:`train.reproduce.same_code`), so they count as current; '' when none is."""
    hashes = {r["code_version"]["code_hash"] for r in res["runs"] if r.get("code_version")}
    linked = sorted(h for h in hashes if h != current["code_hash"] and same_results(h, current["code_hash"]))
    if not linked:
        return ""
    n = sum(1 for r in res["runs"] if r.get("code_version") and r["code_version"]["code_hash"] in linked)
    return (
        f"**Same results**: {n} of {len(res['runs'])} runs were trained by code "
        f"{', '.join(h[:12] for h in linked)}, which gives the same outputs as the current code bit for bit: "
        "checked by `python -m train.reproduce.same_code`, which trains and evaluates each distinct "
        "configuration of those runs with both versions (the record: train/reproduce/same_results.json)."
    )


def stale_fits(res: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """A sentence on a result made by fits, not training runs (a paper whose reproduction trains nothing:
    Hong, Meng & Yuan 2018), whose fits' code version (``details['code_version']``) is not the ``current``
    code or was not recorded; '' otherwise."""
    if PAPERS[res["seed"]].trains:
        return ""
    version = res.get("details", {}).get("code_version")
    if version is not None and version.get("code_hash") == current["code_hash"]:
        return ""
    made = "recorded no code version" if version is None else f"were made by {version_text(version)}"
    return (
        f"**Stale fits**: this section's fits {made}; the current code is {version_text(dict(current))}. "
        "Their numbers are what the code of their time measured; rerunning the command fits them again."
    )


def stale_codes(res: Mapping[str, Any], claim: str, current: Mapping[str, Any]) -> list[str]:
    """The code versions ('code e59f3b0c', 'unknown') of the stale runs that claim ``claim`` of ``res`` rests
    on (its arms' runs, :data:`rules.arms_of` of its paper's ARMS; without arms, every run of the result), or
    of the result's fits where its paper trains nothing; [] when it rests on current code alone."""
    if not PAPERS[res["seed"]].trains:
        version = res.get("details", {}).get("code_version")
        if version is not None and version.get("code_hash") == current["code_hash"]:
            return []
        return [_code(version)]
    runs = [Run.from_json(r) for r in res["runs"]]
    spec = arms_of(claim, MODULES[res["seed"]].ARMS)
    chosen = runs if spec is None else spec.chosen(runs)
    return sorted({_code(r.code_version) for r in chosen if r.stale(dict(current))})


def _code(version: Mapping[str, Any] | None) -> str:
    return "unknown" if version is None else f"code {version['code_hash'][:8]}"


def verdict_cell(verdict: str, stale: Sequence[str], *, bold: bool = False) -> str:
    """A verdict as the page prints it: marked with the code versions of the stale runs it rests on, so that
    no verdict over runs of other code reads as a current one ('holds (stale: code e59f3b0c)')."""
    text = f"**{verdict}**" if bold else verdict
    return f"{text} (stale: {', '.join(stale)})" if stale else text


def paper_section(res: Mapping[str, Any], *, sizes: bool = False, current: Mapping[str, Any]) -> str:
    """One paper's section: what ran (and the scale's sizes, when ``sizes``), the runs that predate the
    ``current`` code, the claim table (ours | paper | verdict), then the detail tables."""
    d, sc = res["data"], res["scale"]
    claims = tables.markdown_table(
        ["claim", "ours", "paper", "paper source", "rule", "verdict"],
        [
            [_cell(c[k]) for k in ("claim", "ours", "paper", "source", "rule")]
            + [verdict_cell(c["verdict"], stale_codes(res, c["claim"], current), bold=True)]
            for c in res["claims"]
        ],
        align="llllll",
    )
    lines = [
        f"### {res['title']}",
        "",
        f"`{res['command']}` · scale **{sc['name']}** · data {d['name']} ({d['train']} train / "
        f"{d['test']} test, {d['classes']} classes, images {'×'.join(map(str, d['image_shape']))}) · "
        f"training seeds {res['training_seeds'] or '–'} · {len(res['runs'])} training runs "
        f"({sum(r['wall_s'] for r in res['runs']):.0f} s on {res['device']}, summed over the runs; this "
        f"command {res['wall_s']} s, runs finished earlier read back) · {res['finished']}",
        "",
        *([f"{_sizes(sc)}.", ""] if sizes else []),
        *([stale, ""] if (stale := stale_runs(res, current) or stale_fits(res, current)) else []),
        *([same, ""] if (same := same_code_runs(res, current)) else []),
        *([gap, ""] if (gap := baseline_gap(res)) else []),
        *(
            [
                f"Verdicts judged by {version_text(res['judged']['code_version'])} on "
                f"{res['judged']['date']}.",
                "",
            ]
            if "judged" in res
            else []
        ),
        claims,
        "",
    ]
    for note in res.get("notes", []):
        lines.append(f"- {note}")
    if res.get("notes"):
        lines.append("")
    for title, table in res["tables"]:
        lines += [f"#### {title}", "", table.rstrip("\n"), ""]
    for png in res.get("plots", []):
        lines += [f"![{png}]({png})", ""]
    return "\n".join(lines)


RULES = (
    "How the verdicts are judged (train/reproduce/rules.py). 'mean ± sd' over seeds uses the sample "
    "standard deviation (ddof = 1). A comparison is judged on a 95 % interval of the difference, never on "
    "bare means: Student's t over paired per-seed differences where the runs pair by seed, Welch's interval "
    "where they do not, a paired bootstrap over the test queries where one fit meets another (Hong, Meng & "
    "Yuan 2018). 'A beats B' holds when the interval lies above 0 and does not hold when it lies below; a "
    "bound (a cost under 1 point) holds when the interval lies on its side and does not hold when it lies "
    "wholly on the other; 'A ≈ B' holds when the interval lies within the claim's margin and does not hold "
    "when it lies wholly outside, the margin stated in the rule with where it comes from (the paper's own "
    "spread, or the differences it calls insignificant; where the paper gives no number, geojax's "
    f"±{100 * EQUIVALENT:g} points), and whether the difference itself is significant is stated beside it; "
    "anything else, and one seed (no interval), is **inconclusive**. Counts of runs (divergence, failure to "
    "learn) use Fisher's exact test, one-sided each way (p < 0.05): significantly fewer holds, significantly "
    "more does not hold; a count without events, or at run counts where no split could be significant, is "
    "inconclusive, and the smallest significant split is printed beside every count. An arm whose treatment "
    "never acted (a clip that never bound) is left out of the count. A run 'diverged' when its loss became "
    f"non-finite; it 'failed to learn' when it finished with a P@1 below {LEARNED:g}× chance. A rule that "
    "would hold on runs that learned nothing (an equivalence, a quantisation cost, a stability claim) is "
    "inconclusive unless its runs learned. A t interval of identical counts (every seed alike) has zero "
    "width and is inconclusive. Every table of retrieval results ends with the raw pixels' 1-NN on the same "
    "split. Each run records the code version it was trained with, as Hong, Meng & Yuan 2018's fits do; "
    "runs and fits that predate the current code are listed as stale in their section, and every verdict "
    "that rests on them, in the summary and in the section, names their code ('holds (stale: code "
    "e59f3b0c)'). "
    "`python -m train.reproduce render --out DIR` "
    "re-judges stored results with the current rules without training."
)


ONE_RUN = (
    "Which rules rest on one run or on a point value: the raw pixels' 1-NN P@1 is a point value, computed "
    "once without training (Korman 2021's 2-d PCA baselines are used as one: the mean over the PCA probe's "
    f"seeds); 'learned' (P@1 at least {LEARNED:g}× chance) and 'worth having' (at least "
    f"{100 * ABOVE_BASELINE:g} points above the raw pixels' 1-NN, or, for a code narrower than the pixels, "
    "above 1-NN on the pixels' PCA to the code's width: Korman 2021's MTriplet) are checked run by run, and "
    "so is Stowell 2026's 'well-trained' in its 1-bit row, against that point value; Hong, Meng & Yuan "
    "2018's comparisons rest on one fit per method and code length (their interval is a bootstrap over the "
    "queries: it holds the queries' variation, not the fits'; the encoding times', repeated timings of those "
    "fits); Bouhsine et al. 2024's 'SimO separates the classes' judges each seed on its own (no interval) "
    "and is calibrated on one SupCon control run, whose most confused pair is the pair it allows; the "
    "controls in the notes are one run each. Every other verdict rests on an interval over seeds or on "
    "Fisher's test on counts of runs."
)


LEGACY = (
    "Parts of scale `full` were made by an earlier version of this command: fixed step counts per run and "
    "the digits presets (Korman 2021's MSimCLR with Adam 1e-3 and ±1 px shifts, MTriplet at lr 1e-3; the "
    "presets now hold appendix A.1's Adam 1e-4 with SimCLR augmentations and §3.2.1's RMSProp 1e-5). "
    "Rerunning their commands with `--scale cpu` redoes them with the papers' recipes."
)


def recipe_table(keys: Sequence[str]) -> str:
    """The recipes against their papers, one row per paper of ``keys`` that trains: where its values come
    from and each deviation, stated once (the comments in train/app/presets.py give the detail)."""
    rows = [[PAPERS[k].citation, PAPERS[k].recipe] for k in keys if PAPERS[k].trains]
    return tables.markdown_table(["paper", "recipe: sources and deviations"], rows, align="ll")


def _data_name(res: Mapping[str, Any]) -> str:
    """A part of the page: the data set and the scale."""
    return f"{res['data']['name']}, {res['scale']['name']}"


def render(out: str) -> str:
    """``out/reproduction.md`` from every ``out/reproduce_<key>[_<data tag>].json``: a summary with one
    verdict column per data set, then one part per data set (digits first) with its papers' sections;
    returns the Markdown."""
    results = []
    for path in sorted(glob.glob(os.path.join(out, "reproduce_[0-9][0-9][0-9]*.json"))):
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    results.sort(key=lambda r: (r["data"].get("tag", ""), r["scale"]["name"], r["seed"]))
    current = report.code_version()
    names = list(dict.fromkeys(_data_name(r) for r in results))
    verdicts: dict[tuple[str, str], dict[str, str]] = {}  # (paper, claim) → data set → verdict
    for r in results:
        for c in r["claims"]:
            cell = verdict_cell(c["verdict"], stale_codes(r, c["claim"], current))
            verdicts.setdefault((r["seed"], c["claim"]), {})[_data_name(r)] = cell
    summary = tables.markdown_table(
        ["paper", "claim", *names],
        [
            [PAPERS[key].citation, _cell(claim), *(by.get(n, "–") for n in names)]
            for (key, claim), by in sorted(verdicts.items(), key=lambda kv: kv[0][0])
        ],
        align="ll" + "l" * len(names),
    )
    keys = sorted({r["seed"] for r in results})
    selectors = ", ".join(f"`{k}` {PAPERS[k].citation}" for k in keys)
    parts = []
    for name in names:
        group = [r for r in results if _data_name(r) == name]
        runs_wall = sum(run["wall_s"] for r in group for run in r["runs"])
        commands = ", ".join(f"`{c}`" for c in dict.fromkeys(r["command"] for r in group))
        shared = all(r["scale"] == group[0]["scale"] for r in group)
        parts += [
            f"## Data: {name}",
            "",
            f"Made by {commands}: {len(group)} papers, {sum(len(r['runs']) for r in group)} training runs, "
            f"{runs_wall:.0f} s ({runs_wall / 60:.1f} min) summed over the runs (each run's training and "
            "evaluation, when it was trained; the analyses after the runs are not counted).",
            "",
            f"{_sizes(group[0]['scale'])}."
            if shared
            else "The scale's sizes changed between these commands: each paper's section gives its own.",
            "",
            *[paper_section(r, sizes=not shared, current=current) for r in group],
        ]
    text = "\n".join(
        [
            "# Reproduction of the papers' claims",
            "",
            "Made by: " + ", ".join(f"`{c}`" for c in dict.fromkeys(r["command"] for r in results)),
            "",
            f"Rendered by {version_text(current)}.",
            "",
            "Every number below was computed by these commands (train/reproduce/); each verdict is computed "
            "from the numbers by the rule shown beside it. 'does not hold at this scale' reports what we "
            "measured at this size, not a judgement of the paper. Papers and their command-line selectors: "
            f"{selectors}. Any of these commands with `--print` added trains nothing and lists each of its "
            "training runs as the `python -m train key=value …` line the sweep trains it with (seed and "
            "run directory included): one row can be rerun by hand, and the sweep reads that run back as "
            "its own.",
            "",
            RULES,
            "",
            ONE_RUN,
            "",
            "Scales (`--scale`): `paper` runs each paper's recipe with its own network and length (the "
            "recipe's epochs; a GPU's work: [paper_scale.md](paper_scale.md)): ResNet-18 for Stowell 2026 "
            "and Korman 2021's MSimCLR, ResNet-50 for Feeney & Hughes 2024, ResNet-18 for Bouhsine et al. "
            "2024 (geojax's choice: the paper names none) and, for Korman 2021's MTriplet, ResNet-18 from "
            "scratch in place of the paper's ImageNet-pretrained GoogLeNet, which geojax does not build; on "
            "the chosen data, which is the paper's own only where the paper used it (of these five, Korman "
            "2021 alone reports Fashion-MNIST and MNIST). "
            "`cpu` runs the same recipes (each one's loss, geometry, similarity, optimiser and rate, "
            "temperature, batch, views, augmentations and labels) with geojax's small CNN for 28×28 images "
            "(convolutions 32 and 64, 256 dense features, batch norm, fp32) for the recipe's epochs or "
            "180,000 training images per run, whichever is less (on Fashion-MNIST: 3 epochs, against 100 in "
            "most recipes, 300 in MTriplet's and 800 in Feeney & Hughes 2024's; a cosine schedule spans the "
            "steps run, a warm-up keeps its steps up to half the run). Seeds per configuration are those "
            "each section lists (torusC: two per dimension and clipping setting at the cpu scale).",
            "",
            recipe_table(keys),
            *(["", LEGACY] if any(r["scale"]["name"] == "full" for r in results) else []),
            "",
            "Data: `digits` is scikit-learn's bundled 8×8 digits (the default; no download). Fashion-MNIST "
            "(Xiao et al. 2017) is the four official IDX files with their own 60,000 / 10,000 split "
            "(`--data idx:DIR`). The MNIST part uses the official MNIST test set (10,000 images of 28×28) "
            "split by train.app.data's seeded, stratified split into 8,000 train / 2,000 test "
            "(`--test-fraction 0.2`); to rerun it, make `mnist_t10k.npz` from the official IDX files with "
            "`python -m train.app.data t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz mnist_t10k.npz`.",
            "",
            summary,
            "",
            *parts,
        ]
    )
    files.write_text(os.path.join(out, "reproduction.md"), text.rstrip("\n") + "\n")
    return text
