"""geojax's training application and the programs that use it.

- :mod:`train.app`: the application itself (``python -m train key=value …``);
- the experiments, each its own program on top of the application: :mod:`train.reproduce` (the papers'
  claims), :mod:`train.qat` (quantisation-aware fine-tuning), :mod:`train.evaluate` (quantised retrieval of a
  trained run), :mod:`train.binary_eval` (binary embeddings), :mod:`train.export` (integer-only search export)
  with its C and NumPy readers in :mod:`train.csearch`;
- :mod:`train.helpers`: what the application, the experiments, ``benchmarks/`` and the notebooks share.

``pip install geojax`` brings only what the library imports; the application needs the ``train`` extra
(``pip install 'geojax[train]'``), and :mod:`train.app` stops with :class:`MissingExtra` without it.
"""

from __future__ import annotations

import importlib.util

# The top-level modules that the `train` extra of pyproject.toml installs, one per requirement there
# (tests/test_packaging.py holds the two equal).
EXTRA_MODULES = (
    "optax",
    "orbax",
    "tensorflow_datasets",
    "importlib_resources",
    "tqdm",
    "flatbuffers",
    "sklearn",
    "matplotlib",
    "scipy",
)
INSTALL = "pip install 'geojax[train]' (in a checkout: pip install -e '.[train]')"


class MissingExtra(ImportError):
    """The application was imported without the ``train`` extra installed; the message names the missing
    modules and the command that installs them."""


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules (blocked)
        return False


def missing_extra_modules() -> list[str]:
    """The modules of the ``train`` extra that this environment lacks, in :data:`EXTRA_MODULES` order."""
    return [name for name in EXTRA_MODULES if not _importable(name)]


def require_extra() -> None:
    """Raise :class:`MissingExtra` unless every module of the ``train`` extra can be imported."""
    missing = missing_extra_modules()
    if missing:
        names = ", ".join(missing)
        needs = "geojax's training application needs its `train` extra"
        raise MissingExtra(f"{needs} (no module {names}): {INSTALL}")
