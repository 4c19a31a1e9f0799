"""The colab notebooks: each colab/NN_name.ipynb is generated from colab/NN_name.py (jupytext percent format)
and must match it; each runs top to bottom at tiny size (nbclient, python3 kernel of this environment).

The sync tests are fast. The execution tests are marked ``slow``: the cell tagged ``parameters`` is followed
by an injected cell holding tiny values (papermill-style, without papermill); each notebook must run without
error and produce its key outputs (figures, tables). The selected notebooks execute two at a time (one kernel
per core). The default run leaves them out; run them with ``pytest -q -m slow tests/test_notebooks.py``.
"""

from __future__ import annotations

import asyncio
import os
import re

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
jupytext = pytest.importorskip("jupytext")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLAB = os.path.join(ROOT, "colab")

# Tiny overrides (RUNS_DIR is added per test) and what each notebook must show: number of figures at least,
# and strings that must appear in its text output.
CASES = {
    "01_quickstart.ipynb": (
        {"N": 40, "D": 8, "GD_STEPS": 3},
        3,
        [
            "torusN identity on Clifford vectors: True",
            "cosine of Clifford vectors == mean cos(2π Δt): True",
            "KoLeo(±e1, ±e2) = -0.346574",
            "wraparound distance 250 vs 5 = 11",
            "gradient finite: True",
        ],
    ),
    "02_torus_embeddings.ipynb": (
        {
            "STEPS": 4,
            "BATCH": 32,
            "WIDTH": 32,
            "DIM": 16,
            "GEOMETRIES": ("torus_n",),
            "KOLEO_SWEEP": (0.1,),
            "UNCLIPPED_TORUS_C": False,
            "PQ_ITERS": 1,
        },
        2,
        ["| geometry | KoLeo | P@1 |", "| torus_n |", "8-bit", "PQ(8,2)", "1-bit"],
    ),
    "03_atlas.ipynb": (
        {
            "STEPS": 4,
            "BATCH": 32,
            "WIDTH": 32,
            "CHARTS": (4,),
            "METHODS": ("mtriplet", "msimclr"),
            "PROBE_EPOCHS": 1,
        },
        3,
        ["| method | n | d | P@1 (d_M) |", "| mtriplet | 4 |", "| msimclr | 4 |"],
    ),
    "04_binary_embedding.ipynb": (
        {"FACTORS": (0.5, 1.0), "RANK": 2, "ITQ_ITERS": 2, "TP_ITERS": 1, "QUERIES": 50},
        2,
        [
            "4096 -> 4096 bits: TT 1,152 params",
            "4096 -> 1024 bits: TT 1,088 params",
            "matvec == dense @ x: True",
            "| bits | method | mAP |",
            "non-increasing: True",
        ],
    ),
    "05_losses_and_similarities.ipynb": (
        {
            "STEPS": 4,
            "BATCH": 32,
            "WIDTH": 32,
            "DIM": 8,
            "RUNS": (("sincere", "neg_arc_length"),),  # one run: the loop, table and histograms are per run
            "SIMO": True,
        },
        2,
        [
            "| loss | similarity | 1NN (P@1) |",
            "| sincere | neg_arc_length |",
            "SimO on orthogonal classes",
            "linear probe accuracy",
            "mean |cos| between class means",
        ],
    ),
}


def _inject(nb, overrides: dict) -> int:
    """Insert a cell setting ``overrides`` after the single cell tagged 'parameters'; return its index."""
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"expected one cell tagged 'parameters', found {len(tagged)}"
    names = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*=", nb.cells[tagged[0]].source, flags=re.M))
    unknown = set(overrides) - names
    assert not unknown, f"overrides {sorted(unknown)} are not set in the parameters cell ({sorted(names)})"
    lines = [f"{k} = {v!r}" for k, v in overrides.items()]
    source = "\n".join(["# injected by tests/test_notebooks.py", *lines])
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(tagged[0] + 1, cell)
    return tagged[0] + 1


def _outputs(nb) -> tuple[int, str]:
    figures, text = 0, []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text.append(out["text"])
            data = out.get("data", {})
            if "image/png" in data:
                figures += 1
            if "text/plain" in data:
                text.append(data["text/plain"])
    return figures, "".join(text)


def _cells(nb) -> list[tuple[str, str, dict]]:
    return [(c.cell_type, c.source, dict(c.metadata)) for c in nb.cells]


@pytest.mark.parametrize("name", sorted(CASES))
def test_notebook_matches_its_source(name):
    """The committed .ipynb holds exactly the cells (type, source, metadata) and the notebook metadata that
    jupytext writes from the .py source; outputs, execution counts and cell ids are not compared."""
    source = os.path.join(COLAB, name.removesuffix(".ipynb") + ".py")
    generated = nbformat.reads(jupytext.writes(jupytext.read(source), fmt="ipynb"), as_version=4)
    committed = nbformat.read(os.path.join(COLAB, name), as_version=4)
    nbformat.validate(committed)
    stale = f"colab/{name} differs from its source: run `jupytext --to ipynb --update colab/*.py`"
    assert _cells(committed) == _cells(generated), stale
    assert committed.metadata == generated.metadata, stale
    assert committed.metadata["kernelspec"]["name"] == "python3", "Colab runs the python3 kernel"
    assert committed.metadata["accelerator"] == "GPU", "Colab opens the notebook on a GPU runtime"
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit without outputs"


CONCURRENT_KERNELS = 2  # notebooks executed at once: one per core of the 2-core CI machine


async def _execute_all(notebooks: dict, limit: int) -> dict:
    """Execute ``notebooks`` (name -> notebook, in place), at most ``limit`` kernels at a time; name -> the
    exception a notebook raised, or None."""
    gate = asyncio.Semaphore(limit)

    async def one(nb):
        async with gate:
            client = nbclient.NotebookClient(
                nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": ROOT}}
            )
            await client.async_execute()

    done = await asyncio.gather(*(one(nb) for nb in notebooks.values()), return_exceptions=True)
    return {name: err or None for name, err in zip(notebooks, done, strict=True)}


@pytest.fixture(scope="module")
def executed(request, tmp_path_factory):
    """The notebooks this session runs, each with its tiny values injected, executed in fresh python3 kernels
    of this interpreter, CONCURRENT_KERNELS at a time: name -> (executed notebook, its exception or None)."""
    names = sorted(
        {
            item.callspec.params["name"]
            for item in request.session.items
            if item.originalname == "test_notebook_runs"
        }
    )
    notebooks = {}
    for name in names:
        nb = nbformat.read(os.path.join(COLAB, name), as_version=4)
        overrides = CASES[name][0]
        if any("RUNS_DIR" in c.source for c in nb.cells if c.cell_type == "code"):
            overrides = {**overrides, "RUNS_DIR": str(tmp_path_factory.mktemp(name.removesuffix(".ipynb")))}
        _inject(nb, overrides)
        notebooks[name] = nb
    # Each kernel is a fresh process of this interpreter: one CPU device (not the suite's four fake ones).
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("XLA_FLAGS", flags)
        env.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        env.setenv("PYTHONPATH", os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
        errors = asyncio.run(_execute_all(notebooks, CONCURRENT_KERNELS))
    return {name: (notebooks[name], errors[name]) for name in names}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_notebook_runs(name, executed):
    nb, error = executed[name]
    if error is not None:
        raise error
    _, min_figures, expected = CASES[name]
    figures, text = _outputs(nb)
    assert "jax" in text and "devices:" in text
    assert figures >= min_figures, f"{name}: {figures} figures, expected at least {min_figures}"
    for s in expected:
        assert s in text, f"{name}: {s!r} not in the output"


def test_notebooks_list_is_complete():
    """Every notebook has its source and every source its notebook, and each is tested here."""
    notebooks = sorted(f.removesuffix(".ipynb") for f in os.listdir(COLAB) if f.endswith(".ipynb"))
    sources = sorted(f.removesuffix(".py") for f in os.listdir(COLAB) if f.endswith(".py"))
    assert notebooks == sources
    assert notebooks == sorted(name.removesuffix(".ipynb") for name in CASES)


def test_notebooks_small():
    for name in CASES:
        assert os.path.getsize(os.path.join(COLAB, name)) < 1_000_000, name


# ----------------------------------------------------------------------------------------------------------
# The set-up cell: from a checkout it installs the checkout, in Colab the repository pyproject.toml names.

_REPOSITORY_LINE = re.compile(r'^REPOSITORY = "(.*)"$', re.M)


def repository() -> str:
    """pyproject.toml's ``[project.urls] Repository`` ('' when it names none)."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"].get("urls", {}).get("Repository", "")


def _setup_cell(name: str) -> str:
    with open(os.path.join(COLAB, name.removesuffix(".ipynb") + ".py"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("# Set-up: install geojax")
    return text[start : text.index("\n# %%", start)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_setup_cell_carries_pyprojects_repository(name):
    found = _REPOSITORY_LINE.findall(_setup_cell(name))
    assert found == [repository()], "run `python tests/test_notebooks.py` to copy pyproject.toml's URL"


def _run_setup(cell: str, *, colab: bool, installed: bool, monkeypatch) -> list[list[str]]:
    """Run the set-up cell's install logic (not its imports of the app) with Colab faked or not; the pip
    commands it ran."""
    import importlib.util
    import subprocess
    import sys
    import types

    calls: list[list[str]] = []
    monkeypatch.setattr(subprocess, "check_call", lambda command: calls.append(command))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: real(n, *a) if installed or n != "geojax" else None
    )
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(cell.split("\nfrom train.app import notebook")[0], {})  # noqa: S102  (the notebook's own cell)
    return calls


def test_setup_cell_installs_the_checkout_or_the_repository(monkeypatch):
    cell = _setup_cell("01_quickstart.ipynb")
    assert _run_setup(cell, colab=False, installed=True, monkeypatch=monkeypatch) == []  # nothing missing
    (local,) = _run_setup(cell, colab=False, installed=False, monkeypatch=monkeypatch)
    assert local[-1] == "..[train]" or "..[train]" in local
    url = "https://example.org/geojax.git"
    colab = _REPOSITORY_LINE.sub(f'REPOSITORY = "{url}"', cell)
    (remote,) = _run_setup(colab, colab=True, installed=False, monkeypatch=monkeypatch)
    assert f"geojax[train] @ git+{url}" in remote and "..[train]" not in remote
    unset = _REPOSITORY_LINE.sub('REPOSITORY = ""', cell)
    with pytest.raises(SystemExit, match=r"set its \[project.urls\] Repository"):
        _run_setup(unset, colab=True, installed=False, monkeypatch=monkeypatch)


def write_repository() -> None:
    """Copy pyproject.toml's repository URL into every notebook's set-up cell and regenerate the .ipynb."""
    import subprocess
    import sys

    url = repository()
    for name in sorted(CASES):
        path = os.path.join(COLAB, name.removesuffix(".ipynb") + ".py")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(_REPOSITORY_LINE.sub(f'REPOSITORY = "{url}"', text))
    sources = [os.path.join(COLAB, n.removesuffix(".ipynb") + ".py") for n in sorted(CASES)]
    subprocess.run([sys.executable, "-m", "jupytext", "--to", "ipynb", "--update", *sources], check=True)


if __name__ == "__main__":
    write_repository()
