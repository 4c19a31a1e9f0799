"""Every figure the training app, the evaluation tools, the reproduction and the notebooks draw.

Figures are built outside pyplot (:func:`figure`: no backend switch, notebooks keep their
inline plots) and, when a path is given, written as PNG atomically (``train.helpers.files.write_figure``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from geojax import manifolds
from geojax import similarity as similarity_lib
from train.helpers import files

TARGET_NOISE_SIMILARITIES = ("cosine", "neg_arc_length")  # the two similarities Feeney & Hughes 2024 compare


def figure(*, figsize: tuple[float, float]):
    """A matplotlib Figure outside pyplot: no backend switch, no global figure list (safe in notebooks).

    Args:
        figsize: (width, height) in inches.

    Returns:
        A new ``matplotlib.figure.Figure``.
    """
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def plot_curve(metrics_path: str, png_path: str) -> None:
    """Training curve (total loss and each unweighted term against step) from metrics.jsonl.

    Writes nothing when the file holds no rows.

    Args:
        metrics_path: a run's metrics.jsonl (one JSON object per line, with ``step`` and the terms).
        png_path: the PNG file to write.
    """
    with open(metrics_path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows:
        return
    keys = [k for k in rows[0] if k not in ("step", "lr", "time", "grad_norm")]
    fig = figure(figsize=(3.2 * len(keys), 2.8))
    axes = fig.subplots(1, len(keys), squeeze=False)
    steps = [r["step"] for r in rows]
    for ax, key in zip(axes[0], keys, strict=True):
        ax.plot(steps, [r[key] for r in rows])
        ax.set_title(key)
        ax.set_xlabel("step")
    fig.tight_layout()
    files.write_figure(fig, png_path, dpi=90)


def pareto_frontier(points: Sequence[tuple[float, float, Any]]) -> list[tuple[float, float]]:
    """(bits, metric) of the points no other beats, in increasing bits.

    A point is on the frontier when its metric is higher than that of every point of fewer or equal bits.

    Args:
        points: (bits, metric, anything) triples (further items are ignored).

    Returns:
        The frontier's (bits, metric) pairs, bits increasing, metric strictly increasing.

    Example:
        >>> pareto_frontier([(8, 0.9, "a"), (1, 0.5, "b"), (4, 0.4, "c"), (16, 0.9, "d")])
        [(1, 0.5), (8, 0.9)]
    """
    front: list[tuple[float, float]] = []
    for x, y, *_ in sorted(points, key=lambda p: (p[0], -p[1])):
        if not front or y > front[-1][1]:
            front.append((x, y))
    return front


def plot_quantised(reports: Sequence[Mapping[str, Any]], path: str | None = None, *, metric: str = "p_at_1"):
    """``metric`` against bits per vector (log scale), each report's codes as dots and its frontier as a line.

    Every code of each ``train.evaluate`` report is a dot, and its frontier (:func:`pareto_frontier`) a step
    line; the figure is also written as PNG to ``path`` when one is given.

    Args:
        reports: ``train.evaluate.quantised_report`` results (geometry, dim, rows with method,
            bits_per_vector and the metric; rows whose metric is None or NaN are left out).
        path: the PNG file to write (None: none).
        metric: the rows' key to plot, e.g. ``"p_at_1"``.

    Returns:
        The matplotlib Figure.
    """
    fig = figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for rep in reports:
        pts = sorted(
            (row["bits_per_vector"], row[metric], row["method"])
            for row in rep["rows"]
            if row[metric] is not None and not math.isnan(row[metric])
        )
        if not pts:
            continue
        xs, ys, _ = zip(*pts, strict=True)
        (dots,) = ax.plot(xs, ys, "o", alpha=0.6, label=f"{rep['geometry']} (D={rep['dim']})")
        front = pareto_frontier(pts)
        ax.plot(*zip(*front, strict=True), "-", drawstyle="steps-post", color=dots.get_color(), alpha=0.8)
        for x, y, name in pts:
            ax.annotate(name, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bits per vector")
    ax.set_ylabel(metric.replace("_", " ").replace("p at 1", "P@1"))
    ax.set_title("Retrieval after quantisation (Stowell 2026 Table 3 codes)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        files.write_figure(fig, path, dpi=120)
    return fig


def plot_charts(emb: Mapping[str, Any], path: str | None = None, *, title: str):
    """Korman 2021 App. A.2 picture: each test point at its code in its most probable chart, a panel each.

    The first two code coordinates are drawn, coloured by class (ten colours); the figure is also written as
    PNG to ``path`` when one is given.

    Args:
        emb: an atlas run's embeddings (``embeddings.npz`` layout: query_coords [N, n, d ≥ 2], query_q
            [N, n], query_labels [N]).
        path: the PNG file to write (None: none).
        title: the figure's title, before the fixed caption.

    Returns:
        The matplotlib Figure, one panel per chart.
    """
    code, chart = (np.asarray(v) for v in manifolds.atlas_code(emb["query_coords"], emb["query_q"]))
    n = emb["query_q"].shape[1]
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    fig = figure(figsize=(2.2 * cols, 2.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if i >= n:
            ax.axis("off")
            continue
        sel = chart == i
        ax.scatter(code[sel, 0], code[sel, 1], c=emb["query_labels"][sel], cmap="tab10", vmin=0, vmax=9, s=6)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(f"chart {i} ({int(sel.sum())})", fontsize=8)
    fig.suptitle(f"{title}: test points in their most probable chart (colour = class)", fontsize=9)
    fig.tight_layout()
    if path is not None:
        files.write_figure(fig, path, dpi=100)
    return fig


def target_noise(emb: Mapping[str, Any], similarity: str) -> tuple[np.ndarray, np.ndarray]:
    """Feeney & Hughes 2024 histogram data: per test item, its best "target" and "noise" similarities.

    The target is the similarity of its most similar train item of the same class, the noise that of its most
    similar train item of another class.

    Args:
        emb: ``embeddings.npz`` layout (query [Nq, D], query_labels [Nq], reference [Nr, D],
            reference_labels [Nr]).
        similarity: a ``geojax.similarity`` name (``cosine``, ``neg_arc_length``, ...).

    Returns:
        (target [Nq], noise [Nq]): −inf where a query has no train item of its own (or of another) class.
    """
    sim = np.asarray(similarity_lib.get(similarity)(jnp.asarray(emb["query"]), jnp.asarray(emb["reference"])))
    same = np.asarray(emb["query_labels"])[:, None] == np.asarray(emb["reference_labels"])[None, :]
    return np.where(same, sim, -np.inf).max(1), np.where(same, -np.inf, sim).max(1)


def plot_target_noise(models: Mapping[str, Mapping[str, Any]], path: str | None = None):
    """Target / noise similarity histograms (Feeney & Hughes 2024): a row per model, a column per similarity.

    The similarities are cosine and negative arc length (:data:`TARGET_NOISE_SIMILARITIES`), 40 bins from
    the smallest value to 1; the figure is also written as PNG to ``path`` when one is given.

    Args:
        models: a label → an embeddings dict (``embeddings.npz`` layout), one row each.
        path: the PNG file to write (None: none).

    Returns:
        The matplotlib Figure.
    """
    fig = figure(figsize=(8, 2.6 * len(models)))
    axes = fig.subplots(len(models), 2, squeeze=False)
    for row, (label, emb) in zip(axes, models.items(), strict=True):
        for ax, name in zip(row, TARGET_NOISE_SIMILARITIES, strict=True):
            target, noise = target_noise(emb, name)
            bins = np.linspace(min(target.min(), noise.min()), 1.0, 41)
            ax.hist(target, bins=bins, alpha=0.6, label="target")
            ax.hist(noise, bins=bins, alpha=0.6, label="noise")
            ax.set_title(f"trained: {label}; shown: {name}", fontsize=8)
            ax.legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        files.write_figure(fig, path, dpi=100)
    return fig
