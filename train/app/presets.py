"""The papers' recipes as named presets: one block per paper, each value beside the section of the paper it
comes from, and the deviations stated once.

A preset is a named set of config values (a dict from key to value, keys of :class:`train.app.config.Config`)
that a run starts from: ``python -m train preset=NAME key=value ...`` builds the config of ``PRESETS[NAME]``
with the command line's keys applied over it, so a command line's key overrides the preset's (and a key the
preset set that the command line's choices make unused is dropped with one log line; see
:func:`train.app.config.make`). Without ``preset=`` a run starts from ``supcon_torus_n``. ``python -m train
--help`` lists every preset with its values.

This module holds only the values; :mod:`train.app.config` (which imports it and re-exports its names) parses,
checks and applies them. It imports nothing from :mod:`train`.
"""

from __future__ import annotations

from typing import Any

from geojax.manifolds import TORUS_GEOMETRIES

# ------------------------------------------------------------------------------------------------------------
# Presets: one block per paper. Each holds the paper's method (the section each value comes from; where the
# paper leaves a value open, its public code's), then the presets that run it on a data set, and the
# deviations, stated once (also in docs/conventions.md).
# ------------------------------------------------------------------------------------------------------------

# Stowell 2026, torus embeddings. SupCon (§3; the public code's SupContrast loss: τ = 0.1 with SupContrast's
# τ/0.07 factor), KoLeo on each view (§3.1; the code's weight 1, ε = 1e-6), gradients clipped at 100 (§3.1,
# §5; the code clamps element-wise), 100 epochs (§5), ResNet-18 with D = 16 of the D it sweeps (§5). From the
# code (SupCon-Framework, branch torus, configs/train): batch 200, SGD lr 0.1 without momentum, cosine
# annealing to 0.01, no warm-up, an EMA of the weights (decay 0.3 per epoch) for evaluation, mixed precision,
# SimCLR views.
# Network: ResNet-18 with the CIFAR stem on the images' own 32 × 32 and the code's head, Linear(512, 4D) →
# ReLU → Linear(4D, D).
# Deviations: trained from scratch on the CIFAR-stem ResNet-18 (the code starts torchvision's ImageNet
# ResNet-18, 7×7 stem and max-pool, from ImageNet weights on 224 × 224 crops); §5 names Adam, the code SGD:
# geojax follows the code; the views are SupContrast's CIFAR set (`augment=simclr`), where the code crops 0.15
# to 1 of the area, rotates (±90°), jitters with hue at p 0.9 and does not flip.
# Early stopping (§5; the code keeps the epoch of the best P@1): `select_best` validates P@1 each epoch on
# 10 % of the training set held out (5,000 CIFAR images) and reports the best epoch's weights, where the
# code selects on the test set itself.
STOWELL_2026 = {
    "loss": "supcon",
    "temperature": 0.1,
    "base_temperature": 0.07,
    "koleo": 1.0,
    "koleo_eps": 1e-6,
    "clip": 100.0,
    "clip_mode": "value",
    "epochs": 100,
    "encoder": "resnet18",
    "dim": 16,
    "batch_size": 200,
    "optimizer": "sgd",
    "lr": 0.1,
    "momentum": 0.0,
    "schedule": "cosine",
    "lr_min": 0.01,
    "warmup": 0,
    "ema": 0.3,
    "precision": "bf16",
    "augment": "simclr",
    "eval_batch": 500,
    "select_best": True,
    "val_fraction": 0.1,
}
# On the bundled digits (offline, the app's default): the paper's objective (SupCon × τ/0.07, KoLeo with the
# code's ε, at weight 0.1) with geojax's short recipe (an MLP, AdamW 1e-3, 1,500 steps, ±1 px shifts).
STOWELL_2026_DIGITS = {"base_temperature": 0.07, "koleo": 0.1, "koleo_eps": 1e-6}

# Korman 2021, manifold (atlas) target spaces.
# MSimCLR (§3.1, appendix A.1): NT-Xent on q-mixed projection heads with instance positives (two views per
# image), τ = 1, λ1 = 20, λ2 = 0.1 (A.1, MNIST / Fashion-MNIST), batch 128, Adam lr 1e-4 with PyTorch's β
# (A.1), 100 epochs (A.1), no gradient clipping (A.1 names none), A.1's augmentations (colour jitter 0.5 with
# p 0.8, grayscale p 0.2, random resized crop; no flip: `augment=crop_jitter_gray`, the crop's area 0.08 to 1
# from SimCLR, which A.1 follows), ResNet-18 (A.1), piecewise linear evaluation (§3.1). The paper gives no
# schedule: a constant rate, no warm-up. From the public code (neurve): per-chart projection heads
# Linear(d, d) → ReLU → Linear(d, 64) without biases.
# Deviations: the probe trains 20 epochs, geojax's choice (the paper gives no number; the public code trains
# it for as many epochs as the encoder, 100); on the digits preset an MLP replaces the ResNet-18 (8×8 images).
KORMAN_2021_MSIMCLR = {
    "geometry": "atlas",
    "charts": 16,
    "dim": 2,
    "projection": "mixed",
    "loss": "info_nce",
    "labels": "instance",
    "temperature": 1.0,
    "mmd": 20.0,
    "membership": 0.1,
    "batch_size": 128,
    "optimizer": "adam",
    "lr": 1e-4,
    "schedule": "constant",
    "warmup": 0,
    "epochs": 100,
    "clip": None,
    "augment": "crop_jitter_gray",
    "probe": "piecewise",
    "probe_epochs": 20,
}
# MTriplet (§3.2, §3.2.1): batch-all triplet (margin 0.2) on −d_M (eq. 7, d0 the Euclidean distance of the
# pre-sigmoid coordinates), batches of 8 classes × 4 images, λ1 = 1, λ2 = 0.1, RMSProp lr 1e-5, 300 epochs,
# d = 2, n = 16, one view per image, no gradient clipping (the paper names none).
# Deviations: no ImageNet-pretrained GoogLeNet (the app's encoders from scratch); optax's RMSProp (decay 0.9,
# ε inside the root) where PyTorch's has α = 0.99; no random resized crop or flip (±1 px shifts).
KORMAN_2021_MTRIPLET = {
    "geometry": "atlas",
    "charts": 16,
    "dim": 2,
    "loss": "triplet",
    "similarity": "manifold",
    "margin": 0.2,
    "mining": "all",
    "sampler": "m_per_class",
    "m_per_class": 4,
    "batch_size": 32,
    "mmd": 1.0,
    "membership": 0.1,
    "optimizer": "rmsprop",
    "lr": 1e-5,
    "schedule": "constant",
    "warmup": 0,
    "epochs": 300,
    "views": 1,
    "clip": None,
}

# Feeney & Hughes 2024, similarity functions × contrastive losses: SupCon vs SINCERE on the hypersphere
# (cosine; negative arc length by similarity=neg_arc_length), evaluated by 1NN / 5NN. The blog gives no
# training sizes; they are the authors' SupContrast fork's CIFAR-10 runs (tufts-ml/SupContrast,
# config_supcon/cifar10_sincere.py and cifar10_supcon.py with main_supcon.py's defaults): ResNet-50 with the
# CIFAR stem, its head Linear(2048, 2048) → ReLU → Linear(2048, 128) normalised (`head=supcontrast`; the
# embedding the kNN reads), batch 512, SupContrast's CIFAR views, 800 epochs, SGD with momentum 0.9 and
# coupled weight decay 1e-4 (`l2`), cosine annealing to lr/1000 after a 10-epoch linear warm-up (on for
# batches over 256), no clipping; SINCERE lr 0.65 with τ = 0.1, SupCon lr 0.35 with τ = 0.05 (its SupConLoss
# with base_temperature = τ: no τ/τ_base factor).
# Deviations: the warm-up rises from 0 (SupContrast's from 0.01) over 970 steps (10 epochs of CIFAR-10's
# 50,000 images at batch 512) and the cosine steps every step, where SupContrast sets it once per epoch.
FEENEY_HUGHES_2024 = {"geometry": "sphere"}
SINCERE_CIFAR10 = {
    "dataset": "cifar10",
    "encoder": "resnet50",
    "dim": 128,
    "head": "supcontrast",
    "batch_size": 512,
    "epochs": 800,
    "augment": "simclr",
    "optimizer": "sgd",
    "momentum": 0.9,
    "l2": 1e-4,
    "schedule": "cosine",
    "warmup": 970,
    "clip": None,
    "lr": 0.65,
    "lr_min": 0.65e-3,
    "temperature": 0.1,
    "precision": "bf16",
    "eval_batch": 500,
}
SUPCON_CIFAR10 = {**SINCERE_CIFAR10, "lr": 0.35, "lr_min": 0.35e-3, "temperature": 0.05}

# Bouhsine et al. 2024, SimO: the loss on Euclidean embeddings (Method), batches of fewer than half the
# classes (Ablation study), a linear classifier on the frozen encoder trained for one epoch (Results).
# The paper gives no embedding dimension (it says only that SimO needs "smaller batch sizes and embedding
# dimensions", Conclusion), no batch size, encoder or schedule: D = 16, batch 128, geojax's AdamW schedule
# are geojax's choices; on CIFAR-10 a ResNet-18 for 100 epochs with SupContrast's CIFAR views.
BOUHSINE_2024 = {
    "geometry": "euclidean",
    "dim": 16,
    "loss": "simo",
    "sampler": "class_subsampled",
    "probe": "linear",
    "probe_epochs": 1,
    "batch_size": 128,
}

# geojax's recipe for 28×28 images on a CPU (not a paper's): the small CNN (convolutions 32 and 64, 256 dense
# features) with batch norm, one view per image (SupCon's positives are the batch's other images of the class,
# Khosla et al. 2020 §3.2, so a second view only doubles the cost), ±2 px crops with flips (mirror-symmetric
# classes: Fashion-MNIST, not digits), 12 epochs of AdamW 1e-3 with a cosine schedule. On two CPU cores it
# trains Fashion-MNIST in under 10 minutes (python -m benchmarks.cpu_recipe).
CPU_SMALL_IMAGES = {"encoder": "cnn", "norm": "batch", "views": 1, "augment": "crop_flip", "epochs": 12}

PRESETS: dict[str, dict[str, Any]] = {
    # Stowell 2026
    "supcon_torus_n": STOWELL_2026_DIGITS,
    "supcon_sphere": {**STOWELL_2026_DIGITS, "geometry": "sphere"},
    # Stowell 2026's objective, sphere at D = 16 (§5), on geojax's CPU recipe for 28×28 images
    "supcon_sphere_cpu": {**STOWELL_2026_DIGITS, "geometry": "sphere", "dim": 16, **CPU_SMALL_IMAGES},
    "supcon_torus_c": {**STOWELL_2026_DIGITS, "geometry": "torus_c", "dim": 32},
    **{
        f"supcon_{geometry}_{data}": {**STOWELL_2026, "geometry": geometry, "dataset": data}
        for geometry in ("sphere", *TORUS_GEOMETRIES)
        for data in ("cifar10", "cifar100")
    },
    # Korman 2021
    "msimclr": {**KORMAN_2021_MSIMCLR, "encoder": "mlp"},
    "msimclr_mnist": {**KORMAN_2021_MSIMCLR, "dataset": "mnist", "encoder": "resnet18"},
    "mtriplet": KORMAN_2021_MTRIPLET,
    # Feeney & Hughes 2024
    "supcon": FEENEY_HUGHES_2024,
    "sincere": {**FEENEY_HUGHES_2024, "loss": "sincere"},
    "supcon_cifar10": {**FEENEY_HUGHES_2024, **SUPCON_CIFAR10},
    "sincere_cifar10": {**FEENEY_HUGHES_2024, **SINCERE_CIFAR10, "loss": "sincere"},
    # Bouhsine et al. 2024
    "simo": BOUHSINE_2024,
    "simo_cifar10": {
        **BOUHSINE_2024,
        "dataset": "cifar10",
        "encoder": "resnet18",
        "epochs": 100,
        "augment": "simclr",
        "precision": "bf16",
        "eval_batch": 500,
    },
}
