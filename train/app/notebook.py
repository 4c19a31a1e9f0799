"""What the colab notebooks share, imported instead of pasted into each of them.

Every notebook's set-up cell installs geojax when it is missing, then calls :func:`show_devices`. The
notebooks that train call :func:`runs_dir` once and :func:`train_run` per run: one ``python -m train`` run,
in-process (:func:`train.app.config.make` then :func:`train.app.cli.run`).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import jax

from train.app import cli, config


def show_devices() -> None:
    """Print the JAX version, its devices and whether they are an accelerator (anything but the CPU)."""
    print("jax", jax.__version__, "devices:", jax.devices())
    print("accelerator:", jax.default_backend() != "cpu")


def runs_dir(path: str = "") -> str:
    """The folder that holds a notebook's run directories, printed.

    Args:
        path: the folder (created when missing); empty: a fresh temporary folder.

    Returns:
        The folder's path.
    """
    root = path or tempfile.mkdtemp(prefix="geojax-notebook-")
    os.makedirs(root, exist_ok=True)
    print("run directories under", root)
    return root


def train_run(name: str, *, root: str, **overrides: Any) -> dict[str, Any]:
    """Train one config (a preset and ``key=value`` overrides, as ``python -m train``) in ``root/name``.

    Without progress bars or intermediate checkpoints; prints the first line of the run's summary and
    returns its report (the dict written to report.json). Rerunning with the same ``root`` and ``name``
    resumes from the run's last checkpoint (a finished run is evaluated again, not retrained); a different
    config there is refused.

    Args:
        name: the run directory's name under ``root``.
        root: the folder of the run directories (:func:`runs_dir`).
        **overrides: config keys with their values (``preset`` among them), as :func:`train.app.config.make`
            takes them.

    Returns:
        The run's report (the dict written to report.json).

    Raises:
        UsageError: a bad key, value or combination, or a run directory holding another config (raised
            by :func:`train.app.config.make` and :func:`train.app.cli.run`).
    """
    cfg = config.make(workdir=os.path.join(root, name), progress=False, checkpoint_every=10**6, **overrides)
    report = cli.run(cfg)
    print(cli.summary(report).splitlines()[0])
    return report
