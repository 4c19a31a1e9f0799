# ---
# jupyter:
#   accelerator: GPU
#   colab:
#     provenance: []
#   jupytext:
#     notebook_metadata_filter: all,-jupytext.text_representation.jupytext_version
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# # Atlas embeddings (Korman 2021): MSimCLR and MTriplet with charts
#
# Korman (2021) takes a manifold, given as a collection of charts, as the encoding space: an **atlas**
# replaces a single Euclidean code. The head outputs, for each of $n$ charts, coordinates
# $\varphi_i(x)=\mathrm{sigmoid}(c_i(x))\in[0,1]^d$ and a membership $q_i(x)$ (softmax over charts). The
# compressed code is $(\varphi_{i^*}(x), i^*)$ with $i^*=\arg\max_i q_i(x)$. Two regularisers shape it
# (eq. 6): $\ell_{reg}=\lambda_1\ell_Z+\lambda_2\ell_J$, where $\ell_Z$ (eq. 5) is an MMD between the
# chart-weighted codes and the uniform distribution on $[0,1]^d$ (IMQ kernel) and
# $\ell_J=-\mathbb E_x\sum_i(q_i(x)-1/n)^2$ keeps memberships decisive.
#
# - **MSimCLR** (§3.1): NT-Xent on q-mixed projection heads; evaluated by *piecewise linear accuracy* — one
#   linear classifier per chart on the compressed code.
# - **MTriplet** (§3.2): batch-all triplet loss on the semi-metric (eq. 7)
#   $d_M(x,y)=\sum_i q_i(x)q_i(y)\,d_0(\varphi_i(x),\varphi_i(y))/\sum_i q_i(x)q_i(y)$; evaluated by retrieval
#   (R@1).
#
# The paper's claim at $d=2$: $n=16$ charts beat $n=1$. Here: digits, small MLP, short runs.

# %%
# Set-up: install geojax with its `train` extra (the application this notebook uses) when either is missing,
# then show the devices JAX will use. From a checkout, pip installs the checkout above colab/ ("..[train]");
# in Colab it installs geojax from its repository, the URL pyproject.toml's [project.urls] gives
# (`python tests/test_notebooks.py` copies it here).
REPOSITORY = ""

import importlib.util
import shutil
import subprocess
import sys

if importlib.util.find_spec("geojax") is None or importlib.import_module("train").missing_extra_modules():
    if "google.colab" not in sys.modules:
        GEOJAX = "..[train]"
    elif REPOSITORY:
        GEOJAX = f"geojax[train] @ git+{REPOSITORY}"
    else:
        raise SystemExit(
            "geojax's pyproject.toml names no repository to install from: set its [project.urls] Repository, "
            "then run `python tests/test_notebooks.py`"
        )
    cuda = ["jax[cuda12]"] if shutil.which("nvidia-smi") else []  # keeps jax on the GPU if pip upgrades it
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", GEOJAX, *cuda])
    importlib.invalidate_caches()

from train.app import notebook

notebook.show_devices()

# %% tags=["parameters"]
STEPS = 1000
BATCH = 128  # MSimCLR images per step (two views each); MTriplet uses its preset's 8 classes × 4
WIDTH = 256
CHART_DIM = 2  # d
CHARTS = (1, 4, 16)  # n
PROBE_EPOCHS = 20  # epochs of the piecewise linear probe (one linear classifier per chart)
METHODS = ("mtriplet", "msimclr")
RUNS_DIR = ""  # '' = a fresh temporary folder

# %%
RUN_ROOT = notebook.runs_dir(RUNS_DIR)

# %% [markdown]
# ## 1. Train every (method, n)
#
# Presets `mtriplet` and `msimclr` hold the paper's recipes (margin 0.2, λ1 = 1, λ2 = 0.1, RMSProp for
# MTriplet; τ = 1, λ1 = 20, λ2 = 0.1 for MSimCLR); we override only d, n, the steps and the width, and ask
# both for the piecewise linear probe. What to look for: accuracy rising with the number of charts at d = 2,
# and how many charts are actually used.

# %%
from train.helpers import tables

common = dict(
    root=RUN_ROOT,
    dim=CHART_DIM,
    steps=STEPS,
    width=WIDTH,
    warmup=min(100, STEPS // 4),
    log_every=max(1, STEPS // 20),
    probe="piecewise",
    probe_epochs=PROBE_EPOCHS,
)
reports = {}
for method in METHODS:
    for n in CHARTS:
        extra = dict(batch_size=BATCH) if method == "msimclr" else {}
        reports[(method, n)] = notebook.train_run(
            f"{method}-n{n}", preset=method, charts=n, **common, **extra
        )

header = ["method", "n", "d", "P@1 (d_M)", "R@1", "R@8", "piecewise linear acc.", "charts used"]
rows = [
    [
        method,
        n,
        CHART_DIM,
        rep["precision_at_1"],
        rep["recall_at_k"]["1"],
        rep["recall_at_k"]["8"],
        rep["piecewise_linear_accuracy"],
        rep["charts_used"],
    ]
    for (method, n), rep in reports.items()
]
print()
print(tables.markdown_table(header, rows, align="lrrrrrrr"))

# %% [markdown]
# ## 2. Chart pictures
#
# Every test point drawn at its compressed code $\varphi_{i^*}(x)\in[0,1]^2$, in the panel of its most
# probable chart $i^*$, coloured by digit class (as the paper's figures). What to look for: classes occupy
# separate regions inside a chart, different charts carry different classes, and the MMD term spreads points
# over the square.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

from geojax import manifolds

for method in METHODS:
    n = max(CHARTS)
    emb = np.load(os.path.join(reports[(method, n)]["workdir"], "embeddings.npz"))
    code, chart = manifolds.atlas_code(emb["query_coords"], emb["query_q"])
    code, chart, y = np.asarray(code), np.asarray(chart), emb["query_labels"]
    cols = min(n, 4)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.0 * cols, 3.0 * nrows), squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.axis("off")
            continue
        m = chart == i
        sc = ax.scatter(code[m, 0], code[m, 1], c=y[m], cmap="tab10", vmin=0, vmax=9, s=8)
        ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", title=f"chart {i} ({int(m.sum())} pts)")
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{method}: n = {n} charts, d = {CHART_DIM} (test points, coloured by class)")
    fig.colorbar(sc, ax=axes, shrink=0.6, label="class")
    plt.show()

# %%
fig, ax = plt.subplots(figsize=(6, 3.6))
for method in METHODS:
    piecewise = [reports[(method, n)]["piecewise_linear_accuracy"] for n in CHARTS]
    r1 = [reports[(method, n)]["recall_at_k"]["1"] for n in CHARTS]
    ax.plot(CHARTS, piecewise, marker="o", label=f"{method}: piecewise linear")
    ax.plot(CHARTS, r1, marker="s", ls="--", label=f"{method}: R@1")
ax.set_xscale("log", base=2)
ax.set(xlabel="charts n", ylabel="accuracy", title=f"d = {CHART_DIM}: accuracy against the number of charts")
ax.legend(fontsize=8)
plt.show()
