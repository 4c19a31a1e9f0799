"""Write the colab/*.ipynb notebooks (without outputs) from the cell sources below.

    python colab/_build.py            # rewrite every notebook
    python colab/_build.py 02         # only the notebooks whose name starts with 02

Each notebook: a set-up cell (install geojax when it is not importable, print the devices), a cell tagged
``parameters`` (sizes and steps; tests/test_notebooks.py injects tiny values after it, papermill-style),
then markdown + code that uses only geojax's public functions and the ``train`` package.
"""

from __future__ import annotations

import os
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = '''\
# Set-up: make `import geojax` work, then show which accelerator JAX will use.
# In Colab, set REPO_URL to the geojax git repository (e.g. "https://github.com/<owner>/geojax"): it is
# installed with `pip install git+REPO_URL`. Inside a checkout (this notebook in <repo>/colab or <repo>),
# the checkout is installed with `pip install -e <repo>`. Nothing is installed when geojax already imports.
REPO_URL = ""  # <-- EDIT ME in Colab

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys


def _checkout_root():
    for path in (os.getcwd(), os.path.dirname(os.getcwd())):
        if os.path.isfile(os.path.join(path, "pyproject.toml")) and os.path.isdir(os.path.join(path, "geojax")):
            return path
    return None


if importlib.util.find_spec("geojax") is None or importlib.util.find_spec("train") is None:
    root = _checkout_root()
    if root is not None:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-e", root])
        sys.path.insert(0, root)  # an editable install is only seen by new processes
    elif REPO_URL:
        # geojax needs a recent jax; on a GPU runtime ask for the CUDA build so the GPU is used.
        extra = ["jax[cuda12]"] if shutil.which("nvidia-smi") else []
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", f"git+{REPO_URL}", *extra])
    else:
        raise RuntimeError("geojax is not importable: set REPO_URL above to the geojax git repository")
    importlib.invalidate_caches()

import jax

print("jax", jax.__version__, "devices:", jax.devices())
print("accelerator:", jax.default_backend() != "cpu")'''


def _cells(spec: list[tuple[str, str]]):
    cells = []
    for kind, text in spec:
        text = text.strip("\n")
        if kind == "md":
            cells.append(new_markdown_cell(text))
        elif kind == "params":
            cells.append(new_code_cell(text, metadata={"tags": ["parameters"]}))
        else:
            cells.append(new_code_cell(text))
    return cells


def notebook(title_md: str, spec: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = _cells([("md", title_md), ("code", SETUP), *spec])
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating gives no spurious diffs
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "accelerator": "GPU",
        "colab": {"provenance": []},
    }
    return nb


# Shared by the notebooks that train: one call = one `python -m train` run, in-process.
TRAIN_HELPER = '''\
import json
import tempfile

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from train import config
from train.app import run, summary



RUN_ROOT = RUNS_DIR or tempfile.mkdtemp(prefix="geojax-notebook-")
os.makedirs(RUN_ROOT, exist_ok=True)
print("run directories under", RUN_ROOT)


def train_run(name, **overrides):
    """Train one config (preset + key=value overrides, as `python -m train`) in a fresh run directory."""
    cfg = config.make(workdir=os.path.join(RUN_ROOT, name), progress=False, checkpoint_every=10**6, **overrides)
    report = run(cfg)
    print(summary(report).splitlines()[0])
    return report'''

# --------------------------------------------------------------------------------------------------------
# 01 quickstart
# --------------------------------------------------------------------------------------------------------
NB01 = notebook(
    """\
# geojax quickstart: geometries, similarities, losses

geojax makes an embedding model three independent choices — a **geometry** (where embeddings live), a
**similarity** on it, and a **loss** over the batch's similarity matrix — each a small, jit-able JAX function.
This notebook tours the functional API on toy data (no training, no dataset): projections onto the sphere,
the Clifford torus (torusC, torusN) and an atlas of charts; pictures of the torus; similarity matrices; a loss
and its gradient; the KoLeo regulariser; and uint8 torus codes whose integer overflow *is* the torus.""",
    [
        (
            "params",
            """\
N = 300  # toy points
D = 8  # embedding width
SEED = 0
GD_STEPS = 100  # gradient-descent steps of the loss demo""",
        ),
        (
            "code",
            """\
import math

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from geojax import losses, manifolds, quantize, regularizers, search
from geojax import similarity as sim

key = jax.random.key(SEED)
x = jax.random.normal(key, (N, D))  # raw network outputs""",
        ),
        (
            "md",
            """\
## 1. Projections (seed 000 Table 1, eqs. 2–3; seed 001 §2.1)

| geometry | map | extrinsic / intrinsic dim |
|---|---|---|
| sphere | $x \\mapsto x/\\lVert x\\rVert_2$ | $D$ / $D-1$ |
| torusC (Clifford, eq. 2) | angles $t\\in[0,1)^D$ (in **turns**) $\\mapsto \\sqrt{1/D}\\,(\\cos 2\\pi t_1, \\sin 2\\pi t_1, \\dots)$ | $2D$ / $D$ |
| torusN (L2p, eq. 3) | each adjacent pair $(x_{2k-1}, x_{2k}) \\mapsto \\sqrt{2/D}\\,(x_{2k-1}, x_{2k})/\\lVert(x_{2k-1},x_{2k})\\rVert$ | $D$ / $D/2$ |
| atlas | head output $\\mapsto$ chart coordinates $c\\in\\mathbb R^{n\\times d}$ (pre-sigmoid), memberships $q=\\mathrm{softmax}$ | — |

What to look for: every sphere and torus vector has unit norm; torusN is the identity on Clifford vectors;
`clifford_to_angles` inverts `torus_clifford` (mod 1).""",
        ),
        (
            "code",
            """\
s = manifolds.sphere(x)  # [N, D]
zn = manifolds.torus_l2p(x)  # [N, D]   torusN: D/2 angles
t = manifolds.wrap(x[:, : D // 2] / 4)  # [N, D/2] angles in turns
zc = manifolds.torus_clifford(t)  # [N, D]   torusC of D/2 angles
print("norms  sphere %.4f  torusN %.4f  torusC %.4f" % (
    float(jnp.linalg.norm(s, axis=1).mean()),
    float(jnp.linalg.norm(zn, axis=1).mean()),
    float(jnp.linalg.norm(zc, axis=1).mean()),
))
print("torusN identity on Clifford vectors:", bool(jnp.allclose(manifolds.torus_l2p(zc), zc, atol=1e-6)))
back = manifolds.clifford_to_angles(zc)
err = jnp.abs((back - t + 0.5) % 1.0 - 0.5).max()  # wraparound difference
print("max |angles(clifford(t)) - t| (mod 1) = %.2e" % float(err))
print("DESIGN example: torus_l2p([3,4,0,-2]) =", manifolds.torus_l2p(jnp.array([3.0, 4.0, 0.0, -2.0])),
      "angles", manifolds.clifford_to_angles(manifolds.torus_l2p(jnp.array([3.0, 4.0, 0.0, -2.0]))))

charts, dim = 4, 2
h = jax.random.normal(jax.random.fold_in(key, 1), (N, charts * dim + charts))  # atlas head output
coords, q = manifolds.atlas_split(h, charts=charts, dim=dim)  # [N, 4, 2] pre-sigmoid, [N, 4] softmax
code, chart = manifolds.atlas_code(coords, q)  # sigmoid coordinates in the most probable chart, its index
print("atlas coords", coords.shape, "q", q.shape, "code", code.shape, "charts used", np.bincount(chart))""",
        ),
        (
            "md",
            """\
## 2. Pictures of the torus

A 2-D flat torus is the unit square with opposite edges glued: the distance per coordinate is
$\\min(|a-b|, 1-|a-b|)$ (turns). Its Clifford form $\\tfrac{1}{\\sqrt2}(\\cos 2\\pi a, \\sin 2\\pi a, \\cos 2\\pi b,
\\sin 2\\pi b)$ lies on the unit sphere $S^3\\subset\\mathbb R^4$; stereographic projection
$(z_1,z_2,z_3,z_4)\\mapsto(z_1,z_2,z_3)/(1-z_4)$ shows it as a doughnut in $\\mathbb R^3$. What to look for:
the cluster cut by the square's edge (left) is one connected blob on the doughnut (middle); each angle pair is
a circle (right).""",
        ),
        (
            "code",
            """\
rng = np.random.default_rng(SEED)
centres = np.array([[0.25, 0.3], [0.6, 0.7], [0.97, 0.45]])  # the third straddles the edge a = 0 ≡ 1
labels = rng.integers(0, 3, N)
t2 = np.mod(centres[labels] + 0.05 * rng.standard_normal((N, 2)), 1.0).astype(np.float32)
z2 = np.asarray(manifolds.torus_clifford(jnp.asarray(t2)))  # [N, 4]


def stereo(z):
    return z[..., :3] / (1.0 - z[..., 3:4])


fig = plt.figure(figsize=(15, 4.6))
ax = fig.add_subplot(1, 3, 1)
ax.scatter(t2[:, 0], t2[:, 1], c=labels, cmap="tab10", s=8, vmin=0, vmax=9)
ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", xlabel="$t_1$ (turns)", ylabel="$t_2$ (turns)",
       title="flat view: square with opposite edges glued")
for v in (0, 1):
    ax.axvline(v, color="k", ls="--", lw=1)
    ax.axhline(v, color="k", ls="--", lw=1)
ax3 = fig.add_subplot(1, 3, 2, projection="3d")
g = np.linspace(0, 1, 41, dtype=np.float32)
ga, gb = np.meshgrid(g, g)
mesh = stereo(np.asarray(manifolds.torus_clifford(jnp.asarray(np.stack([ga, gb], -1)))))
ax3.plot_wireframe(mesh[..., 0], mesh[..., 1], mesh[..., 2], color="0.8", lw=0.4)
p3 = stereo(z2)
ax3.scatter(p3[:, 0], p3[:, 1], p3[:, 2], c=labels, cmap="tab10", s=6, vmin=0, vmax=9)
ax3.set_title("Clifford view (stereographic projection of $S^3$)")
ax3.set_box_aspect((1, 1, 0.45))
ax = fig.add_subplot(1, 3, 3)
for k, m in enumerate(("o", "x")):
    ax.scatter(z2[:, 2 * k], z2[:, 2 * k + 1], c=labels, cmap="tab10", s=8, marker=m, vmin=0, vmax=9,
               label=f"pair {k + 1}: $(z_{2 * k + 1}, z_{2 * k + 2})$")
ax.set(aspect="equal", title="each angle pair is a circle of radius $1/\\\\sqrt{2}$")
ax.legend(loc="upper right", fontsize=8)
plt.tight_layout()
plt.show()""",
        ),
        (
            "md",
            """\
## 3. Similarity matrices (seed 003)

All similarities are `f(a [N, D], b [M, D]) -> [N, M]`, higher = more similar, accumulated in fp32:
cosine; negative arc length $1-\\arccos(\\cos)/\\pi$; $-\\lVert a-b\\rVert$; and on torus angles
`torus(a, b, p=1)` $=-\\sum_k \\min(|a_k-b_k|, 1-|a_k-b_k|)$. On Clifford vectors the cosine is the mean of
$\\cos 2\\pi(a_k-b_k)$ — checked below. What to look for: the three classes show up as blocks.""",
        ),
        (
            "code",
            """\
order = np.argsort(labels, kind="stable")
z_sorted = jnp.asarray(z2[order])
t_sorted = jnp.asarray(t2[order])
mats = {
    "cosine (Clifford)": sim.cosine(z_sorted, z_sorted),
    "neg_arc_length": sim.neg_arc_length(z_sorted, z_sorted),
    "neg_euclidean": sim.neg_euclidean(z_sorted, z_sorted),
    "torus L1 on angles": sim.torus(t_sorted, t_sorted, p=1),
}
expected = np.mean(np.cos(2 * np.pi * (t2[order][:, None, :] - t2[order][None, :, :])), axis=-1)
print("cosine of Clifford vectors == mean cos(2π Δt):", np.allclose(mats["cosine (Clifford)"], expected, atol=1e-5))
fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
for ax, (name, m) in zip(axes, mats.items()):
    im = ax.imshow(np.asarray(m), cmap="viridis")
    ax.set_title(name)
    fig.colorbar(im, ax=ax, shrink=0.8)
plt.tight_layout()
plt.show()""",
        ),
        (
            "md",
            """\
## 4. A loss and its gradient

SupCon (Khosla et al.; DESIGN §4): for each anchor $a$ with positives $P(a)$,
$\\ell_a = -\\frac{1}{|P(a)|}\\sum_{p\\in P(a)}\\Big[s_{ap}/\\tau - \\log\\sum_{k\\ne a} e^{s_{ak}/\\tau}\\Big]$.
Every loss is a function of `(sim, labels)`, so it runs on any geometry. Below we descend the SupCon loss on
torusN embeddings of raw points directly (plain gradient descent on the points, no network) and watch the
classes pull together on the torus. Other losses take the same arguments.""",
        ),
        (
            "code",
            """\
lab = jnp.asarray(labels)
raw = jax.random.normal(jax.random.fold_in(key, 2), (N, 2 * 2))  # 4 raw dims -> torusN with 2 angles


def supcon_on_torus(raw):
    z = manifolds.torus_l2p(raw)
    return losses.supcon(sim.cosine(z, z), lab, temperature=0.1)


loss_and_grad = jax.jit(jax.value_and_grad(supcon_on_torus))
value, grad = loss_and_grad(raw)
print("SupCon %.4f, gradient %s, finite: %s" % (float(value), grad.shape, bool(jnp.isfinite(grad).all())))
z0 = manifolds.torus_l2p(raw)
for name, fn in [("sincere", losses.sincere), ("info_nce", losses.info_nce), ("triplet", losses.triplet),
                 ("contrastive", losses.contrastive), ("lifted_structured", losses.lifted_structured)]:
    print(f"{name:18s} {float(fn(sim.cosine(z0, z0), lab)):.4f}")
print(f"{'simo':18s} {float(losses.simo(z0, lab)):.4f}")

history, r = [], raw
for _ in range(GD_STEPS):
    value, grad = loss_and_grad(r)
    history.append(float(value))
    r = r - 0.5 * grad
before = np.asarray(manifolds.clifford_to_angles(manifolds.torus_l2p(raw)))
after = np.asarray(manifolds.clifford_to_angles(manifolds.torus_l2p(r)))
fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
axes[0].plot(history)
axes[0].set(xlabel="step", ylabel="SupCon", title="gradient descent on the points")
for ax, a, title in ((axes[1], before, "angles before"), (axes[2], after, "angles after")):
    ax.scatter(a[:, 0], a[:, 1], c=labels, cmap="tab10", s=8, vmin=0, vmax=9)
    ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", title=title)
plt.tight_layout()
plt.show()""",
        ),
        (
            "md",
            """\
## 5. KoLeo regulariser

KoLeo (Sablayrolles et al.; DINOv2 form) spreads points out: rows are L2-normalised and
$\\mathcal L_{\\text{KoLeo}} = -\\frac1N\\sum_i \\log(\\lVert \\hat x_i - \\hat x_{\\mathrm{nn}(i)}\\rVert + \\varepsilon)$.
What to look for: a clumped set scores higher (worse) than a spread one; the four points $\\pm e_1, \\pm e_2$
give $-\\log\\sqrt2 = -0.346574$.""",
        ),
        (
            "code",
            """\
spread = manifolds.sphere(jax.random.normal(jax.random.fold_in(key, 3), (N, 3)))
clumped = manifolds.sphere(jnp.array([1.0, 0.0, 0.0]) + 0.05 * jax.random.normal(jax.random.fold_in(key, 4), (N, 3)))
print("KoLeo spread %.3f  clumped %.3f" % (float(regularizers.koleo(spread)), float(regularizers.koleo(clumped))))
print("KoLeo(±e1, ±e2) = %.6f" % float(regularizers.koleo(jnp.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]]))))
g = jax.grad(regularizers.koleo)(clumped)
print("gradient finite:", bool(jnp.isfinite(g).all()), " norm %.3f" % float(jnp.linalg.norm(g)))""",
        ),
        (
            "md",
            """\
## 6. Atlas distance (seed 001 eq. 7) and integer torus codes (seed 000 §3.3)

$d_M(x,y)=\\sum_i q_i(x)q_i(y)\\,d_0(\\varphi_i(x),\\varphi_i(y)) / \\sum_i q_i(x)q_i(y)$, with $d_0$ Euclidean on
pre-sigmoid chart coordinates (a *distance*, lower = closer).

A torus angle quantises to a byte by `round(256 t) mod 256`; per-byte distance is
$\\min((a-b) \\bmod 256, (b-a) \\bmod 256)$ with ordinary uint8 overflow: 250 and 5 are 11 apart.""",
        ),
        (
            "code",
            """\
dm = sim.manifold_distance(coords[:5], q[:5], coords[:5], q[:5])
print("d_M [5, 5]:\\n", np.round(np.asarray(dm), 3))
codes = quantize.torus_uint8(jnp.asarray(t2))  # [N, 2] uint8
print("codes of the first 3 points:", np.asarray(codes[:3]).tolist())
a = jnp.array([[250]], jnp.uint8)
b = jnp.array([[5]], jnp.uint8)
print("wraparound distance 250 vs 5 =", int(search.torus_distances(a, b)[0, 0]))
dist, idx = search.torus_topk(codes[:3], codes, 5)
print("top-5 neighbours of point 0 by uint8 wraparound L1:", np.asarray(idx[0]).tolist(),
      "labels", labels[np.asarray(idx[0])].tolist())""",
        ),
    ],
)

# --------------------------------------------------------------------------------------------------------
# 02 torus embeddings
# --------------------------------------------------------------------------------------------------------
NB02 = notebook(
    """\
# Torus embeddings (seed 000): sphere vs torusN vs torusC, then quantisation

Seed 000 (Stowell, *Torus Embeddings*) trains the same network with three output projections — L2
normalisation onto the **sphere**, pairwise L2 normalisation onto the Clifford torus (**torusN**, eq. 3) and the
Clifford projection of angles (**torusC**, eq. 2) — with SupCon (τ = 0.1), a KoLeo term and gradient clipping
(100), and reports precision@1 and circular variance (eq. 4). Its claims: torusN ≈ sphere; torusC is less
stable (needs clipping at low D); quantising to 8 bits per angle costs < 1 point, 1-bit and coarse PQ degrade.
Here: the bundled 8×8 digits (1,797 images), a small MLP, a few hundred steps — minutes on a CPU.""",
    [
        (
            "params",
            """\
STEPS = 400  # training steps per run
BATCH = 128
WIDTH = 256  # MLP width
DIM = 16  # extrinsic width: sphere D, torusN D (D/2 angles), torusC D/2 angles -> D
GEOMETRIES = ("sphere", "torus_n", "torus_c")
KOLEO_SWEEP = (0.0, 0.1, 0.3)  # KoLeo weights tried on torusN
UNCLIPPED_TORUS_C = True  # also train torusC without gradient clipping (seed 000: it needs clipping)
PQ_ITERS = 25
RUNS_DIR = ""  # '' = a fresh temporary folder""",
        ),
        ("code", TRAIN_HELPER),
        (
            "md",
            """\
## 1. Train the three geometries (and a KoLeo sweep on torusN)

Each call is one `python -m train preset=supcon_<geometry> key=value …` run in-process (`train.config.make` +
`train.app.run`): it trains, embeds the test split (queries) and the train split (reference) and writes
`embeddings.npz` + `report.json` in its run directory. Precision@1 ranks the reference by cosine (test vs
train). Circular variance $1-\\lVert\\frac1n\\sum_i Z_i\\rVert_2$ (eq. 4, on the Clifford form for tori) is near 1
when the embeddings use the whole space. The gradient-norm column tells whether the clipping at 100 ever bound
(the logged norm is before clipping): where it never does, the unclipped torusC run matches the clipped one.""",
        ),
        (
            "code",
            """\
common = dict(steps=STEPS, batch_size=BATCH, width=WIDTH, warmup=min(100, STEPS // 4), log_every=max(1, STEPS // 20))
reports = {}
for geometry in GEOMETRIES:
    dim = DIM // 2 if geometry == "torus_c" else DIM
    reports[(geometry, 0.1)] = train_run(f"{geometry}-koleo0.1", preset=f"supcon_{geometry}", dim=dim, koleo=0.1, **common)
for k in KOLEO_SWEEP:
    if ("torus_n", k) not in reports:
        reports[("torus_n", k)] = train_run(f"torus_n-koleo{k}", preset="supcon_torus_n", dim=DIM, koleo=k, **common)
if UNCLIPPED_TORUS_C:
    try:
        reports[("torus_c, no clipping", 0.1)] = train_run(
            "torus_c-noclip", preset="supcon_torus_c", dim=DIM // 2, koleo=0.1, clip=1e9, **common)
    except FloatingPointError as err:  # the loop stops on non-finite metrics
        print("torus_c without clipping diverged:", err)



def logged(rep):
    with open(os.path.join(rep["workdir"], "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


print()
print("| geometry | KoLeo | P@1 | kNN@5 | circular variance | max logged grad norm | steps/s |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (geometry, k), rep in reports.items():
    grad = max(r["grad_norm"] for r in logged(rep))
    print(f"| {geometry} | {k} | {rep['precision_at_1']:.4f} | {rep['knn_accuracy']:.4f} | "
          f"{rep['circular_variance']:.4f} | {grad:.3g} | {rep['timing']['steps_per_s']} |")
print("raw-pixel 1-NN baseline P@1: %.4f" % next(iter(reports.values()))["baseline_raw_1nn"]["precision_at_1"])""",
        ),
        (
            "code",
            """\
fig, ax = plt.subplots(figsize=(7, 3.6))
for (geometry, k), rep in reports.items():
    rows = logged(rep)
    ax.plot([r["step"] for r in rows], [r["supcon"] for r in rows], label=f"{geometry}, KoLeo {k}")
ax.set(xlabel="step", ylabel="SupCon loss", title="training curves")
ax.legend(fontsize=8)
plt.show()""",
        ),
        (
            "md",
            """\
## 2. Quantisation (seed 000 Table 3)

`train.evaluate.quantised_report` re-ranks the same test-vs-train retrieval under compact codes:
- **8-bit**: torus angles $t$ (`clifford_to_angles`) → `round(256 t) mod 256`, ranked by the wraparound L1
  of uint8 codes (no fitted range, D/2 bytes); sphere → an 8-bit grid fitted on the reference set.
- **1-bit**: sign bits of the extrinsic coordinates, Hamming distance.
- **PQ(a, b)**: product quantisation, $a$ bits per sub-space and $b$ sub-spaces (on torus angles the
  asymmetric distance is the squared wraparound distance).

What to look for: 8-bit within about a point of float32 for every geometry; fewer bits cost more.""",
        ),
        (
            "code",
            """\
from train import evaluate

quant = []
for i, ((geometry, k), rep) in enumerate(reports.items()):
    if k != 0.1 or "no clipping" in geometry:
        continue
    q = evaluate.quantised_report(**evaluate.load_run(rep["workdir"]), key=jax.random.key(i), pq_iters=PQ_ITERS)
    quant.append(q)
print(evaluate.markdown_table(quant))""",
        ),
        (
            "code",
            """\
fig, ax = plt.subplots(figsize=(8, 4.5))
markers = {"float32": "*", "8-bit": "s", "1-bit": "v"}  # PQ codes: "o"
for color, q in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], quant):
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
ax.set(xlabel="bits per vector", ylabel="P@1 (test vs train)",
       title="precision@1 against code size (★ float32, ■ 8-bit, ▼ 1-bit, ● PQ)")
ax.grid(alpha=0.3)
ax.legend()
plt.show()""",
        ),
    ],
)

# --------------------------------------------------------------------------------------------------------
# 03 atlas
# --------------------------------------------------------------------------------------------------------
NB03 = notebook(
    """\
# Atlas embeddings (seed 001): MSimCLR and MTriplet with charts

Seed 001 (Korman: a manifold, given as a collection of charts, as the encoding space) replaces a single Euclidean code by an **atlas**:
the head outputs, for each of $n$ charts, coordinates $\\varphi_i(x)=\\mathrm{sigmoid}(c_i(x))\\in[0,1]^d$ and a
membership $q_i(x)$ (softmax over charts). The compressed code is $(\\varphi_{i^*}(x), i^*)$ with
$i^*=\\arg\\max_i q_i(x)$. Two regularisers shape it (eq. 6): $\\ell_{reg}=\\lambda_1\\ell_Z+\\lambda_2\\ell_J$, where
$\\ell_Z$ (eq. 5) is an MMD between the chart-weighted codes and the uniform distribution on $[0,1]^d$ (IMQ kernel)
and $\\ell_J=-\\mathbb E_x\\sum_i(q_i(x)-1/n)^2$ keeps memberships decisive.

- **MSimCLR** (§3.1): NT-Xent on q-mixed projection heads; evaluated by *piecewise linear accuracy* — one linear
  classifier per chart on the compressed code.
- **MTriplet** (§3.2): batch-all triplet loss on the semi-metric (eq. 7)
  $d_M(x,y)=\\sum_i q_i(x)q_i(y)\\,d_0(\\varphi_i(x),\\varphi_i(y))/\\sum_i q_i(x)q_i(y)$; evaluated by retrieval (R@1).

The paper's claim at $d=2$: $n=16$ charts beat $n=1$. Here: digits, small MLP, short runs.""",
    [
        (
            "params",
            """\
STEPS = 1000
BATCH = 128  # MSimCLR images per step (two views each); MTriplet uses its preset's 8 classes × 4
WIDTH = 256
CHART_DIM = 2  # d
CHARTS = (1, 4, 16)  # n
PROBE_EPOCHS = 20  # epochs of the piecewise linear probe (one linear classifier per chart)
METHODS = ("mtriplet", "msimclr")
RUNS_DIR = ""  # '' = a fresh temporary folder""",
        ),
        ("code", TRAIN_HELPER),
        (
            "md",
            """\
## 1. Train every (method, n)

Presets `mtriplet` and `msimclr` hold the paper's recipes (margin 0.2, λ1 = 1, λ2 = 0.1, RMSProp for
MTriplet; τ = 1, λ1 = 20, λ2 = 0.1 for MSimCLR); we override only d, n, the steps and the width, and ask both for
the piecewise linear probe. What to look for: accuracy rising with the number of charts at d = 2, and how many
charts are actually used.""",
        ),
        (
            "code",
            """\
reports = {}
for method in METHODS:
    for n in CHARTS:
        extra = dict(batch_size=BATCH) if method == "msimclr" else {}
        reports[(method, n)] = train_run(
            f"{method}-n{n}", preset=method, charts=n, dim=CHART_DIM, steps=STEPS, width=WIDTH,
            warmup=min(100, STEPS // 4), log_every=max(1, STEPS // 20), probe="piecewise",
            probe_epochs=PROBE_EPOCHS, **extra,
        )
print()
print("| method | n | d | P@1 (d_M) | R@1 | R@8 | piecewise linear acc. | charts used |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for (method, n), rep in reports.items():
    print(f"| {method} | {n} | {CHART_DIM} | {rep['precision_at_1']:.4f} | {rep['recall_at_k']['1']:.4f} | "
          f"{rep['recall_at_k']['8']:.4f} | {rep['piecewise_linear_accuracy']:.4f} | {rep['charts_used']} |")""",
        ),
        (
            "md",
            """\
## 2. Chart pictures

Every test point drawn at its compressed code $\\varphi_{i^*}(x)\\in[0,1]^2$, in the panel of its most probable
chart $i^*$, coloured by digit class (as the paper's figures). What to look for: classes occupy separate regions
inside a chart, different charts carry different classes, and the MMD term spreads points over the square.""",
        ),
        (
            "code",
            """\
from geojax import manifolds

for method in METHODS:
    n = max(CHARTS)
    emb = np.load(os.path.join(reports[(method, n)]["workdir"], "embeddings.npz"))
    code, chart = manifolds.atlas_code(emb["query_coords"], emb["query_q"])
    code, chart, y = np.asarray(code), np.asarray(chart), emb["query_labels"]
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 3.0 * rows), squeeze=False)
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
    plt.show()""",
        ),
        (
            "code",
            """\
fig, ax = plt.subplots(figsize=(6, 3.6))
for method in METHODS:
    ns = [n for n in CHARTS]
    ax.plot(ns, [reports[(method, n)]["piecewise_linear_accuracy"] for n in ns], marker="o", label=f"{method}: piecewise linear")
    ax.plot(ns, [reports[(method, n)]["recall_at_k"]["1"] for n in ns], marker="s", ls="--", label=f"{method}: R@1")
ax.set_xscale("log", base=2)
ax.set(xlabel="charts n", ylabel="accuracy", title=f"d = {CHART_DIM}: accuracy against the number of charts")
ax.legend(fontsize=8)
plt.show()""",
        ),
    ],
)

# --------------------------------------------------------------------------------------------------------
# 04 binary embedding
# --------------------------------------------------------------------------------------------------------
NB04 = notebook(
    """\
# Binary embedding with tensor trains (seed 002): ITQ vs Tensorized Projection

Seed 002 (Hong, Meng & Yuan, *Tensorized Projection for High-Dimensional Binary Embedding*) encodes a $d$-dim
feature into $b$ bits by $\\mathrm{sign}(Rx)$. **ITQ** learns a dense rotation after PCA (at most $d$ bits, $b\\cdot d$
parameters). **Tensorized Projection (TP)** constrains $R$ to a tensor-train (TT) matrix, eq. 9:
$$\\min_{C,R,\\bar R}\\ \\lVert \\bar R X - C\\rVert_F^2 + \\beta\\lVert \\bar R X - RX\\rVert_F^2\\quad\\text{s.t. } \\bar R^T\\bar R=I,\\ r_{TT}(R)\\le r_0,$$
so $b$ may exceed $d$, and a TT matrix with row modes $(b_k)$, column modes $(d_k)$, ranks $r_k$ has only
$\\sum_k r_{k-1}b_kd_kr_k$ parameters. Protocol (§6.1): a database item is a true neighbour of a query when it is
closer than the mean distance to the 50th neighbour; the database is ranked by Hamming distance; we report mAP.""",
    [
        (
            "params",
            """\
DATA = "digits"  # digits | npz:PATH[:KEY]  (features [N, D])
FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)  # bits b = factor · d
RANK = 4  # TT rank r0
ITQ_ITERS = 50
TP_ITERS = 10
QUERIES = None  # None = min(1000, N/10)""",
        ),
        (
            "md",
            """\
## 1. Tensor-train matrices

`geojax.tt` stores a $\\prod b_k \\times \\prod d_k$ matrix as cores $G_k\\in\\mathbb R^{r_{k-1}\\times b_k\\times d_k\\times r_k}$.
The seed's Table 1–2 sizes: 4096 → 4096 bits with six 4×4 cores at rank 4 has 1,152 parameters; 4096 → 1024
(output modes 2×4×4×4×4×2) has 1,088 — against 16.8 M and 4.2 M for dense matrices. `matvec` never forms the
dense matrix; below it is checked against `to_dense` on a small one.""",
        ),
        (
            "code",
            """\
import time

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from geojax import binary, tt
from train import binary_eval

key = jax.random.key(0)
big = tt.init(key, (4,) * 6, (4,) * 6, 4)
wide = tt.init(key, (2, 4, 4, 4, 4, 2), (4,) * 6, 4)
print("4096 -> 4096 bits: TT %s params vs dense %s" % (f"{tt.num_params(big):,}", f"{4096 * 4096:,}"))
print("4096 -> 1024 bits: TT %s params vs dense %s" % (f"{tt.num_params(wide):,}", f"{1024 * 4096:,}"))
small = tt.init(key, (2, 3, 4), (4, 2, 3), 2)
xs = jax.random.normal(jax.random.fold_in(key, 1), (5, 24))
print("matvec == dense @ x:", bool(jnp.allclose(tt.matvec(small, xs), xs @ tt.to_dense(small).T, atol=1e-4)))""",
        ),
        (
            "md",
            """\
## 2. ITQ vs TP on real features

`train.binary_eval.evaluate` runs the §6.1 protocol for each $b=$ factor·$d$: fits ITQ (PCA + rotation for $b<d$, a
dense $b\\times d$ projection with orthonormal columns for $b\\ge d$) and TP (TT rank r0), encodes the database with `binary.encode` (packed sign bits), ranks it by
Hamming distance and reports mAP, parameters and encode time. What to look for: TP matches or beats ITQ at
$b\\ge d$ with far fewer parameters; both improve with more bits.""",
        ),
        (
            "code",
            """\
name, x = binary_eval.load_features(DATA)
print(name, x.shape)
t0 = time.time()
report = binary_eval.evaluate(x, factors=FACTORS, rank=RANK, itq_iters=ITQ_ITERS, tp_iters=TP_ITERS, queries=QUERIES)
report["data"] = name
print(f"({time.time() - t0:.1f} s)")
print(binary_eval.to_markdown(report))""",
        ),
        (
            "code",
            """\
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
for method, marker in (("ITQ", "o"), ("TP", "s")):
    rows = [r for r in report["rows"] if r["method"] == method]
    bits = [r["bits"] for r in rows]
    axes[0].plot(bits, [r["map"] for r in rows], marker=marker, label=method)
    axes[1].plot(bits, [r["params"] for r in rows], marker=marker, label=method)
    axes[2].plot(bits, [r["encode_us_per_vector"] for r in rows], marker=marker, label=method)
for ax, ylabel, title in ((axes[0], "mAP", "mAP vs bits"), (axes[1], "parameters", "projection parameters"),
                          (axes[2], "µs / vector", "encode time")):
    ax.set_xscale("log", base=2)
    ax.axvline(report["d"], color="0.6", ls=":", lw=1)
    ax.set(xlabel="bits b (dotted: b = d)", ylabel=ylabel, title=title)
    ax.legend()
axes[1].set_yscale("log")
plt.tight_layout()
plt.show()""",
        ),
        (
            "md",
            """\
## 3. Objective history

Both fits record their objective: ITQ's quantisation loss $\\lVert B-VR\\rVert^2$ never increases; TP alternates
a Procrustes step for $\\bar R$ with an ALS sweep over the TT cores.""",
        ),
        (
            "code",
            """\
bits = 8 * max(1, x.shape[1] // 8)
itq = binary.itq_fit(jnp.asarray(x), bits, key=key, iters=ITQ_ITERS)
obj = np.asarray(itq.objective)
print(f"ITQ {bits} bits: objective first {obj[0]:.2f}, last {obj[-1]:.2f}, "
      f"non-increasing: {bool(np.all(np.diff(obj) <= 1e-4 * obj[0]))}")
print("codes of two items (packed uint8, little-endian bits):", np.asarray(binary.encode(itq, jnp.asarray(x[:2]))).tolist())
plt.figure(figsize=(5, 3))
plt.plot(obj)
plt.gca().set(xlabel="iteration", ylabel="$\\|B - VR\\|^2$", title="ITQ objective")
plt.show()
""",
        ),
    ],
)

# --------------------------------------------------------------------------------------------------------
# 05 losses and similarities
# --------------------------------------------------------------------------------------------------------
NB05 = notebook(
    """\
# Losses and similarities (seeds 003, 004): SupCon vs SINCERE, cosine vs arc length, SimO

**Seed 003** (Feeney & Hughes, *Learning Embedding Spaces with Metrics via Contrastive Learning*) compares SupCon with **SINCERE** and the cosine similarity with the **negative arc length**
$1-\\arccos(\\cos\\theta)/\\pi$. SupCon's denominator sums over every other embedding, including same-class ones:
$$\\ell^{\\text{SupCon}}_a=-\\tfrac{1}{|P(a)|}\\sum_{p\\in P(a)}\\Big[s_{ap}/\\tau-\\log\\sum_{k\\ne a}e^{s_{ak}/\\tau}\\Big];$$
SINCERE keeps only the positive itself and the negatives (other classes) in it:
$$\\ell^{\\text{SINCERE}}_a=-\\tfrac{1}{|P(a)|}\\sum_{p\\in P(a)}\\Big[s_{ap}/\\tau-\\log\\big(e^{s_{ap}/\\tau}+\\sum_{n:y_n\\ne y_a}e^{s_{an}/\\tau}\\big)\\Big].$$
Claims: SINCERE ≈ SupCon and cosine ≈ arc length in 1-NN / 5-NN accuracy, but the similarity changes the shape
of the embedding space, seen in **target / noise histograms**: for each test image, the similarity to the closest
training image of its class (target) and of another class (noise).

**Seed 004** (SimO) is anchor-free: with $d_{ij}=\\lVert e_i-e_j\\rVert^2$ and $o_{ij}=(e_i\\cdot e_j)^2$ over pairs $i<j$,
$$L=\\frac{\\sum_{\\text{same}} d_{ij}}{\\varepsilon+\\sum_{\\text{same}} o_{ij}}+\\frac{\\sum_{\\text{diff}} o_{ij}}{\\varepsilon+\\sum_{\\text{diff}} d_{ij}},$$
pulling a class together while making different classes **orthogonal**; batches hold fewer than half the classes.""",
    [
        (
            "params",
            """\
STEPS = 400
BATCH = 128
WIDTH = 256
DIM = 32
RUNS = (("supcon", "cosine"), ("supcon", "neg_arc_length"), ("sincere", "cosine"), ("sincere", "neg_arc_length"))
SIMO = True  # also train SimO
RUNS_DIR = ""  # '' = a fresh temporary folder""",
        ),
        ("code", TRAIN_HELPER),
        (
            "md",
            """\
## 1. SupCon vs SINCERE × cosine vs negative arc length

Presets `supcon` / `sincere` (sphere, τ = 0.1, no KoLeo) with `similarity=` overridden. Retrieval: test vs train,
1-NN accuracy = P@1 and 5-NN majority vote, ranked by cosine (on the sphere every one of these similarities gives
the same ranking).""",
        ),
        (
            "code",
            """\
common = dict(steps=STEPS, batch_size=BATCH, width=WIDTH, dim=DIM, warmup=min(100, STEPS // 4), log_every=max(1, STEPS // 20))
reports = {}
for loss, similarity in RUNS:
    reports[(loss, similarity)] = train_run(f"{loss}-{similarity}", preset=loss, similarity=similarity, **common)
print()
print("| loss | similarity | 1NN (P@1) | 5NN |")
print("|---|---|---:|---:|")
for (loss, similarity), rep in reports.items():
    print(f"| {loss} | {similarity} | {rep['precision_at_1']:.4f} | {rep['knn_accuracy']:.4f} |")""",
        ),
        (
            "md",
            """\
## 2. Target / noise similarity histograms (seed 003)

For every test embedding: the highest similarity to a training embedding of the **same** class (target) and of a
**different** class (noise), under both similarity functions (columns) for each trained model (rows). What to
look for: targets piled near the maximum, noise lower; the gap between the two is what the 1-NN decision uses,
and its shape differs with the similarity used in training.""",
        ),
        (
            "code",
            """\
from IPython.display import Image, display

from train.reproduce import plot_target_noise

histograms = {
    f"{loss}, trained with {trained}": np.load(os.path.join(rep["workdir"], "embeddings.npz"))
    for (loss, trained), rep in reports.items()
}
png = os.path.join(RUN_ROOT, "target_noise.png")
plot_target_noise(histograms, png)
display(Image(filename=png))""",
        ),
        (
            "md",
            """\
## 3. SimO (seed 004)

First the loss itself on toy configurations: three classes on **orthogonal** axes vs the same three classes
**collapsed** onto one ray. The second term $\\sum_{\\text{diff}} o/(\\varepsilon+\\sum_{\\text{diff}} d)$ is what punishes
collapse — the ablation of the paper, where dropping orthogonality merged 6 of 10 CIFAR-10 classes.""",
        ),
        (
            "code",
            """\
import jax.numpy as jnp

from geojax import losses

rng = np.random.default_rng(0)
y3 = np.repeat(np.arange(3), 10)
ortho = np.eye(3, 8)[y3] * 2.0 + 0.05 * rng.standard_normal((30, 8))
collapsed = (np.eye(3, 8)[0] * (1.0 + y3[:, None])) + 0.05 * rng.standard_normal((30, 8))
for name, e in (("orthogonal classes", ortho), ("collapsed on one ray", collapsed)):
    print(f"SimO on {name:22s}: {float(losses.simo(jnp.asarray(e, jnp.float32), jnp.asarray(y3))):.4f}")""",
        ),
        (
            "md",
            """\
Then a trained model: preset `simo` (Euclidean 16-dim embeddings, class-subsampled batches with < 50 % of the
classes, and the paper's evaluation — a linear classifier on frozen features trained for one epoch). What to look
for: classes in separate directions — the off-diagonal $|\\cos|$ between class means falls towards 0 as training
goes on (short CPU runs only start this).""",
        ),
        (
            "code",
            """\
from geojax import similarity as sim_lib

if SIMO:
    rep = train_run("simo", preset="simo", steps=STEPS, width=WIDTH, warmup=min(100, STEPS // 4), log_every=max(1, STEPS // 20))
    print("linear probe accuracy %.4f, P@1 %.4f" % (rep["linear_probe_accuracy"], rep["precision_at_1"]))
    emb = np.load(os.path.join(rep["workdir"], "embeddings.npz"))
    e, y = emb["query"], emb["query_labels"]
    means = np.stack([e[y == c].mean(0) for c in np.unique(y)])
    cos = np.abs(np.asarray(sim_lib.cosine(jnp.asarray(means), jnp.asarray(means))))
    off = cos[~np.eye(len(cos), dtype=bool)]
    print("mean |cos| between class means (off-diagonal): %.3f" % off.mean())
    centred = e - e.mean(0)
    pcs = centred @ np.linalg.svd(centred, full_matrices=False)[2][:2].T
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axes[0].scatter(pcs[:, 0], pcs[:, 1], c=y, cmap="tab10", s=6, vmin=0, vmax=9)
    axes[0].set(title="SimO test embeddings (first two principal components)")
    im = axes[1].imshow(cos, vmin=0, vmax=1, cmap="magma")
    axes[1].set(title="|cos| between class means", xlabel="class", ylabel="class")
    fig.colorbar(im, ax=axes[1])
    plt.tight_layout()
    plt.show()""",
        ),
    ],
)

NOTEBOOKS = {
    "01_quickstart.ipynb": NB01,
    "02_torus_embeddings.ipynb": NB02,
    "03_atlas.ipynb": NB03,
    "04_binary_embedding.ipynb": NB04,
    "05_losses_and_similarities.ipynb": NB05,
}


def main(prefixes: list[str]) -> None:
    for name, nb in NOTEBOOKS.items():
        if prefixes and not any(name.startswith(p) for p in prefixes):
            continue
        nbformat.validate(nb)
        path = os.path.join(HERE, name)
        nbformat.write(nb, path)
        print("wrote", path)


if __name__ == "__main__":
    main(sys.argv[1:])
