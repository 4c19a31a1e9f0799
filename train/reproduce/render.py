"""Markdown of the reproduction: the per-paper tables and ``reproduction.md`` from the JSON results.

Every table goes through ``train.tables.markdown_table``.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from train import files, tables
from train.reproduce.common import PAPERS, Run


def _cell(text: str) -> str:
    """A free-text cell: a '|' inside it must not end the cell."""
    return text.replace("|", "\\|")


def runs_table(runs: Sequence[Run]) -> str:
    """The training runs: name, seed, steps, epochs, the report's retrieval / probe metrics, max ‖g‖, wall
    time."""
    header = [
        "run",
        "seed",
        "steps",
        "epochs",
        "P@1",
        "kNN@5",
        "R@1",
        "probe",
        "circ. var.",
        "max ‖g‖",
        "wall s",
    ]
    rows = []
    for r in runs:
        rep = r.report or {}
        rows.append(
            [
                r.name + (" (DIVERGED)" if r.diverged else ""),
                r.seed,
                r.steps,
                f"{r.epochs:.3g}",
                rep.get("precision_at_1"),
                rep.get("knn_accuracy"),
                (rep.get("recall_at_k") or {}).get("1"),
                rep.get("piecewise_linear_accuracy", rep.get("linear_probe_accuracy")),
                rep.get("circular_variance"),
                None if r.max_grad_norm is None else f"{r.max_grad_norm:.3g}",
                f"{r.wall_s:.1f}",
            ]
        )
    return tables.markdown_table(header, rows, align="l" + "r" * (len(header) - 1)) + "\n"


def records_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Records sharing their keys (those of the first) as a table, one column per key."""
    keys = list(records[0])
    return tables.markdown_table(keys, [[r[k] for k in keys] for r in records]) + "\n"


def _sizes(scale: Mapping[str, Any]) -> str:
    return f"Sizes (scale {scale['name']}, train/reproduce/common.py SCALES): " + ", ".join(
        f"{k} {v}" for k, v in scale.items() if k != "name"
    )


def paper_section(res: Mapping[str, Any], *, sizes: bool = False) -> str:
    """One paper's section: what ran (and the scale's sizes, when ``sizes``), the claim table (ours | paper |
    verdict), then the detail tables."""
    d, sc = res["data"], res["scale"]
    claims = tables.markdown_table(
        ["claim", "ours", "paper", "paper source", "rule", "verdict"],
        [
            [_cell(c[k]) for k in ("claim", "ours", "paper", "source", "rule")] + [f"**{c['verdict']}**"]
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


LEGACY = (
    "Parts of scale `full` were made by an earlier version of this command: fixed step counts per run and "
    "the digits presets (Korman 2021's MSimCLR with Adam 1e-3 and ±1 px shifts, MTriplet at lr 1e-3; the "
    "presets now hold appendix A.1's Adam 1e-4 with SimCLR augmentations and §3.2.1's RMSProp 1e-5). "
    "Rerunning their commands with `--scale cpu` redoes them with the papers' recipes."
)


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
    names = list(dict.fromkeys(_data_name(r) for r in results))
    verdicts: dict[tuple[str, str], dict[str, str]] = {}  # (paper, claim) → data set → verdict
    for r in results:
        for c in r["claims"]:
            verdicts.setdefault((r["seed"], c["claim"]), {})[_data_name(r)] = c["verdict"]
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
            *[paper_section(r, sizes=not shared) for r in group],
        ]
    text = "\n".join(
        [
            "# Reproduction of the papers' claims",
            "",
            "Made by: " + ", ".join(f"`{c}`" for c in dict.fromkeys(r["command"] for r in results)),
            "",
            "Every number below was computed by these commands (train/reproduce/); each verdict is computed "
            "from the numbers by the rule shown beside it. 'does not hold at this scale' reports what we "
            "measured at this size, not a judgement of the paper. Papers and their command-line selectors: "
            f"{selectors}.",
            "",
            "Scales (`--scale`): `paper` runs each paper's recipe as the paper does (ResNet-18, the "
            "recipe's epochs; a GPU's work: [paper_scale.md](paper_scale.md)). `cpu` runs the same recipes "
            "with an MLP encoder in fp32 for the recipe's epochs or 480,000 training images per run, "
            "whichever is less.",
            *(["", LEGACY] if any(r["scale"]["name"] == "full" for r in results) else []),
            "",
            "Data: `digits` is scikit-learn's bundled 8×8 digits (the default; no download). Fashion-MNIST "
            "(Xiao et al. 2017) is the four official IDX files with their own 60,000 / 10,000 split "
            "(`--data idx:DIR`). The MNIST part uses the official MNIST test set (10,000 images of 28×28) "
            "split by train.data's seeded, stratified split into 8,000 train / 2,000 test "
            "(`--test-fraction 0.2`); to rerun it, make `mnist_t10k.npz` from the official IDX files with "
            "`python -m train.data t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz mnist_t10k.npz`.",
            "",
            summary,
            "",
            *parts,
        ]
    )
    files.write_text(os.path.join(out, "reproduction.md"), text.rstrip("\n") + "\n")
    return text
