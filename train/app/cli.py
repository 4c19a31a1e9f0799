"""Train, evaluate, write a run directory: what ``python -m train``, reproduction, tests and notebooks call.

The run directory gets config.json, metrics.jsonl, checkpoints/, curve.png, embeddings.npz and report.json
(with ``select_best``: best/ and selection.json too, and the report's ``selection``, the chosen evaluation's
step, epoch and validation P@1 per seed).
Rerunning with the same ``workdir`` resumes from its latest checkpoint. A several-seeds run (``seeds=S``)
reports the mean over its replicas, ``<key>_std`` beside each number and ``per_seed``, the S single-seed
reports in seed order; its embeddings.npz holds the first seed's embeddings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING

import jax
import numpy as np

from train.app import config, hosts, loop, report
from train.app.errors import UsageError
from train.helpers import plots

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


def run(cfg: RunConfig, *, stop_at: int | None = None) -> dict | None:
    """Train ``cfg``, evaluate it and write its run directory (config, metrics, curve, embeddings, report).

    Rerunning a config whose ``workdir`` holds a finished run evaluates it again without training.

    Args:
        cfg: the run's configuration (:func:`train.app.config.from_args` or :func:`train.app.config.make`).
        stop_at: stop training after this step (a checkpoint is written there) and return None, for tests
            of resumption; None trains to ``cfg.steps``.

    Returns:
        The report (what report.json holds: precision@1, kNN accuracy, circular variance, the raw-pixel
        baseline, timing, dataset, preset, geometry, loss, device and workdir; with ``seeds`` > 1 the mean
        over seeds, ``<key>_std`` and ``per_seed``), or None when stopped early by ``stop_at``.

    Raises:
        UsageError: a bad key, value or combination, a missing data set, or a ``workdir`` holding another
            run (raised by the training loop before any work is done).
    """
    t0 = time.time()
    workdir, cfg, graphdef, state, ds, timing = loop.train(cfg, stop_at=stop_at)
    if int(np.max(state["step"])) < cfg.steps:
        return None
    t_eval = time.time()
    per_seed, first = report.evaluate(cfg, graphdef, state, ds)
    results = per_seed[0] if cfg.seeds == 1 else {**report.over_seeds(per_seed), "per_seed": per_seed}
    timing["eval_s"] = round(time.time() - t_eval, 2)
    timing["total_s"] = round(time.time() - t0, 2)
    previous = os.path.join(workdir, "report.json")
    if timing["steps_run"] == 0 and os.path.exists(previous):  # a finished run, evaluated again
        with open(previous) as f:
            timing = {**json.load(f).get("timing", {}), "eval_s": timing["eval_s"]}
    out = {
        **results,
        "timing": timing,
        "dataset": ds.name,
        "n_query": len(ds.test_y),
        "n_reference": len(ds.test_y) - 1 if cfg.classes == "disjoint" else len(ds.train_y),
        "preset": cfg.preset,
        "geometry": cfg.geometry,
        "loss": cfg.loss,
        "device": jax.devices()[0].device_kind,
        "workdir": workdir,
    }
    selection = os.path.join(workdir, "selection.json")
    if cfg.select_best and os.path.exists(selection):  # the evaluation whose weights were reported, per seed
        with open(selection) as f:
            out["selection"] = json.load(f)["best"]
    if jax.process_index() == 0:
        report.write_embeddings(os.path.join(workdir, "embeddings.npz"), cfg, *first, ds)  # the first seed's
        plots.plot_curve(os.path.join(workdir, "metrics.jsonl"), os.path.join(workdir, "curve.png"))
        report.write(workdir, out)
    return out


def summary(rep: dict) -> str:
    """A few human-readable lines of a report: the headline metrics beside the raw-pixel 1-NN, then timing.

    Args:
        rep: a report as :func:`run` returns it (or as report.json holds it).

    Returns:
        Two to four lines joined by newlines: the preset, data set, geometry and loss with precision@1,
        kNN accuracy and circular variance; the linear-probe accuracies when measured; the timing and the
        report's path.
    """
    base = rep["baseline_raw_1nn"]["precision_at_1"]
    cv = rep["circular_variance"]
    lines = [
        f"{rep['preset']} on {rep['dataset']} ({rep['geometry']}, {rep['loss']}): "
        f"precision_at_1 {rep['precision_at_1']:.4f} (raw-pixel 1-NN {base:.4f}), "
        f"knn_accuracy@{rep['knn_k']} {rep['knn_accuracy']:.4f}, "
        f"circular_variance {'n/a' if cv is None else f'{cv:.4f}'}"
    ]
    for key in ("linear_probe_accuracy", "piecewise_linear_accuracy"):
        if key in rep:
            lines.append(f"{key} {rep[key]:.4f}")
    t = rep["timing"]
    lines.append(
        f"train {t['train_s']} s ({t['steps_per_s']} steps/s on {t['devices']} device(s)), "
        f"eval {t['eval_s']} s, total {t['total_s']} s; report: {rep['workdir']}/report.json"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``python -m train ARGS``: parse ``key=value`` arguments, run, print a summary.

    ``-h``, ``--help`` or ``help`` prints the configuration's help text instead.

    Args:
        argv: the command-line arguments after the program name, each ``key=value`` (or a help flag).

    Returns:
        The exit status: 0 on success, 2 on a usage error (one line on stderr), 128 + the signal number
        when SIGINT / SIGTERM stopped training (saved, resumable), 130 on Ctrl-C before the first step.
        In a multi-process run a signal to any process stops all of them with the same status, and a
        process that fails exits at once and makes the others exit with status 1 and a line naming it
        (:mod:`train.app.hosts`).
    """
    if any(a in ("-h", "--help", "help") for a in argv):
        print(config.help_text())
        return 0
    try:  # bad keys, values, combinations, data or run directory: a one-line message, exit status 2
        rep = run(config.from_args(argv))
    except loop.Interrupted as stop:  # SIGINT / SIGTERM while training (every process): saved, resumable
        print(stop, file=sys.stderr)
        return 128 + stop.signum
    except Exception as err:
        if hosts.several():  # this process alone: the others would wait for it in a collective
            hosts.leave(2 if isinstance(err, UsageError) else 1, err)
        if not isinstance(err, UsageError):
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C before training started (loading, compiling): nothing to save
        if hosts.several():
            hosts.leave(130, err)
        print("interrupted before the first step: nothing was trained", file=sys.stderr)
        return 130
    if jax.process_index() == 0:  # in a multi-process run, the lead speaks for all
        print(json.dumps({k: rep[k] for k in ("precision_at_1", "knn_accuracy", "circular_variance")}))
        print(summary(rep))
    return 0
