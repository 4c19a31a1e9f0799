"""The Markdown tables of a paper's section: its training runs (with the raw pixels' baseline on the same
split) and its records, each through ``train.helpers.tables.markdown_table``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from train.helpers import tables
from train.reproduce.records import Run

RAW = "raw pixels (Euclidean 1-NN, no training)"


def raw_pixels(runs: Sequence[Run]) -> dict[str, float] | None:
    """The raw-pixel baseline of the runs' data (``baseline_raw_1nn`` of a report: P@1 and kNN accuracy of
    test vs train on the pixels); None when no run finished."""
    return next(
        (r.report["baseline_raw_1nn"] for r in runs if r.report and "baseline_raw_1nn" in r.report), None
    )


def raw_pixel_line(runs: Sequence[Run]) -> str:
    """A line to put under a retrieval table: the same split's raw-pixel P@1 ('' when no run finished)."""
    raw = raw_pixels(runs)
    return "" if raw is None else f"\n{RAW}: P@1 {100 * raw['precision_at_1']:.1f} %.\n"


def runs_table(runs: Sequence[Run]) -> str:
    """The training runs: name, seed, steps, epochs, the report's retrieval / probe metrics, max ‖g‖, wall
    time; last, the raw pixels' P@1 and kNN accuracy on the same split."""
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
                f"{r.epochs:.3g}" if math.isfinite(r.epochs) else "–",
                rep.get("precision_at_1"),
                rep.get("knn_accuracy"),
                (rep.get("recall_at_k") or {}).get("1"),
                rep.get("piecewise_linear_accuracy", rep.get("linear_probe_accuracy")),
                rep.get("circular_variance"),
                None if r.max_grad_norm is None else f"{r.max_grad_norm:.3g}",
                f"{r.wall_s:.1f}",
            ]
        )
    raw = raw_pixels(runs)
    if raw is not None:
        rows.append([RAW, "–", 0, "–", raw["precision_at_1"], raw["knn_accuracy"], *["–"] * 5])
    return tables.markdown_table(header, rows, align="l" + "r" * (len(header) - 1)) + "\n"


def records_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Records sharing their keys (those of the first) as a table, one column per key."""
    keys = list(records[0])
    return tables.markdown_table(keys, [[r[k] for k in keys] for r in records]) + "\n"
