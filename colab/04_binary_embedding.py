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
# # Binary embedding with tensor trains (Hong, Meng & Yuan 2018): ITQ vs Tensorized Projection
#
# Hong, Meng & Yuan (2018, *Tensorized Projection for High-Dimensional Binary Embedding*) encode a $d$-dim
# feature into $b$ bits by $\mathrm{sign}(Rx)$. **ITQ** (Gong & Lazebnik 2011) learns a dense rotation after
# PCA (at most $d$ bits, $b\cdot d$ parameters). **Tensorized Projection (TP)** constrains $R$ to a
# tensor-train (TT) matrix, eq. 9:
# $$\min_{C,R,\bar R}\ \lVert \bar R X - C\rVert_F^2 + \beta\lVert \bar R X - RX\rVert_F^2
#   \quad\text{s.t. } \bar R^T\bar R=I,\ r_{TT}(R)\le r_0,$$
# so $b$ may exceed $d$, and a TT matrix with row modes $(b_k)$, column modes $(d_k)$, ranks $r_k$ has only
# $\sum_k r_{k-1}b_kd_kr_k$ parameters. Protocol (§6.1): a database item is a true neighbour of a query when
# it is closer than the mean distance to the 50th neighbour; the database is ranked by Hamming distance; we
# report mAP.

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
DATA = "digits"  # digits | npz:PATH[:KEY]  (features [N, D])
FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)  # bits b = factor · d
RANK = 4  # TT rank r0
ITQ_ITERS = 50
TP_ITERS = 10
QUERIES = None  # None = min(1000, N/10)

# %% [markdown]
# ## 1. Tensor-train matrices
#
# `geojax.tt` stores a $\prod b_k \times \prod d_k$ matrix as cores
# $G_k\in\mathbb R^{r_{k-1}\times b_k\times d_k\times r_k}$. The paper's sizes (Tables 1–2): 4096 → 4096 bits
# with six 4×4 cores at rank 4 has 1,152 parameters; 4096 → 1024 (output modes 2×4×4×4×4×2) has 1,088 —
# against 16.8 M and 4.2 M for dense matrices. `matvec` never forms the dense matrix; below it is checked
# against `to_dense` on a small one.

# %%
import jax
import jax.numpy as jnp

from geojax import tt

key = jax.random.key(0)
big = tt.init(key, (4,) * 6, (4,) * 6, 4)
wide = tt.init(key, (2, 4, 4, 4, 4, 2), (4,) * 6, 4)
print(f"4096 -> 4096 bits: TT {tt.num_params(big):,} params vs dense {4096 * 4096:,}")
print(f"4096 -> 1024 bits: TT {tt.num_params(wide):,} params vs dense {1024 * 4096:,}")
small = tt.init(key, (2, 3, 4), (4, 2, 3), 2)
xs = jax.random.normal(jax.random.fold_in(key, 1), (5, 24))
print("matvec == dense @ x:", bool(jnp.allclose(tt.matvec(small, xs), xs @ tt.to_dense(small).T, atol=1e-4)))

# %% [markdown]
# ## 2. ITQ vs TP on real features
#
# `train.binary_eval.itq_vs_tp` runs the §6.1 protocol for each $b=$ factor·$d$: fits ITQ (PCA + rotation for
# $b<d$, a dense $b\times d$ projection with orthonormal columns for $b\ge d$) and TP (TT rank r0), encodes
# the database with `binary.encode` (packed sign bits), ranks it by Hamming distance and reports mAP,
# parameters and encode time. What to look for: TP matches or beats ITQ at $b\ge d$ with far fewer
# parameters; both improve with more bits.

# %%
import time

import matplotlib.pyplot as plt

from train import binary_eval

name, x = binary_eval.load_features(DATA)
print(name, x.shape)
t0 = time.time()
report = binary_eval.itq_vs_tp(
    x, factors=FACTORS, rank=RANK, itq_iters=ITQ_ITERS, tp_iters=TP_ITERS, queries=QUERIES
)
report["data"] = name
print(f"({time.time() - t0:.1f} s)")
print(binary_eval.to_markdown(report))

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
for method, marker in (("ITQ", "o"), ("TP", "s")):
    rows = [r for r in report["rows"] if r["method"] == method]
    bits = [r["bits"] for r in rows]
    for ax, column in zip(axes, ("map", "params", "encode_us_per_vector"), strict=True):
        ax.plot(bits, [r[column] for r in rows], marker=marker, label=method)
titles = (("mAP", "mAP vs bits"), ("parameters", "projection parameters"), ("µs / vector", "encode time"))
for ax, (ylabel, title) in zip(axes, titles, strict=True):
    ax.set_xscale("log", base=2)
    ax.axvline(report["d"], color="0.6", ls=":", lw=1)
    ax.set(xlabel="bits b (dotted: b = d)", ylabel=ylabel, title=title)
    ax.legend()
axes[1].set_yscale("log")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Objective history
#
# Both fits record their objective: ITQ's quantisation loss $\lVert B-VR\rVert^2$ never increases; TP
# alternates a Procrustes step for $\bar R$ with an ALS sweep over the TT cores.

# %%
import numpy as np

from geojax import binary

bits = 8 * max(1, x.shape[1] // 8)
itq = binary.itq_fit(jnp.asarray(x), bits, key=key, iters=ITQ_ITERS)
obj = np.asarray(itq.objective)
decreasing = bool(np.all(np.diff(obj) <= 1e-4 * obj[0]))
print(f"ITQ {bits} bits: objective first {obj[0]:.2f}, last {obj[-1]:.2f}, non-increasing: {decreasing}")
codes = np.asarray(binary.encode(itq, jnp.asarray(x[:2])))
print("codes of two items (packed uint8, little-endian bits):", codes.tolist())
plt.figure(figsize=(5, 3))
plt.plot(obj)
plt.gca().set(xlabel="iteration", ylabel=r"$\|B - VR\|^2$", title="ITQ objective")
plt.show()
