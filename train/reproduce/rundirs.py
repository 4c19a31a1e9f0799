"""The sweep's run directories: training one run (or the seeds of one configuration) in its directory, or
reading it back finished, the per-run analyses kept beside its report, and the recipe trials committed beside
a paper's runs."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from train import evaluate
from train.app import cli, config, report, rundir
from train.app.errors import UsageError
from train.helpers import files
from train.reproduce.common import Context, command_line, run_args, training_images
from train.reproduce.records import Run, clean, stale, version_text

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


def train_recipe(
    ctx: Context, name: str, *, need_embeddings: bool = True, **overrides: Any
) -> tuple[Run, dict[str, Any] | None]:
    """Train one configuration (a preset by name plus ``overrides``) with the app's own ``train.app.cli.run``
    in its run directory ``ctx.runs_dir/name``, on the config that :func:`run_args` gives as command-line
    arguments; returns (run, embeddings). A run that an earlier invocation finished (its report.json is there,
    for the same config: trained by this sweep, or by hand with its ``python -m train`` line) is read back,
    not trained again; one that was interrupted resumes from its newest checkpoint.

    The embeddings are ``train.evaluate.load_run``'s dict of the run's embeddings.npz (with the trained
    ``similarity``). A finished run read back without them (its report.json and config.json alone, as
    committed under ``docs/runs/``) returns None in their place where the caller does not
    ``need_embeddings``, and is refused with one line where it does. A run whose training metrics become
    non-finite (``FloatingPointError`` from the loop) is
    recorded as diverged and returns no embeddings. In listing mode (``ctx.listing``) the run's command line
    is appended there and the run returned untrained (no report, no embeddings).
    """
    if any(r.name == name for r in ctx.runs):
        raise ValueError(f"run name {name!r} is used twice in one reproduction")
    args = run_args(ctx, name, overrides)
    cfg = config.from_args(args)
    epochs = round(cfg.steps * cfg.batch_size / training_images(cfg, ctx.dataset), 3)
    run = Run(
        name=name,
        overrides=dict(overrides),
        seed=cfg.seed,
        steps=cfg.steps,
        epochs=epochs,
        workdir=cfg.workdir,
    )
    if ctx.listing is not None:
        ctx.listing.append(command_line(args))
        ctx.runs.append(run)
        return run, None
    t0 = time.time()
    current = report.code_version()
    emb: dict[str, Any] | None
    finished = os.path.join(cfg.workdir, "report.json")
    try:
        if is_finished(cfg):  # by an earlier invocation, by hand, or committed
            with open(finished) as f:
                rep = json.load(f)
            run.extra["reused"] = True
        else:  # new, or interrupted: train.app.cli.run resumes from the run directory's newest checkpoint
            rep = {**cli.run(cfg), "code_version": current}
        emb = _embeddings(cfg.workdir, need=need_embeddings)
        run.code_version, run.device = rep.get("code_version"), rep.get("device")
        run.report = {k: v for k, v in rep.items() if k not in ("workdir", "device", "code_version")}
    except FloatingPointError as err:
        emb = None
        run.diverged, run.error, run.code_version = True, str(err)[:300], current
    # A run read back keeps the wall time it took when it was trained (training and evaluation).
    reused = run.report is not None and run.extra.get("reused")
    run.wall_s = run.report["timing"]["total_s"] if reused else round(time.time() - t0, 2)
    _read_training_log(run, os.path.join(cfg.workdir, "metrics.jsonl"))
    ctx.runs.append(run)
    state = "DIVERGED" if run.diverged else "finished earlier" if run.extra.get("reused") else "done"
    if run.stale(current):
        state += f" (STALE: trained by {version_text(run.code_version)}, not the current code)"
    print(f"  run {name}: {state} in {run.wall_s} s", flush=True)
    return run, emb


TRIALS = "recipe-trials"  # a sub-folder of a paper's runs: the recipes tried before the sweep's, one run each


def recipe_trials(runs_dir: str) -> list[dict[str, Any]]:
    """The recipes tried for a paper's runs before its sweep's own, committed as run directories (each its
    config.json and report.json, trained by hand with the sweep's ``python -m train`` line and one change)
    under ``runs_dir/recipe-trials``: the one named ``base`` (the sweep's recipe at the trials' length) first,
    then the others by name, each with its name, the keys it changes from ``base``, its steps, P@1 and the raw
    pixels' 1-NN under the same protocol. [] where none were committed."""
    folder = os.path.join(runs_dir, TRIALS)
    if not os.path.isdir(folder):
        return []
    found = {}
    for name in sorted(os.listdir(folder), key=lambda n: (n != "base", n)):
        paths = [os.path.join(folder, name, f) for f in ("config.json", "report.json")]
        if all(os.path.isfile(p) for p in paths):
            with open(paths[0], encoding="utf-8") as f, open(paths[1], encoding="utf-8") as g:
                found[name] = (json.load(f), json.load(g))
    if "base" not in found:
        raise ValueError(f"{folder} holds no 'base' run (the sweep's recipe) to compare the others with")
    base = found["base"][0]
    return [
        {
            "name": name,
            "changes": {k: v for k, v in cfg.items() if k != "workdir" and base.get(k) != v},
            "steps": cfg["steps"],
            "p_at_1": rep["precision_at_1"],
            "raw": rep["baseline_raw_1nn"]["precision_at_1"],
        }
        for name, (cfg, rep) in found.items()
    ]


ANALYSIS_FILE = "analysis.json"  # a run's per-run analyses, kept (and committed) beside its report


def run_analysis(
    run: Run, emb: dict[str, Any] | None, key: str, compute: Callable[[dict[str, Any]], Any]
) -> Any:
    """A per-run analysis that needs the run's embeddings (e.g. its quantised report, per-query outcomes),
    kept under ``key`` in its run directory's ``analysis.json`` so that a run read back without its
    embeddings (committed under ``docs/runs/``) still has it. Computed from ``emb`` with ``compute`` where
    it is not stored for this very report (the file records report.json's SHA-256: a run trained again has
    its analyses computed again) and written atomically; None for a run that diverged. A run with neither
    the analysis nor its embeddings is refused with one line naming what is missing."""
    if run.diverged or run.report is None:
        return None
    path = os.path.join(run.workdir, ANALYSIS_FILE)
    digest = _sha256(os.path.join(run.workdir, "report.json"))
    stored: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("report_sha256") != digest:
            stored = {}  # the analyses of an earlier training of this run directory
    if key in stored.get("analyses", {}):
        return stored["analyses"][key]
    if emb is None:
        raise ValueError(
            f"run {run.name!r}: analysis {key!r} is not stored in {path} and the run's embeddings.npz is not "
            "there to compute it: train the run again (remove its report.json) or put its embeddings.npz back"
        )
    value = clean(compute(emb))
    stored = {"report_sha256": digest, "analyses": {**stored.get("analyses", {}), key: value}}
    files.write_json(path, stored)
    return value


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


REPORT_KEYS = ("precision_at_1", "timing")  # what every finished run's report.json holds


def read_back(cfg: RunConfig) -> tuple[dict[str, Any] | None, str | None]:
    """What ``cfg.workdir`` holds, changing nothing: (its report, None) for this run finished (its
    report.json beside the config.json of this config, ``train.app.rundir.check_workdir``, at its steps);
    (None, None) for no report or one of fewer steps (a run to train or resume); (None, why) for a report
    that cannot be read back as this run's: damaged (not JSON, or without what every report holds) or
    foreign (beside another run's config.json, an unreadable one, or none)."""
    path = os.path.join(cfg.workdir, "report.json")
    if not os.path.exists(path):
        return None, None
    try:
        saved = rundir.check_workdir(cfg)
        with open(path, encoding="utf-8") as f:
            rep = json.load(f)
    except UsageError as err:
        return None, str(err).removeprefix(f"workdir {cfg.workdir!r} ")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, f"its report.json cannot be read ({err})"
    if saved is None:
        return None, "its report.json has no config.json beside it"
    if not isinstance(rep, dict) or any(k not in rep for k in REPORT_KEYS):
        return None, f"its report.json lacks what every report holds ({', '.join(REPORT_KEYS)})"
    return (rep, None) if saved.get("steps") == cfg.steps else (None, None)


def is_finished(cfg: RunConfig) -> bool:
    """Whether ``cfg.workdir`` holds this run finished (:func:`read_back`).

    A report that cannot be read back as this run's is refused in one line and its run directory set aside
    (renamed ``<run>.refused``, replacing an earlier one), so that the run trains again."""
    rep, problem = read_back(cfg)
    if problem is not None:
        _set_aside(cfg, "refused", problem)
    return rep is not None


def retrain_if_stale(cfg: RunConfig, current: dict[str, Any]) -> bool:
    """Set ``cfg.workdir`` aside (renamed ``<run>.stale``, replacing an earlier one) when it holds this run
    finished by code other than ``current`` (:func:`train.reproduce.records.stale`), so that the sweep trains
    it again on the current code; whether it did. A run it cannot read back is left to :func:`is_finished`."""
    rep, _ = read_back(cfg)
    if rep is None or not stale(rep.get("code_version"), current):
        return False
    _set_aside(cfg, "stale", f"trained by {version_text(rep.get('code_version'))}, not the current code")
    return True


def _set_aside(cfg: RunConfig, suffix: str, why: str) -> None:
    """Rename ``cfg.workdir`` to ``<run>.<suffix>`` (replacing an earlier one) and say why in one line."""
    aside = os.path.normpath(cfg.workdir) + "." + suffix
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(cfg.workdir, aside)
    name = os.path.basename(os.path.normpath(cfg.workdir))
    print(f"  run {name}: {suffix}: {why}; set aside as {aside}, trained again", flush=True)


def _embeddings(workdir: str, *, need: bool) -> dict[str, Any] | None:
    """The run's embeddings (``train.evaluate.load_run``); None for a run that has its report alone, or a
    ValueError naming the run where they are needed."""
    if os.path.exists(os.path.join(workdir, "embeddings.npz")):
        return evaluate.load_run(workdir)
    if need:
        raise ValueError(
            f"run {workdir!r} has a report but no embeddings.npz, which this paper's analysis needs: train "
            "it again (remove its report.json) or put its embeddings.npz back"
        )
    return None


def train_seeds(
    ctx: Context, name: str, seeds: int, *, need_embeddings: bool = True, **overrides: Any
) -> list[tuple[Run, dict[str, Any] | None]]:
    """Train seeds 0 … seeds − 1 of one configuration; returns (run ``<name>-seed<s>``, embeddings) per seed.

    Each seed has its own run directory (:func:`train_recipe`), or, where the scale trains replicas, the seeds
    are one program of ``seeds=S`` replicas in ``<name>-seeds<S>`` (train.app.cli's several-seeds run, each
    replica exactly its single-seed run), split into one record per seed that holds the program's training log
    and an equal share of its wall time (so that sums over records count the program once); only seed 0 has
    embeddings then (the app writes the first replica's).
    """
    if not ctx.scale.replicas or seeds == 1:
        return [
            train_recipe(ctx, f"{name}-seed{s}", need_embeddings=need_embeddings, **overrides, seed=s)
            for s in range(seeds)
        ]
    program, emb = train_recipe(
        ctx, f"{name}-seeds{seeds}", need_embeddings=need_embeddings, **overrides, seeds=seeds
    )
    ctx.runs.remove(program)
    per_seed = [None] * seeds if program.report is None else program.report["per_seed"]
    out = []
    for s, seed_report in enumerate(per_seed):
        run = dataclasses.replace(
            program,
            name=f"{name}-seed{s}",
            seed=s,
            report=seed_report,
            wall_s=round(program.wall_s / seeds, 2),
            extra={**program.extra, "program": program.name},
        )
        out.append((run, emb if s == 0 else None))
    ctx.runs.extend(run for run, _ in out)
    return out


def _read_training_log(run: Run, path: str) -> None:
    """From the run's metrics.jsonl: largest logged gradient norm, logged steps with a norm over 100, and
    the logged loss values."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    finite = [g for g in (r.get("grad_norm", math.nan) for r in rows) if math.isfinite(g)]
    run.max_grad_norm = max(finite) if finite else None
    run.steps_over_100 = int(sum(g > 100.0 for g in finite))
    run.logged_steps = len(rows)
    run.loss_trace = [r["loss"] for r in rows]
