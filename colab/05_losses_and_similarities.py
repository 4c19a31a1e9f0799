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
# # Losses and similarities: SupCon vs SINCERE, cosine vs arc length, SimO
#
# **Feeney & Hughes (2024)**, *Learning Embedding Spaces with Metrics via Contrastive Learning*, compare
# SupCon with **SINCERE** and the cosine similarity with the **negative arc length**
# $1-\arccos(\cos\theta)/\pi$. SupCon's denominator sums over every other embedding, including same-class
# ones:
# $$\ell^{\text{SupCon}}_a=-\tfrac{1}{|P(a)|}\sum_{p\in P(a)}
#   \Big[s_{ap}/\tau-\log\sum_{k\ne a}e^{s_{ak}/\tau}\Big];$$
# SINCERE keeps only the positive itself and the negatives (other classes) in it:
# $$\ell^{\text{SINCERE}}_a=-\tfrac{1}{|P(a)|}\sum_{p\in P(a)}
#   \Big[s_{ap}/\tau-\log\big(e^{s_{ap}/\tau}+\sum_{n:y_n\ne y_a}e^{s_{an}/\tau}\big)\Big].$$
# Claims: SINCERE ≈ SupCon and cosine ≈ arc length in 1-NN / 5-NN accuracy, but the similarity changes the
# shape of the embedding space, seen in **target / noise histograms**: for each test image, the similarity to
# the closest training image of its class (target) and of another class (noise).
#
# **SimO** (Bouhsine et al. 2024) is anchor-free: with $d_{ij}=\lVert e_i-e_j\rVert^2$ and
# $o_{ij}=(e_i\cdot e_j)^2$ over pairs $i<j$,
# $$L=\frac{\sum_{\text{same}} d_{ij}}{\varepsilon+\sum_{\text{same}} o_{ij}}
#   +\frac{\sum_{\text{diff}} o_{ij}}{\varepsilon+\sum_{\text{diff}} d_{ij}},$$
# pulling a class together while making different classes **orthogonal**; batches hold fewer than half the
# classes.

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
STEPS = 400
BATCH = 128
WIDTH = 256
DIM = 32
RUNS = (
    ("supcon", "cosine"),
    ("supcon", "neg_arc_length"),
    ("sincere", "cosine"),
    ("sincere", "neg_arc_length"),
)
SIMO = True  # also train SimO
RUNS_DIR = ""  # '' = a fresh temporary folder

# %%
RUN_ROOT = notebook.runs_dir(RUNS_DIR)

# %% [markdown]
# ## 1. SupCon vs SINCERE × cosine vs negative arc length
#
# Presets `supcon` / `sincere` (sphere, τ = 0.1, no KoLeo) with `similarity=` overridden. Retrieval: test vs
# train, 1-NN accuracy = P@1 and 5-NN majority vote, ranked by cosine (on the sphere every one of these
# similarities gives the same ranking).

# %%
from train.helpers import tables

common = dict(
    root=RUN_ROOT,
    steps=STEPS,
    batch_size=BATCH,
    width=WIDTH,
    dim=DIM,
    warmup=min(100, STEPS // 4),
    log_every=max(1, STEPS // 20),
)
reports = {}
for loss, similarity in RUNS:
    reports[(loss, similarity)] = notebook.train_run(
        f"{loss}-{similarity}", preset=loss, similarity=similarity, **common
    )
rows = [
    [loss, similarity, rep["precision_at_1"], rep["knn_accuracy"]]
    for (loss, similarity), rep in reports.items()
]
print()
print(tables.markdown_table(["loss", "similarity", "1NN (P@1)", "5NN"], rows, align="llrr"))

# %% [markdown]
# ## 2. Target / noise similarity histograms (Feeney & Hughes 2024)
#
# For every test embedding: the highest similarity to a training embedding of the **same** class (target) and
# of a **different** class (noise), under both similarity functions (columns) for each trained model (rows).
# What to look for: targets piled near the maximum, noise lower; the gap between the two is what the 1-NN
# decision uses, and its shape differs with the similarity used in training.

# %%
import os

import numpy as np
from IPython.display import Image, display

from train.helpers.plots import plot_target_noise

histograms = {
    f"{loss}, trained with {trained}": np.load(os.path.join(rep["workdir"], "embeddings.npz"))
    for (loss, trained), rep in reports.items()
}
png = os.path.join(RUN_ROOT, "target_noise.png")
plot_target_noise(histograms, png)
display(Image(filename=png))

# %% [markdown]
# ## 3. SimO (Bouhsine et al. 2024)
#
# First the loss itself on toy configurations: three classes on **orthogonal** axes vs the same three classes
# **collapsed** onto one ray. The second term $\sum_{\text{diff}} o/(\varepsilon+\sum_{\text{diff}} d)$ is
# what punishes collapse — the ablation of the paper, where dropping orthogonality merged 6 of 10 CIFAR-10
# classes.

# %%
import jax.numpy as jnp

from geojax import losses

rng = np.random.default_rng(0)
y3 = np.repeat(np.arange(3), 10)
ortho = np.eye(3, 8)[y3] * 2.0 + 0.05 * rng.standard_normal((30, 8))
collapsed = (np.eye(3, 8)[0] * (1.0 + y3[:, None])) + 0.05 * rng.standard_normal((30, 8))
for name, e in (("orthogonal classes", ortho), ("collapsed on one ray", collapsed)):
    print(f"SimO on {name:22s}: {float(losses.simo(jnp.asarray(e, jnp.float32), jnp.asarray(y3))):.4f}")

# %% [markdown]
# Then a trained model: preset `simo` (Euclidean 16-dim embeddings, class-subsampled batches with < 50 % of
# the classes, and the paper's evaluation — a linear classifier on frozen features trained for one epoch).
# What to look for: classes in separate directions — the off-diagonal $|\cos|$ between class means falls
# towards 0 as training goes on (short CPU runs only start this).

# %%
import matplotlib.pyplot as plt

from geojax import similarity as sim_lib

if SIMO:
    rep = notebook.train_run(
        "simo",
        root=RUN_ROOT,
        preset="simo",
        steps=STEPS,
        width=WIDTH,
        warmup=min(100, STEPS // 4),
        log_every=max(1, STEPS // 20),
    )
    print(f"linear probe accuracy {rep['linear_probe_accuracy']:.4f}, P@1 {rep['precision_at_1']:.4f}")
    emb = np.load(os.path.join(rep["workdir"], "embeddings.npz"))
    e, y = emb["query"], emb["query_labels"]
    means = np.stack([e[y == c].mean(0) for c in np.unique(y)])
    cos = np.abs(np.asarray(sim_lib.cosine(jnp.asarray(means), jnp.asarray(means))))
    off = cos[~np.eye(len(cos), dtype=bool)]
    print(f"mean |cos| between class means (off-diagonal): {off.mean():.3f}")
    centred = e - e.mean(0)
    pcs = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axes[0].scatter(pcs[:, 0], pcs[:, 1], c=y, cmap="tab10", s=6, vmin=0, vmax=9)
    axes[0].set(title="SimO test embeddings (first two principal components)")
    im = axes[1].imshow(cos, vmin=0, vmax=1, cmap="magma")
    axes[1].set(title="|cos| between class means", xlabel="class", ylabel="class")
    fig.colorbar(im, ax=axes[1])
    plt.tight_layout()
    plt.show()
