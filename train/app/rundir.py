"""The run directory: checked before any work, the state a run starts from (resumed, or another run's with
``init_from``), and config.json and metrics.jsonl written for the run.

A run directory holds ``config.json``, ``metrics.jsonl`` and orbax ``checkpoints/``; rerunning a command with
the same ``workdir`` resumes its run from the newest checkpoint, or extends a finished one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from train.app import checkpoint, config, optim, step
from train.app.errors import UsageError
from train.helpers import files

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


def say(text: str) -> None:
    """One line for the user on stderr (from the lead process only).

    Args:
        text: the line, without its newline.
    """
    if jax.process_index() == 0:
        print(text, file=sys.stderr, flush=True)


def _fresh_workdir() -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = os.path.join("runs", stamp if i == 0 else f"{stamp}-{i}")
        if not os.path.exists(path):
            return path
    raise RuntimeError("could not find a fresh run directory under runs/")


def _recipe(values: dict[str, Any]) -> dict[str, Any]:
    """What a run computes: the keys it uses, less how it executes (``run`` keys) and its length (a rerun may
    extend a run). A key a saved config lacks was added after that run, at the default that keeps what the
    code computed before it (``simo_orthogonality_weight=1.0``: eq. 1 as it was)."""
    used = config.used({**config.DEFAULTS, **values})
    return {k: v for k, v in used.items() if k not in config.RUN_KEYS + config.LENGTH_KEYS}


def check_workdir(cfg: RunConfig) -> dict[str, Any] | None:
    """Check, before any work, that ``cfg.workdir`` can hold this run.

    A run directory may hold the same recipe (the keys its run uses, less the ``run`` keys and the length):
    rerunning it resumes or extends that run.

    Args:
        cfg: the run's configuration (``workdir`` None: a fresh directory, nothing to check).

    Returns:
        The config.json saved in ``cfg.workdir`` (a dict of every key), or None when there is none.

    Raises:
        UsageError: ``workdir`` is a file, its config.json cannot be read, or it holds a run of another
            recipe (the message names the keys that differ).
    """
    if cfg.workdir is None:
        return None
    if os.path.exists(cfg.workdir) and not os.path.isdir(cfg.workdir):
        raise UsageError(f"workdir {cfg.workdir!r} is a file, not a directory")
    path = os.path.join(cfg.workdir, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise UsageError(
            f"workdir {cfg.workdir!r}: cannot read its config.json ({err}); use a fresh workdir"
        ) from None
    saved_recipe, recipe = _recipe(saved), _recipe(dataclasses.asdict(cfg))
    diff = sorted(k for k in set(saved_recipe) | set(recipe) if saved_recipe.get(k) != recipe.get(k))
    if diff:
        raise UsageError(
            f"workdir {cfg.workdir!r} holds a run with a different config (keys {diff}); "
            f"use a fresh workdir to start a new run"
        )
    return saved


def _newest(directory: str, like: step.State, steps: int, what: str) -> tuple[step.State, int] | None:
    """The newest checkpoint under ``directory`` restored into ``like``'s structure, and its step; None when
    there is none. ``what`` names its run in the error for a step past ``steps``."""
    ckpt = checkpoint.Checkpointer(directory)
    try:
        restored = ckpt.restore(like)
    finally:
        ckpt.close()
    if restored is None:
        return None
    start = int(np.max(restored["step"]))
    if start > steps:
        raise UsageError(f"{what} at step {start}; steps must be ≥ {start}")
    return restored, start


def _init_from(cfg: RunConfig, like: step.State) -> tuple[step.State, int]:
    """The newest checkpoint of run directory ``cfg.init_from`` restored into ``like``'s structure, and its
    step: a new run's starting point (before its own workdir is touched)."""
    source = os.path.join(cfg.init_from, "checkpoints")
    if not os.path.isdir(source):
        raise UsageError(f"init_from {cfg.init_from!r} is not a run directory with checkpoints")
    try:
        restored = _newest(source, like, cfg.steps, f"init_from {cfg.init_from!r} is")
    except checkpoint.CheckpointError as err:
        raise UsageError(f"init_from {cfg.init_from!r}: {err}") from None
    if restored is None:
        raise UsageError(f"init_from {cfg.init_from!r} holds no checkpoint")
    say(f"starting from step {restored[1]} of {cfg.init_from}")
    return restored


def prepare(cfg: RunConfig, start: int) -> str:
    """Create (or reuse) the run directory, keep its metrics up to step ``start`` and write config.json.

    Args:
        cfg: the run's configuration (``workdir`` None: a fresh directory under ``runs/``).
        start: the step the run starts from; the metrics lines after it are dropped (a resumed run rewrites
            them).

    Returns:
        The run directory's path.
    """
    workdir = cfg.workdir or _fresh_workdir()
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
        _trim_log(os.path.join(workdir, "metrics.jsonl"), start)
        files.write_json(os.path.join(workdir, "config.json"), dataclasses.asdict(cfg) | {"workdir": workdir})
    return workdir


def _trim_log(path: str, upto: int) -> None:
    """Keep only the metrics lines of steps ≤ ``upto`` (a resumed run rewrites what follows)."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = [ln for ln in f if ln.strip() and json.loads(ln)["step"] <= upto]
    files.write_text(path, "".join(lines))


def resume(cfg: RunConfig, fresh: step.State, saved: dict[str, Any] | None) -> tuple[step.State, int]:
    """The state a run starts from, and its step.

    The newest checkpoint of the run directory, else that of ``init_from``'s run, else ``fresh``; each is
    restored into ``fresh``'s structure.

    Args:
        cfg: the run's configuration (``workdir``, ``init_from``, ``steps``).
        fresh: the run's fresh state (:func:`train.app.step.build`).
        saved: the run directory's config.json (:func:`check_workdir`), or None when it has none.

    Returns:
        (the state, its step).

    Raises:
        UsageError: a checkpoint past ``steps``, or an unusable ``init_from``.
        CheckpointError: the run directory holds checkpoints but none can be restored.
    """
    state, start = fresh, 0
    if saved is not None:
        where = os.path.join(cfg.workdir, "checkpoints")
        restored = _newest(where, fresh, cfg.steps, f"workdir {cfg.workdir!r} holds a run")
        if restored is not None:
            state, start = restored
            _say_resume(cfg, saved, start)
    if start == 0 and cfg.init_from is not None:
        state, start = _init_from(cfg, state)
    return state, start


def _say_resume(cfg: RunConfig, saved: dict[str, Any], start: int) -> None:
    """Tell the user that a run resumes, and what raising ``steps`` does to a finished run's schedule."""
    before = saved.get("steps")
    if before is not None and cfg.steps > before and start >= before:
        lr = float(optim.schedule(cfg)(start))
        say(
            f"extending the finished run in {cfg.workdir} from {before} to {cfg.steps} steps: the learning "
            f"rate follows the schedule of a {cfg.steps}-step run, from its step-{start} value {lr:.3g}"
        )
    elif start < cfg.steps:
        say(f"resuming from step {start} of {cfg.steps} ({cfg.workdir})")
