"""A metric-learning reality check on Fashion-MNIST, after Musgrave, Belongie & Lim 2020: every loss the field
uses daily, trained by one recipe, tuned on a validation split only, tested on two protocols.

    python -m benchmarks.reality_check --data idx:data/fashion-mnist [--print | --so-far]
    python -m benchmarks.reality_check --quick     # the bundled digits, a few steps: a smoke run

The recipe is ``preset=supcon_sphere_cpu``'s (the small CNN with batch norm, the sphere at D = 16, one
crop-and-flip view per image, AdamW, 12 epochs, batch 256) with KoLeo off, so that the loss alone differs
(:data:`RECIPE`); every loss is ``python -m train`` with its own ``loss=`` keys (:data:`LOSSES`).

1. **Tuning.** Each loss's small grid (:data:`LOSSES`, its paper's values first) trains one seed at an
   eighth of the length (:data:`TUNE_SHARE`: 1.5 epochs, so that the whole sweep trains in about 8 hours on
   two cores; the page states its hours at the speed of its runs made on a quiet machine) with
   ``select_best=true``: 10 % of the training images are held out and each run's score is its P@1 on them
   against the rest, measured once, at its last step. The test set plays no part in the choice (a tuning
   run's report holds its test P@1 too, as every run of the app does; it is not read). Where the grid's best
   value is its lowest or highest, the value beyond that edge (:attr:`Loss.beyond`) trains too.
   The best setting of each loss (the earliest on a tie) goes on to step 2, for both protocols; the page
   names the losses whose choice is still the lowest or highest value they tried.
2. **Protocol (a), seen classes**: the official split, the 10,000 test images against the 60,000 training
   images, P@1 and MAP@R. **Protocol (b), unseen classes**: ``classes=disjoint``, the zero-shot protocol of
   metric learning: train on classes 0-4, retrieve the test images of classes 5-9 among themselves, R@1 and
   MAP@R. Three seeds each (:data:`SEEDS`), mean ± sample sd, beside the raw pixels' 1-NN and MAP@R under
   the same protocol.

A loss "reaches the bar" when its mean P@1 on protocol (a) is at least the raw pixels' + 3 points. MAP@R
(Musgrave et al. 2020) is computed here from each run's embeddings and kept in its run directory
(analysis.json). Each training lives in ``benchmarks/results/reality_check_runs/STAGE/NAME`` (:data:`RUNS`;
NAME holds the loss, the setting and, for a final run, the seed: the final runs of a setting that a later
tuning run displaced stay there, unread), whose report.json, config.json, load.json
and analysis.json are committed as they finish: the sweep goes on from any checkout, reading finished runs
back. Before it trains, the command prints the runs left and their expected time. A full run writes
``benchmarks/results/reality_check.json`` and the section "Reality check on Fashion-MNIST" of docs/losses.md
(:func:`page`: the method, the sweep's length, the table, the losses under the bar, the losses under the raw
pixels on (b), those chosen at the edge of what they tried, and the settings each loss tried). ``--so-far``
trains nothing and writes both from the runs finished so far, saying how many: a protocol shows its figures
once all its seeds have finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.cpu_recipe import REPOSITORY, trained
from geojax import metrics
from train.app import config, data
from train.helpers import files
from train.helpers.results import (
    RESULTS_DIR,
    add_out_argument,
    destination,
    invocation,
    machine_info,
    write_result,
)
from train.helpers.tables import markdown_table

RUNS = os.path.join("benchmarks", "results", "reality_check_runs")  # the trainings (module docstring)
RECIPE = ["preset=supcon_sphere_cpu", "koleo=0"]
SEEDS = (0, 1, 2)
TUNE_SHARE = 0.125  # the tuning runs' share of the recipe's length (1.5 of its 12 epochs)
ABOVE_RAW = 0.03  # "reaches the bar": mean P@1 (protocol a) ≥ raw pixels + 3 points
ANALYSIS = "analysis.json"  # MAP@R of a run, computed from its embeddings, kept beside its report
PAGE = os.path.join("docs", "losses.md")
HEADING = "## Reality check on Fashion-MNIST"
Reader = Callable[[list[str], str], tuple[dict, dict] | None]  # a run's (report, loads), None: not there
QUIET_LOAD = 2.5  # a quiet machine: 1-minute load below this as a run starts and ends (its threads make 2)


@dataclasses.dataclass(frozen=True)
class Loss:
    """One row of the table: the loss's fixed keys, the key it tunes and that key's grid (its paper's value
    first), and the values beyond the grid's lowest and highest (None: nothing sensible lies there).

    Where the grid's best value is its lowest or highest, the value beyond that edge is tried too
    (:meth:`beyond_best`): a best setting at the edge of a grid says the grid did not bracket the optimum.
    """

    name: str
    keys: tuple[str, ...]
    key: str
    values: tuple[str, ...]
    beyond: tuple[str | None, str | None]

    @property
    def grid(self) -> tuple[tuple[str, ...], ...]:
        """The grid's settings, each a tuple of ``key=value`` arguments."""
        return tuple(self.setting(v) for v in self.values)

    def setting(self, value: str) -> tuple[str, ...]:
        """The ``key=value`` arguments of one value of the tuned key."""
        return (f"{self.key}={value}",)

    def beyond_best(self, scores: list[float]) -> tuple[str, ...] | None:
        """The setting beyond the grid's edge where the grid's best (``scores`` in the grid's order; the
        earliest on a tie) is its lowest or highest value; None when it is inside, or nothing lies beyond."""
        best = float(self.values[best_of(scores)])
        numbers = [float(v) for v in self.values]
        for edge, value in zip((min(numbers), max(numbers)), self.beyond, strict=True):
            if best == edge and value is not None:
                return self.setting(value)
        return None


def best_of(scores: list[float]) -> int:
    """The index of the highest score, the earliest on a tie."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


LOSSES = (
    Loss("supcon", ("loss=supcon",), "temperature", ("0.1", "0.05", "0.2"), ("0.025", "0.4")),
    Loss(
        "triplet (semihard)",
        ("loss=triplet", "mining=semihard"),
        "margin",
        ("0.2", "0.1", "0.4"),
        ("0.05", "0.8"),
    ),
    # no neg_margin below the grid's 0.0: ten unit vectors cannot all pairwise sit under a cosine of -1/9 (the
    # regular simplex's), so a margin one step below (-0.3) would ask every negative pair for the impossible
    Loss(
        "contrastive",
        ("loss=contrastive", "pos_margin=1.0"),
        "neg_margin",
        ("0.0", "0.3", "0.6"),
        (None, "0.9"),
    ),
    Loss("multi_similarity", ("loss=multi_similarity",), "base", ("0.5", "0.3", "0.7"), ("0.1", "0.9")),
    Loss(
        "multi_similarity + its miner",
        ("loss=multi_similarity", "miner=multi_similarity"),
        "base",
        ("0.5", "0.3", "0.7"),
        ("0.1", "0.9"),
    ),
    Loss("circle", ("loss=circle",), "gamma", ("80", "32", "256"), ("16", "512")),
    Loss("proxy_anchor", ("loss=proxy_anchor",), "alpha", ("32", "16", "64"), ("8", "128")),
    Loss("proxy_nca", ("loss=proxy_nca",), "loss_scale", ("1", "8", "32"), ("0.25", "128")),
    Loss(
        "normalized_softmax",
        ("loss=normalized_softmax",),
        "temperature",
        ("0.05", "0.02", "0.1"),
        ("0.01", "0.2"),
    ),
    Loss("arcface", ("loss=arcface",), "loss_margin", ("0.5", "0.3", "0.1"), ("0.05", "0.7")),
    Loss("cosface", ("loss=cosface",), "loss_margin", ("0.35", "0.2", "0.1"), ("0.05", "0.5")),
    Loss(
        "sigmoid", ("loss=sigmoid", "sigmoid_learn=true"), "sigmoid_bias", ("-10", "-5", "-2"), ("-20", "0")
    ),
)
QUICK_LOSSES = (LOSSES[0], LOSSES[6])  # SupCon and ProxyAnchor: one batch loss, one proxy loss


def slug(text: str) -> str:
    """A run-directory name of a loss or setting: letters, digits, '-' and '.'."""
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text).strip("-")


@dataclasses.dataclass(frozen=True)
class Plan:
    """The sweep's sizes: the data set, the lengths and the seeds (a full run, or ``--quick``'s)."""

    data: str
    steps: int | None  # the recipe's own length (None) or a fixed number of steps
    tune_steps: int
    seeds: tuple[int, ...]
    losses: tuple[Loss, ...]
    root: str
    full: int  # the recipe's length in steps on the data set (for the time estimate)


def full_steps(data_name: str) -> int:
    """The recipe's length in steps on ``data_name``'s official training set (its 12 epochs)."""
    cfg = config.from_args([*RECIPE, f"dataset={data_name}"])
    ds = data.load(cfg.dataset, test_fraction=cfg.test_fraction, data_dir=cfg.data_dir)
    return max(1, round(cfg.epochs * (len(ds.train_y) // cfg.batch_size)))


def tune_line(plan: Plan, loss: Loss, setting: tuple[str, ...]) -> list[str]:
    """The tuning run's ``python -m train`` arguments: one validation, at the last step."""
    steps = plan.tune_steps
    return [*RECIPE, f"dataset={plan.data}", *loss.keys, *setting, f"steps={steps}", "seed=0"] + [
        "select_best=true",
        f"val_every={steps}",
        "progress=false",
    ]


def final_line(plan: Plan, loss: Loss, setting: tuple[str, ...], protocol: str, seed: int) -> list[str]:
    """A final run's arguments: protocol (a) ``classes=all`` or (b) ``classes=disjoint``."""
    length = [] if plan.steps is None else [f"steps={plan.steps}"]
    classes = "all" if protocol == "a" else "disjoint"
    line = [*RECIPE, f"dataset={plan.data}", *loss.keys, *setting, *length, f"classes={classes}"]
    return [*line, f"seed={seed}", "progress=false"]


def run_dir(plan: Plan, stage: str, *parts: str) -> str:
    return os.path.join(plan.root, stage, "_".join(slug(p) for p in parts))


def map_at_r(workdir: str) -> float:
    """MAP@R of a finished run from its embeddings (kept in its analysis.json once computed): the test
    images against the training images, or among themselves for ``classes=disjoint``."""
    here = os.path.join(REPOSITORY, workdir)
    path = os.path.join(here, ANALYSIS)
    if os.path.exists(path):
        with open(path) as f:
            return float(json.load(f)["map_at_r"])
    with open(os.path.join(here, "config.json")) as f:
        disjoint = json.load(f)["classes"] == "disjoint"
    emb = np.load(os.path.join(here, "embeddings.npz"))
    similarity = str(emb["similarity"])
    query = (emb["query"], emb["query_labels"])
    args = query if disjoint else (*query, emb["reference"], emb["reference_labels"])
    value = metrics.map_at_r(*args, similarity=similarity)
    files.write_json(path, {"map_at_r": value})
    return value


def raw_pixels(plan: Plan) -> dict[str, dict[str, float]]:
    """The raw pixels' P@1 (1-NN) and MAP@R under each protocol (Euclidean distance on the flat images)."""
    cfg = config.from_args([*RECIPE, f"dataset={plan.data}"])
    ds = data.load(cfg.dataset, test_fraction=cfg.test_fraction, data_dir=cfg.data_dir)
    out = {}
    for protocol, split in (("a", ds), ("b", data.disjoint_classes(ds))):
        flat = lambda x: x.reshape(len(x), -1).astype(np.float32)  # noqa: E731
        args = (flat(split.test_x), split.test_y)
        if protocol == "a":
            args += (flat(split.train_x), split.train_y)
        out[protocol] = {
            "precision_at_1": metrics.precision_at_1(*args, similarity="neg_euclidean"),
            "map_at_r": metrics.map_at_r(*args, similarity="neg_euclidean"),
        }
    return out


def expected_s(plan: Plan, left: list[tuple[str, int]]) -> float:
    """Seconds the runs ``left`` (stage, steps) should take: their steps at :func:`training_time`'s speed
    (that of the finished runs made on a quiet machine; 5 steps/s before any has finished) and the median
    evaluation time of the finished runs of the same stage (of any stage when none is finished; 60 s
    otherwise)."""
    rate = training_time(plan)["steps_per_s"] or 5.0
    done = [_timing(os.path.join(REPOSITORY, plan.root, stage)) for stage in ("tune", "a", "b")]
    every = [t for times in done for t in times]
    total = 0.0
    for stage, steps in left:
        own = done[("tune", "a", "b").index(stage)] or every
        evaluation = statistics.median(t["eval_s"] for t in own) if own else 60.0
        total += steps / rate + evaluation
    return total


def _timing(folder: str) -> list[dict[str, float]]:
    found = []
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name, "report.json")
            if os.path.exists(path):
                with open(path) as f:
                    found.append(json.load(f)["timing"])
    return found


def _finished_dir(workdir: str) -> bool:
    return os.path.exists(os.path.join(REPOSITORY, workdir, "report.json"))


def finished_only(line: list[str], workdir: str) -> tuple[dict, dict] | None:
    """:func:`~benchmarks.cpu_recipe.trained`'s report and loads of a finished run, None for any other run
    (nothing trains)."""
    return trained(line, workdir) if _finished_dir(workdir) else None


def tuned(plan: Plan, loss: Loss, read: Reader) -> dict[str, Any] | None:
    """One loss's tuning: its grid, one seed at the tuning length, and the setting beyond the grid's edge
    where the grid's best lies there (:meth:`Loss.beyond_best`); its scores and the chosen setting, the
    best of all tried (the earliest on a tie). None until every run it needs has finished (``read`` says
    None for a run that is not there)."""
    scores: list[dict[str, Any]] = []
    for setting in (*loss.grid, None):
        if setting is None:  # the grid is done: one more setting where its best is at an edge
            setting = loss.beyond_best([s["val_p_at_1"] for s in scores])
            if setting is None:
                break
        got = read(tune_line(plan, loss, setting), run_dir(plan, "tune", loss.name, *setting))
        if got is None:
            return None
        rep, loads = got
        scores.append(
            {"setting": list(setting), "val_p_at_1": rep["selection"][0]["precision_at_1"], **loads}
        )
    best = best_of([s["val_p_at_1"] for s in scores])
    return {"scores": scores, "setting": scores[best]["setting"], "at_edge": _at_edge(scores, best)}


def _at_edge(scores: list[dict[str, Any]], best: int) -> bool:
    """Whether the chosen value is the lowest or highest tried: the settings tried do not bracket it."""
    numbers = [float(s["setting"][0].split("=", 1)[1]) for s in scores]
    return numbers[best] in (min(numbers), max(numbers))


def tune(plan: Plan, read: Reader = trained) -> dict[str, dict[str, Any]]:
    """Every loss's :func:`tuned` settings; per loss its scores and the chosen setting (with
    ``read=finished_only``, only the losses whose tuning has finished)."""
    chosen = {}
    for loss in plan.losses:
        got = tuned(plan, loss, read)
        if got is None:
            continue
        for s in got["scores"]:
            print(
                f"tune {loss.name} {' '.join(s['setting'])}: validation P@1 {s['val_p_at_1']:.4f}", flush=True
            )
        chosen[loss.name] = got
    return chosen


def final(plan: Plan, chosen: dict[str, dict[str, Any]], read: Reader = trained) -> list[dict[str, Any]]:
    """Every tuned loss's chosen setting on both protocols, each seed; per loss its runs and their summaries
    (with ``read=finished_only``, the finished runs, and a protocol's summaries only once all its seeds
    have finished)."""
    rows = []
    for loss in (loss for loss in plan.losses if loss.name in chosen):
        setting = tuple(chosen[loss.name]["setting"])
        row: dict[str, Any] = {"loss": loss.name, "keys": [*loss.keys, *setting]}
        for protocol in ("a", "b"):
            runs = []
            for seed in plan.seeds:
                workdir = run_dir(plan, protocol, loss.name, *setting, f"seed{seed}")
                got = read(final_line(plan, loss, setting, protocol, seed), workdir)
                if got is None:
                    continue
                rep, loads = got
                runs.append(
                    {
                        "seed": seed,
                        "precision_at_1": rep["precision_at_1"],
                        "map_at_r": map_at_r(workdir),
                        "train_s": rep["timing"]["train_s"],
                        "steps": rep["timing"]["steps_run"],
                        **loads,
                    }
                )
                print(f"({protocol}) {loss.name} seed {seed}: {json.dumps(runs[-1])}", flush=True)
            row[protocol] = {"runs": runs, **(_summary(runs) if len(runs) == len(plan.seeds) else {})}
        rows.append(row)
    return rows


def _unfinished(protocol: dict[str, Any]) -> bool:
    return "precision_at_1_mean" not in protocol


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for key in ("precision_at_1", "map_at_r"):
        values = [r[key] for r in runs]
        out[f"{key}_mean"] = statistics.mean(values)
        out[f"{key}_sd"] = statistics.stdev(values) if len(values) > 1 else None
    return out


def planned(plan: Plan) -> list[tuple[str, str, int]]:
    """(stage, run directory, steps) of every training of the sweep, as far as its finished runs tell: each
    loss's grid, the setting beyond the grid's edge once the grid's scores ask for it, and the final runs of
    the chosen setting (those of the grid's first setting stand for them until the choice is known)."""
    out = []
    for loss in plan.losses:
        asked = [run_dir(plan, "tune", loss.name, *setting) for setting in loss.grid]

        def reported(line: list[str], workdir: str, asked: list[str] = asked) -> tuple[dict, dict] | None:
            asked.append(workdir)
            path = os.path.join(REPOSITORY, workdir, "report.json")
            if not os.path.exists(path):
                return None
            with open(path) as f:
                return json.load(f), {}

        got = tuned(plan, loss, reported)
        out += [("tune", workdir, plan.tune_steps) for workdir in dict.fromkeys(asked)]
        setting = loss.grid[0] if got is None else tuple(got["setting"])
        for protocol, share in (("a", 1.0), ("b", 0.5)):  # (b) trains on half the classes
            for seed in plan.seeds:
                steps = round(share * (plan.steps or plan.full))
                out.append((protocol, run_dir(plan, protocol, loss.name, *setting, f"seed{seed}"), steps))
    return out


def left_to_train(plan: Plan) -> list[tuple[str, int]]:
    """(stage, steps) of every run not finished yet."""
    return [(stage, steps) for stage, workdir, steps in planned(plan) if not _finished_dir(workdir)]


def training_time(plan: Plan, quiet_load: float = QUIET_LOAD) -> dict[str, Any]:
    """The sweep's length: its trainings and steps, and the hours they take at the median training speed of
    the finished runs made on a quiet machine (1-minute load below ``quiet_load`` as each started and ended;
    all finished runs when none was, ``quiet`` False)."""
    runs = planned(plan)
    rates, quiet_rates = [], []
    for _, workdir, _ in runs:
        here = os.path.join(REPOSITORY, workdir)
        if os.path.exists(os.path.join(here, "report.json")):
            with open(os.path.join(here, "report.json")) as f:
                rate = json.load(f)["timing"]["steps_per_s"]
            with open(os.path.join(here, "load.json")) as f:
                load = json.load(f)
            rates.append(rate)
            if max(load["load_before"][0], load["load_after"][0]) < quiet_load:
                quiet_rates.append(rate)
    steps = sum(n for _, _, n in runs)
    rate = statistics.median(quiet_rates or rates) if rates else None
    return {
        "trainings": len(runs),
        "finished": len(rates),
        "steps": steps,
        "steps_per_s": rate,
        "quiet": bool(quiet_rates),
        "quiet_runs": len(quiet_rates),
        "hours": None if rate is None else steps / rate / 3600,
    }


def table(rows: list[dict[str, Any]], raw: dict[str, dict[str, float]]) -> str:
    """The Markdown table of docs/losses.md: each loss's setting and its figures on both protocols."""

    def pct(summary: dict[str, Any], key: str) -> str:
        if f"{key}_mean" not in summary:  # not every seed has finished
            return "–"
        sd = summary[f"{key}_sd"]
        return f"{100 * summary[f'{key}_mean']:.1f}" + ("" if sd is None else f" ± {100 * sd:.1f}")

    body = [
        ["raw pixels (784-d, Euclidean)", "–"]
        + [f"{100 * raw[p][k]:.1f}" for p in ("a", "b") for k in ("precision_at_1", "map_at_r")]
        + ["–"]
    ]
    for r in rows:
        bar = raw["a"]["precision_at_1"] + ABOVE_RAW
        reached = "–" if _unfinished(r["a"]) else "yes" if r["a"]["precision_at_1_mean"] >= bar else "**no**"
        keys = " ".join(k for k in r["keys"] if not k.startswith("loss="))
        body.append(
            [r["loss"], f"`{keys}`" if keys else "–"]
            + [pct(r[p], k) for p in ("a", "b") for k in ("precision_at_1", "map_at_r")]
            + [reached]
        )
    head = ["loss", "tuned keys", "(a) P@1", "(a) MAP@R", "(b) R@1", "(b) MAP@R", "raw + 3 pts on (a)"]
    return markdown_table(head, body, align="llrrrrl")


def tried(chosen: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of the settings each loss tried at the tuning length, with their validation P@1
    (the chosen one in bold)."""
    body = []
    for name, c in chosen.items():
        cells = []
        for s in c["scores"]:
            cell = f"`{' '.join(s['setting'])}` {100 * s['val_p_at_1']:.1f}"
            cells.append(f"**{cell}**" if s["setting"] == c["setting"] else cell)
        body.append([name, " · ".join(cells)])
    return markdown_table(["loss", "settings tried: validation P@1 (chosen in bold)"], body, align="ll")


def page(
    plan: Plan, rows: list[dict[str, Any]], raw: dict[str, dict[str, float]], chosen: dict, time: dict
) -> str:
    """The page's section: how the table was made and how long it trains, the table, the losses under the
    bar, those under the raw pixels on (b), and the settings each loss tried."""
    bar = raw["a"]["precision_at_1"] + ABOVE_RAW
    under = [r["loss"] for r in rows if not _unfinished(r["a"]) and r["a"]["precision_at_1_mean"] < bar]
    complete = time["finished"] == time["trainings"]
    if time["hours"] is None:
        length = ""
    else:
        n = time["quiet_runs"]
        quiet = f"the {n} runs made on a quiet machine" if n > 1 else "the one run made on a quiet machine"
        made = quiet if time["quiet"] else "its runs, under load"
        rate = f"{time['steps_per_s']:.2f} steps/s"
        length = f": about {time['hours']:.1f} h at {rate}, the median speed of {made}"
    text = [
        f"`python -m benchmarks.reality_check --data {plan.data}` (Musgrave, Belongie & Lim 2020): every "
        f"loss trains the same network, data, augmentation and length (`{' '.join(RECIPE)}`). "
        f"Each loss's grid of three values of one key is tuned with one seed at {plan.tune_steps} of the "
        f"{plan.steps or plan.full} steps, on a validation split of a tenth of the training images; the "
        "test set plays no part in the choice. Where the grid's best value is its lowest or highest, one "
        "value beyond that edge is tried too, and the best of all tried goes on. "
        "(a): P@1 and MAP@R of the test images against the training images; (b): the loss trains on "
        "classes 0-4, R@1 and MAP@R among the test images of classes 5-9. Mean ± sd over seeds "
        f"{', '.join(str(s) for s in plan.seeds)}, in %. benchmarks/results/reality_check.json holds every "
        "run's figures and load.",
        f"The sweep is {time['trainings']} trainings, {time['steps']:,} steps in all{length}.",
        *(
            []
            if complete
            else [
                f"**So far {time['finished']} of the {time['trainings']} trainings have finished**, and this "
                f"section shows them (`--so-far`): – marks a protocol whose {len(plan.seeds)} seeds have "
                "not all finished. The command above trains the rest and rewrites the section."
            ]
        ),
        table(rows, raw),
        (
            "Under the bar of raw pixels + 3 points on (a), with the settings below tried: "
            + ", ".join(under)
            + "."
            if under
            else f"Every loss {'' if complete else 'finished on (a) '}reaches raw pixels + 3 points on (a)."
        ),
        *unseen_sentence(rows, raw),
        *edge_sentence(chosen),
        tried(chosen),
    ]
    return "\n\n".join(text)


def edge_sentence(chosen: dict[str, dict[str, Any]]) -> list[str]:
    """The losses whose chosen value is the lowest or highest they tried (a better one may lie beyond it);
    nothing when every choice is bracketed."""
    edge = [name for name, c in chosen.items() if c["at_edge"]]
    if not edge:
        return []
    return [
        "Chosen at the edge of the values tried, so a better setting may lie beyond it: "
        + ", ".join(edge)
        + "."
    ]


def unseen_sentence(rows: list[dict[str, Any]], raw: dict[str, dict[str, float]]) -> list[str]:
    """What the finished losses do on (b) beside the raw pixels' R@1 there (no bar: the bar is on (a) only);
    nothing when no loss has finished on (b)."""
    done = [r for r in rows if not _unfinished(r["b"])]
    if not done:
        return []
    pixels = raw["b"]["precision_at_1"]
    below = [r["loss"] for r in done if r["b"]["precision_at_1_mean"] < pixels]
    if len(below) == len(done):
        return [f"On (b), the raw pixels' R@1 ({100 * pixels:.1f}) is above every loss finished there."]
    if not below:
        return [f"On (b), every loss finished there is above the raw pixels' R@1 ({100 * pixels:.1f})."]
    return [f"On (b), below the raw pixels' R@1 ({100 * pixels:.1f}): {', '.join(below)}."]


def write_page(text: str, path: str = os.path.join(REPOSITORY, PAGE)) -> None:
    """Put ``text`` under the page's reality-check heading (replacing what was there, up to the next
    heading of its level)."""
    with open(path, encoding="utf-8") as f:
        page = f.read()
    start = page.index(HEADING) + len(HEADING)
    end = page.find("\n## ", start)
    files.write_text(path, page[:start] + "\n\n" + text.strip() + "\n" + ("" if end < 0 else page[end:]))


def plan_of(args: argparse.Namespace, root: str) -> Plan:
    """The full sweep's plan, or ``--quick``'s (the digits, two losses, 20 steps, one seed)."""
    if args.quick:
        return Plan("digits", 20, 10, (0,), QUICK_LOSSES, root, full=20)
    full = full_steps(args.data)
    return Plan(args.data, None, max(1, round(TUNE_SHARE * full)), SEEDS, LOSSES, root, full=full)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="idx:data/fashion-mnist", help="the app's dataset= value")
    ap.add_argument("--quick", action="store_true", help="the digits, two losses, a few steps: a smoke run")
    ap.add_argument(
        "--print", action="store_true", help="print the runs left and their expected time, then stop"
    )
    ap.add_argument(
        "--so-far",
        action="store_true",
        help="train nothing: write the table and the page's section from the runs finished so far",
    )
    add_out_argument(ap)
    args = ap.parse_args()
    machine = machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_of(args, os.path.join(tmp, "runs") if args.quick else RUNS)
        left = left_to_train(plan)
        hours = expected_s(plan, left) / 3600
        print(f"{len(left)} trainings left: expected {hours:.1f} h on this machine", flush=True)
        if args.print:
            return
        read = finished_only if args.so_far else trained
        chosen = tune(plan, read)
        rows = final(plan, chosen, read)
        raw = raw_pixels(plan)
    print(table(rows, raw))
    out = destination(args.out, quick=args.quick)
    if out is None:
        return
    time = training_time(plan)
    figures = {"recipe": RECIPE, "data": plan.data, "seeds": list(plan.seeds), "tuning": chosen}
    figures |= {"raw_pixels": raw, "losses": rows, "above_raw": ABOVE_RAW, "training": time}
    print(
        write_result(
            "reality_check", figures, argv=invocation("benchmarks.reality_check"), machine=machine, folder=out
        )
    )
    if out == RESULTS_DIR:
        write_page(page(plan, rows, raw, chosen, time))


if __name__ == "__main__":
    main()
