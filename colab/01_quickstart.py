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
# # geojax quickstart: geometries, similarities, losses
#
# geojax makes an embedding model three independent choices — a **geometry** (where embeddings live), a
# **similarity** on it, and a **loss** over the batch's similarity matrix — each a small, jit-able JAX
# function. This notebook tours the functional API on toy data (no training, no dataset): projections onto the
# sphere, the Clifford torus (torusC, torusN) and an atlas of charts; pictures of the torus; similarity
# matrices; a loss and its gradient; the KoLeo regulariser; and uint8 torus codes whose integer overflow *is*
# the torus.

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
N = 300  # toy points
D = 8  # embedding width
SEED = 0
GD_STEPS = 100  # gradient-descent steps of the loss demo

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from geojax import losses, manifolds, quantize, regularizers, search
from geojax import similarity as sim

key = jax.random.key(SEED)
x = jax.random.normal(key, (N, D))  # raw network outputs

# %% [markdown]
# ## 1. Projections (Stowell 2026, Table 1 and eqs. 2–3; Korman 2021, §2.1)
#
# - **sphere**: $x \mapsto x/\lVert x\rVert_2$; extrinsic dimension $D$, intrinsic $D-1$.
# - **torusC** (Clifford, Stowell eq. 2): angles $t\in[0,1)^D$ (in **turns**)
#   $\mapsto \sqrt{1/D}\,(\cos 2\pi t_1, \sin 2\pi t_1, \dots, \cos 2\pi t_D, \sin 2\pi t_D)$;
#   extrinsic $2D$, intrinsic $D$.
# - **torusN** (pairwise L2 normalisation, Stowell eq. 3): each adjacent pair
#   $(x_{2k-1}, x_{2k}) \mapsto \sqrt{2/D}\,(x_{2k-1}, x_{2k})/\lVert(x_{2k-1},x_{2k})\rVert$;
#   extrinsic $D$, intrinsic $D/2$.
# - **atlas** (Korman): the head output $\mapsto$ chart coordinates $c\in\mathbb R^{n\times d}$ (pre-sigmoid)
#   and memberships $q=\mathrm{softmax}$ over the $n$ charts.
#
# What to look for: every sphere and torus vector has unit norm; torusN is the identity on Clifford vectors;
# `clifford_to_angles` inverts `torus_clifford` (mod 1).

# %%
s = manifolds.sphere(x)  # [N, D]
zn = manifolds.torus_l2p(x)  # [N, D]   torusN: D/2 angles
t = manifolds.wrap(x[:, : D // 2] / 4)  # [N, D/2] angles in turns
zc = manifolds.torus_clifford(t)  # [N, D]   torusC of D/2 angles
norms = {
    name: float(jnp.linalg.norm(z, axis=1).mean())
    for name, z in (("sphere", s), ("torusN", zn), ("torusC", zc))
}
print("mean norms:", "  ".join(f"{name} {v:.4f}" for name, v in norms.items()))
print("torusN identity on Clifford vectors:", bool(jnp.allclose(manifolds.torus_l2p(zc), zc, atol=1e-6)))
back = manifolds.clifford_to_angles(zc)
err = jnp.abs((back - t + 0.5) % 1.0 - 0.5).max()  # wraparound difference
print(f"max |angles(clifford(t)) - t| (mod 1) = {float(err):.2e}")
example = manifolds.torus_l2p(jnp.array([3.0, 4.0, 0.0, -2.0]))
print("torus_l2p([3, 4, 0, -2]) =", example, "angles", manifolds.clifford_to_angles(example))

charts, dim = 4, 2
h = jax.random.normal(jax.random.fold_in(key, 1), (N, charts * dim + charts))  # atlas head output
coords, q = manifolds.atlas_split(h, charts=charts, dim=dim)  # [N, 4, 2] pre-sigmoid, [N, 4] softmax
code, chart = manifolds.atlas_code(coords, q)  # sigmoid coordinates in the most probable chart, its index
print("atlas coords", coords.shape, "q", q.shape, "code", code.shape, "charts used", np.bincount(chart))

# %% [markdown]
# ## 2. Pictures of the torus
#
# A 2-D flat torus is the unit square with opposite edges glued: the distance per coordinate is
# $\min(|a-b|, 1-|a-b|)$ (turns). Its Clifford form
# $\tfrac{1}{\sqrt2}(\cos 2\pi a, \sin 2\pi a, \cos 2\pi b, \sin 2\pi b)$ lies on the unit sphere
# $S^3\subset\mathbb R^4$; stereographic projection $(z_1,z_2,z_3,z_4)\mapsto(z_1,z_2,z_3)/(1-z_4)$ shows
# it as a doughnut in $\mathbb R^3$. What to look for: the cluster cut by the square's edge (left) is one
# connected blob on the doughnut (middle); each angle pair is a circle (right).

# %%
rng = np.random.default_rng(SEED)
centres = np.array([[0.25, 0.3], [0.6, 0.7], [0.97, 0.45]])  # the third straddles the edge a = 0 ≡ 1
labels = rng.integers(0, 3, N)
t2 = np.mod(centres[labels] + 0.05 * rng.standard_normal((N, 2)), 1.0).astype(np.float32)
z2 = np.asarray(manifolds.torus_clifford(jnp.asarray(t2)))  # [N, 4]


def stereo(z):
    return z[..., :3] / (1.0 - z[..., 3:4])


colours = dict(c=labels, cmap="tab10", vmin=0, vmax=9)
fig = plt.figure(figsize=(15, 4.6))
ax = fig.add_subplot(1, 3, 1)
ax.scatter(t2[:, 0], t2[:, 1], s=8, **colours)
ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal", xlabel="$t_1$ (turns)", ylabel="$t_2$ (turns)")
ax.set_title("flat view: square with opposite edges glued")
for v in (0, 1):
    ax.axvline(v, color="k", ls="--", lw=1)
    ax.axhline(v, color="k", ls="--", lw=1)
ax3 = fig.add_subplot(1, 3, 2, projection="3d")
g = np.linspace(0, 1, 41, dtype=np.float32)
ga, gb = np.meshgrid(g, g)
mesh = stereo(np.asarray(manifolds.torus_clifford(jnp.asarray(np.stack([ga, gb], -1)))))
ax3.plot_wireframe(mesh[..., 0], mesh[..., 1], mesh[..., 2], color="0.8", lw=0.4)
p3 = stereo(z2)
ax3.scatter(p3[:, 0], p3[:, 1], p3[:, 2], s=6, **colours)
ax3.set_title("Clifford view (stereographic projection of $S^3$)")
ax3.set_box_aspect((1, 1, 0.45))
ax = fig.add_subplot(1, 3, 3)
for k, m in enumerate(("o", "x")):
    pair = f"pair {k + 1}: $(z_{2 * k + 1}, z_{2 * k + 2})$"
    ax.scatter(z2[:, 2 * k], z2[:, 2 * k + 1], s=8, marker=m, label=pair, **colours)
ax.set(aspect="equal", title=r"each angle pair is a circle of radius $1/\sqrt{2}$")
ax.legend(loc="upper right", fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Similarity matrices (Feeney & Hughes 2024)
#
# All similarities are `f(a [N, D], b [M, D]) -> [N, M]`, higher = more similar, accumulated in fp32:
# cosine; negative arc length $1-\arccos(\cos)/\pi$; $-\lVert a-b\rVert$; and on torus angles
# `torus(a, b, p=1)` $=-\sum_k \min(|a_k-b_k|, 1-|a_k-b_k|)$. On Clifford vectors the cosine is the mean of
# $\cos 2\pi(a_k-b_k)$ — checked below. What to look for: the three classes show up as blocks.

# %%
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
same = np.allclose(mats["cosine (Clifford)"], expected, atol=1e-5)
print("cosine of Clifford vectors == mean cos(2π Δt):", same)
fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
for ax, (name, m) in zip(axes, mats.items(), strict=True):
    im = ax.imshow(np.asarray(m), cmap="viridis")
    ax.set_title(name)
    fig.colorbar(im, ax=ax, shrink=0.8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. A loss and its gradient
#
# SupCon (Khosla et al. 2020): for each anchor $a$ with positives $P(a)$,
# $\ell_a = -\frac{1}{|P(a)|}\sum_{p\in P(a)}\Big[s_{ap}/\tau - \log\sum_{k\ne a} e^{s_{ak}/\tau}\Big]$.
# Every loss is a function of `(sim, labels)`, so it runs on any geometry. Below we descend the SupCon loss on
# torusN embeddings of raw points directly (plain gradient descent on the points, no network) and watch the
# classes pull together on the torus. Other losses take the same arguments.

# %%
lab = jnp.asarray(labels)
raw = jax.random.normal(jax.random.fold_in(key, 2), (N, 2 * 2))  # 4 raw dims -> torusN with 2 angles


def supcon_on_torus(raw):
    z = manifolds.torus_l2p(raw)
    return losses.supcon(sim.cosine(z, z), lab, temperature=0.1)


loss_and_grad = jax.jit(jax.value_and_grad(supcon_on_torus))
value, grad = loss_and_grad(raw)
print(f"SupCon {float(value):.4f}, gradient {grad.shape}, finite: {bool(jnp.isfinite(grad).all())}")
z0 = manifolds.torus_l2p(raw)
for name in ("sincere", "info_nce", "triplet", "contrastive", "lifted_structured"):
    print(f"{name:18s} {float(getattr(losses, name)(sim.cosine(z0, z0), lab)):.4f}")
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
plt.show()

# %% [markdown]
# ## 5. KoLeo regulariser
#
# KoLeo (Sablayrolles et al. 2019, in the DINOv2 form) spreads points out: rows are L2-normalised and
# $$\mathcal L_{\text{KoLeo}}
#   = -\frac1N\sum_i \log\big(\lVert \hat x_i - \hat x_{\mathrm{nn}(i)}\rVert + \varepsilon\big).$$
# What to look for: a clumped set scores higher (worse) than a spread one; the four points $\pm e_1, \pm e_2$
# give $-\log\sqrt2 = -0.346574$.

# %%
spread = manifolds.sphere(jax.random.normal(jax.random.fold_in(key, 3), (N, 3)))
noise = jax.random.normal(jax.random.fold_in(key, 4), (N, 3))
clumped = manifolds.sphere(jnp.array([1.0, 0.0, 0.0]) + 0.05 * noise)
print(
    f"KoLeo spread {float(regularizers.koleo(spread)):.3f}",
    f"clumped {float(regularizers.koleo(clumped)):.3f}",
)
cross = jnp.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
print(f"KoLeo(±e1, ±e2) = {float(regularizers.koleo(cross)):.6f}")
g = jax.grad(regularizers.koleo)(clumped)
print("gradient finite:", bool(jnp.isfinite(g).all()), f" norm {float(jnp.linalg.norm(g)):.3f}")

# %% [markdown]
# ## 6. Atlas distance (Korman 2021, eq. 7) and integer torus codes (Stowell 2026, §3.3)
#
# $d_M(x,y)=\sum_i q_i(x)q_i(y)\,d_0(\varphi_i(x),\varphi_i(y)) / \sum_i q_i(x)q_i(y)$, with $d_0$ Euclidean
# on pre-sigmoid chart coordinates (a *distance*, lower = closer).
#
# A torus angle quantises to a byte by `round(256 t) mod 256`; per-byte distance is
# $\min((a-b) \bmod 256, (b-a) \bmod 256)$ with ordinary uint8 overflow: 250 and 5 are 11 apart.

# %%
dm = sim.manifold_distance(coords[:5], q[:5], coords[:5], q[:5])
print("d_M [5, 5]:\n", np.round(np.asarray(dm), 3))
codes = quantize.torus_uint8(jnp.asarray(t2))  # [N, 2] uint8
print("codes of the first 3 points:", np.asarray(codes[:3]).tolist())
a = jnp.array([[250]], jnp.uint8)
b = jnp.array([[5]], jnp.uint8)
print("wraparound distance 250 vs 5 =", int(search.torus_distances(a, b)[0, 0]))
dist, idx = search.torus_topk(codes[:3], codes, 5)
nearest = np.asarray(idx[0])
print(
    "top-5 neighbours of point 0 by uint8 wraparound L1:",
    nearest.tolist(),
    "classes",
    labels[nearest].tolist(),
)
