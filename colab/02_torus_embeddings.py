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
# # Torus embeddings (Stowell 2026): sphere vs torusN vs torusC, then quantisation
#
# Stowell (2026, *Torus Embeddings*) trains the same network with three output projections — L2 normalisation
# onto the **sphere**, pairwise L2 normalisation onto the Clifford torus (**torusN**, eq. 3) and the Clifford
# projection of angles (**torusC**, eq. 2) — with SupCon (τ = 0.1), a KoLeo term and gradient clipping (100),
# and reports precision@1 and circular variance (eq. 4). Its claims: torusN ≈ sphere; torusC is less stable
# (needs clipping at low D); quantising to 8 bits per angle costs < 1 point, 1-bit and coarse PQ degrade.
# Here: the bundled 8×8 digits (1,797 images), a small MLP, a few hundred steps — minutes on a CPU.

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
STEPS = 400  # training steps per run
BATCH = 128
WIDTH = 256  # MLP width
DIM = 16  # extrinsic width: sphere D, torusN D (D/2 angles), torusC D/2 angles -> D
GEOMETRIES = ("sphere", "torus_n", "torus_c")
KOLEO_SWEEP = (0.0, 0.1, 0.3)  # KoLeo weights tried on torusN
UNCLIPPED_TORUS_C = True  # also train torusC without gradient clipping (Stowell 2026: it needs clipping)
PQ_ITERS = 25
RUNS_DIR = ""  # '' = a fresh temporary folder

# %%
RUN_ROOT = notebook.runs_dir(RUNS_DIR)

# %% [markdown]
# ## 1. Train the three geometries (and a KoLeo sweep on torusN)
#
# Each `notebook.train_run` call is one `python -m train preset=supcon_<geometry> key=value …` run in-process
# (`train.app.config.make` + `train.app.cli.run`): it trains, embeds the test split (queries) and the train
# split (reference) and writes `embeddings.npz` + `report.json` in its run directory. Precision@1 ranks the
# reference by cosine (test vs train). Circular variance $1-\lVert\frac1n\sum_i Z_i\rVert_2$ (eq. 4, on the
# Clifford form for tori) is near 1 when the embeddings use the whole space. The gradient-norm column tells
# whether the clipping at 100 ever bound (the logged norm is before clipping): where it never does, the
# unclipped torusC run matches the clipped one.

# %%
import json
import os

from train.helpers import tables

common = dict(
    root=RUN_ROOT,
    steps=STEPS,
    batch_size=BATCH,
    width=WIDTH,
    warmup=min(100, STEPS // 4),
    log_every=max(1, STEPS // 20),
)
reports = {}
for geometry in GEOMETRIES:
    dim = DIM // 2 if geometry == "torus_c" else DIM
    reports[(geometry, 0.1)] = notebook.train_run(
        f"{geometry}-koleo0.1", preset=f"supcon_{geometry}", dim=dim, koleo=0.1, **common
    )
for k in KOLEO_SWEEP:
    if ("torus_n", k) not in reports:
        reports[("torus_n", k)] = notebook.train_run(
            f"torus_n-koleo{k}", preset="supcon_torus_n", dim=DIM, koleo=k, **common
        )
if UNCLIPPED_TORUS_C:
    try:
        reports[("torus_c, no clipping", 0.1)] = notebook.train_run(
            "torus_c-noclip", preset="supcon_torus_c", dim=DIM // 2, koleo=0.1, clip=1e9, **common
        )
    except FloatingPointError as err:  # the loop stops on non-finite metrics
        print("torus_c without clipping diverged:", err)


def logged(rep):
    """The run's metrics.jsonl: one dict per logged step."""
    with open(os.path.join(rep["workdir"], "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


header = ["geometry", "KoLeo", "P@1", "kNN@5", "circular variance", "max logged grad norm", "steps/s"]
rows = [
    [
        geometry,
        str(k),
        rep["precision_at_1"],
        rep["knn_accuracy"],
        rep["circular_variance"],
        f"{max(r['grad_norm'] for r in logged(rep)):.3g}",
        rep["timing"]["steps_per_s"],
    ]
    for (geometry, k), rep in reports.items()
]
print()
print(tables.markdown_table(header, rows, align="lrrrrrr"))
baseline = next(iter(reports.values()))["baseline_raw_1nn"]["precision_at_1"]
print(f"raw-pixel 1-NN baseline P@1: {baseline:.4f}")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 3.6))
for (geometry, k), rep in reports.items():
    rows = logged(rep)
    ax.plot([r["step"] for r in rows], [r["supcon"] for r in rows], label=f"{geometry}, KoLeo {k}")
ax.set(xlabel="step", ylabel="SupCon loss", title="training curves")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## 2. Quantisation (Stowell 2026, Table 3)
#
# `train.evaluate.quantised_report` re-ranks the same test-vs-train retrieval under compact codes:
# - **8-bit**: torus angles $t$ (`clifford_to_angles`) → `round(256 t) mod 256`, ranked by the wraparound L1
#   of uint8 codes (no fitted range, D/2 bytes); sphere → an 8-bit grid fitted on the reference set.
# - **1-bit**: sign bits of the extrinsic coordinates, Hamming distance.
# - **PQ(a, b)**: product quantisation (Jégou et al. 2011), $a$ bits per sub-space and $b$ sub-spaces (on
#   torus angles the asymmetric distance is the squared wraparound distance).
#
# What to look for: 8-bit within about a point of float32 for every geometry; fewer bits cost more.

# %%
import jax

from train import evaluate

quant = []
for i, ((geometry, k), rep) in enumerate(reports.items()):
    if k != 0.1 or "no clipping" in geometry:
        continue
    run = evaluate.load_run(rep["workdir"])
    quant.append(evaluate.quantised_report(**run, key=jax.random.key(i), pq_iters=PQ_ITERS))
print(evaluate.markdown_table(quant))

# %%
fig, ax = plt.subplots(figsize=(8, 4.5))
markers = {"float32": "*", "8-bit": "s", "1-bit": "v"}  # PQ codes: "o"
for color, q in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], quant, strict=False):
    pts = [(r["bits_per_vector"], r["p_at_1"], r["method"]) for r in q["rows"] if r["p_at_1"] is not None]
    for x_, y_, n_ in pts:
        ax.scatter(x_, y_, color=color, marker=markers.get(n_, "o"), s=60 if n_ == "float32" else 30)
        ax.annotate(n_, (x_, y_), fontsize=7, xytext=(3, 3), textcoords="offset points")
    best = {}  # best P@1 at each code size: the geometry's accuracy / size frontier
    for x_, y_, _ in pts:
        best[x_] = max(best.get(x_, 0.0), y_)
    xs = sorted(best)
    ax.plot(xs, [best[v] for v in xs], color=color, lw=1, label=f"{q['geometry']} (extrinsic D={q['dim']})")
ax.set_xscale("log", base=2)
ax.set(xlabel="bits per vector", ylabel="P@1 (test vs train)")
ax.set_title("precision@1 against code size (★ float32, ■ 8-bit, ▼ 1-bit, ● PQ)")
ax.grid(alpha=0.3)
ax.legend()
plt.show()
