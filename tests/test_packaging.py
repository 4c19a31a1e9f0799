"""Dependencies by use: ``pip install geojax`` brings what the library imports, the ``train`` extra what the
application, the experiments and the notebooks import, and the application without its extra stops with one
line naming it.

The static tests read pyproject.toml and the imports of the sources (every ``import`` statement, those inside
functions too). The lean-install test builds the wheel, installs it with no extras into a fresh virtual
environment and uses the library there as a user would.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from subprocess_env import child_env

import train

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# Provided by the notebook's own kernel (Jupyter, Colab), not by an install of geojax.
KERNEL_MODULES = {"IPython"}
# Requirements the extra declares for a package that imports them without declaring them (pyproject.toml
# says which): nothing of ours imports them by name.
UNDECLARED_BY_OTHERS = {"importlib-resources", "flatbuffers"}
# What the lean install must not load (nor, but for flax's own orbax-checkpoint, install).
APP_ONLY = ("orbax", "tensorflow_datasets", "sklearn", "matplotlib", "tqdm", "torch")
APP_DISTRIBUTIONS = ("tensorflow-datasets", "scikit-learn", "matplotlib", "tqdm", "flatbuffers", "torch")


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``'orbax-checkpoint>=0.12'`` → that name)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def _extra(name: str) -> set[str]:
    return {_name(r) for r in PROJECT["optional-dependencies"][name]}


def _imported_modules(paths: list[Path]) -> set[str]:
    """The top-level names of the absolute imports in ``paths``, less the standard library and our own."""
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - {"__future__", "geojax", "train"}


def _distributions(modules: set[str]) -> set[str]:
    """The installed distributions that provide ``modules`` (every module must be provided by one)."""
    providers = importlib.metadata.packages_distributions()
    unknown = sorted(m for m in modules if m not in providers)
    assert not unknown, f"no installed distribution provides {unknown}"
    return {_name(d) for m in modules for d in providers[m]}


def _requirements(distribution: str) -> set[str]:
    """The unconditional requirements of an installed distribution (no extras, no environment markers)."""
    requires = importlib.metadata.requires(distribution) or []
    return {_name(r) for r in requires if ";" not in r}


def test_the_library_depends_on_what_it_imports():
    """Every module geojax imports comes from a dependency (or from a dependency's own requirement, as jaxlib
    from jax), and every dependency is imported by geojax: nothing of the application's."""
    declared = {_name(r) for r in PROJECT["dependencies"]}
    imported = _distributions(_imported_modules(sorted((ROOT / "geojax").rglob("*.py"))))
    assert "jax" in imported and "numpy" in imported, "the import scan found nothing: it proves nothing"
    brought = declared | {r for d in declared for r in _requirements(d)}
    assert imported <= brought, f"geojax imports {sorted(imported - brought)}, which it does not depend on"
    assert declared <= imported, f"geojax depends on {sorted(declared - imported)}, which it does not import"


def test_the_train_extra_is_what_the_application_imports():
    """The `train` extra holds what train/ and the notebooks import beyond the library's dependencies, and
    nothing else but the requirements that tfds and jax.export leave undeclared; train.EXTRA_MODULES (what
    ``python -m train`` checks for) names exactly the extra's modules."""
    sources = sorted((ROOT / "train").rglob("*.py")) + sorted((ROOT / "colab").glob("*.py"))
    modules = _imported_modules(sources) - KERNEL_MODULES
    extra = _extra("train")
    core = {_name(r) for r in PROJECT["dependencies"]}
    needed = _distributions(modules) - core
    assert {"orbax-checkpoint", "scikit-learn", "tqdm"} <= needed, "the import scan found too little"
    assert needed <= extra, f"train/ and colab/ import {sorted(needed - extra)}, which no extra brings"
    unused = extra - needed - UNDECLARED_BY_OTHERS
    assert not unused, f"the train extra brings {sorted(unused)}, which nothing imports"
    assert _distributions(set(train.EXTRA_MODULES)) == extra


@pytest.mark.parametrize("name", ["test", "bench", "prepare"])
def test_extras_that_run_the_application_include_it(name):
    assert "geojax[train]" in [r.replace(" ", "") for r in PROJECT["optional-dependencies"][name]]


def test_py_typed_is_shipped():
    assert (ROOT / "geojax" / "py.typed").is_file()
    assert "py.typed" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ].get("geojax", [])


# Every module of the extra reported missing: ``import m`` raises and ``find_spec(m)`` fails, as when the
# package is not installed.
BLOCK = "import sys\nfor m in {modules!r}:\n    sys.modules[m] = None\n"


def _run_module(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, env=child_env(), capture_output=True, text=True
    )


def test_train_without_its_extra_says_which_extra_to_install():
    """``python -m train`` in an environment lacking the extra: one line naming the extra and the missing
    modules, exit status 2, nothing trained."""
    missing = ("tensorflow_datasets", "sklearn", "matplotlib", "tqdm")
    code = BLOCK.format(modules=missing) + "import runpy\nrunpy.run_module('train', run_name='__main__')\n"
    done = _run_module(code, "steps=1")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'geojax[train]'" in lines[0] and "`train` extra" in lines[0]
    assert all(m in lines[0] for m in missing) and "orbax" not in lines[0]
    assert done.stdout == ""


def test_the_check_passes_with_the_extra():
    """Here, with the extra installed, nothing is missing: the blocked run above failed for the extra."""
    assert train.missing_extra_modules() == []
    train.require_extra()


# Run by the lean environment's interpreter, outside the checkout.
LEAN_CHECK = """
import importlib, json, pkgutil, sys
import jax, jax.numpy as jnp, numpy as np
import geojax
from geojax import losses, similarity
from geojax.search import IndexFlat, TorusCodec

modules = sorted(m.name for m in pkgutil.walk_packages(geojax.__path__, "geojax.") if "._" not in m.name)
for name in modules:
    importlib.import_module(name)

x = jax.random.normal(jax.random.key(0), (16, 8))
labels = jnp.arange(16) % 4
loss, grad = jax.value_and_grad(lambda x: losses.supcon(similarity.cosine(x, x), labels))(x)

t = np.random.default_rng(0).random((50, 8), dtype=np.float32)
index = IndexFlat(TorusCodec(8))
index.add(t)
distances, ids = index.search(t[:3], 2)

print(json.dumps({
    "file": geojax.__file__,
    "modules": modules,
    "loss": float(loss),
    "grad_finite": bool(jnp.all(jnp.isfinite(grad))),
    "grad_nonzero": bool(jnp.any(grad != 0)),
    "self_found": np.asarray(ids)[:, 0].tolist(),
    "loaded": sorted({m.partition(".")[0] for m in sys.modules}),
}))
"""


@pytest.fixture(scope="module")
def lean(tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel built from this checkout installed, no extras: its python.

    The wheel is built from a copy of the sources (the build writes no folders into the checkout); pip
    installs into the new environment from this interpreter (``pip --python``: the new one needs no pip of
    its own) and compiles nothing, which leaves the download and unpacking of jax, flax and their
    requirements, from pip's cache or the index."""
    tmp = tmp_path_factory.mktemp("lean")
    source = tmp / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in ("geojax", "train"):
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", tmp / "dist", source], check=True)
    (wheel,) = (tmp / "dist").glob("geojax-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", python, "install", "-q", "--no-compile", wheel], check=True)
    return python


def _lean_run(python: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in child_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([python, *args], cwd=python.parent, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_lean_install_runs_the_library_without_the_application(lean):
    """In the lean environment: geojax (from that environment, with its py.typed) and every public module
    import, a loss has a finite gradient, an IndexFlat finds each query itself; no module of the application's
    extra or of the benchmarks is loaded, and none of their distributions but flax's own orbax-checkpoint is
    installed."""
    done = _lean_run(lean, "-c", LEAN_CHECK)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    installed = Path(out["file"]).parent
    assert installed.is_relative_to(lean.parent.parent), f"geojax imported from {installed}, not the venv"
    assert (installed / "py.typed").is_file(), "the wheel ships no py.typed"
    assert {"geojax.losses", "geojax.search", "geojax.search.flat", "geojax.models"} <= set(out["modules"])
    assert out["grad_finite"] and out["grad_nonzero"] and out["loss"] > 0
    assert out["self_found"] == [0, 1, 2]
    loaded = [m for m in APP_ONLY if m in out["loaded"]]
    assert not loaded, f"importing geojax loaded {loaded}"
    assert "jax" in out["loaded"] and "flax" in out["loaded"]
    listing = "import importlib.metadata as m; print([d.name for d in m.distributions()])"
    names = {_name(n) for n in ast.literal_eval(_lean_run(lean, "-c", listing).stdout)}
    assert "geojax" in names and "jax" in names
    brought = sorted(names & set(APP_DISTRIBUTIONS))
    assert not brought, f"pip install geojax brought {brought}"


@pytest.mark.slow
def test_lean_install_train_names_its_extra(lean):
    """``python -m train`` where only geojax is installed: the one line, exit status 2."""
    done = _lean_run(lean, "-m", "train", "steps=1")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "pip install 'geojax[train]'" in done.stderr
