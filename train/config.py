"""Run configuration: one typed dataclass whose every key belongs to a choice, the papers' recipes as named
presets, and ``key=value`` overrides.

Every field carries its type, its default, one line of help, its group, and — when it only means something
for some choices — the choice it belongs to (:class:`When`): ``margin`` belongs to ``loss=triplet``,
``momentum`` to ``optimizer=sgd|rmsprop``, ``charts`` to ``geometry=atlas``. From that one table follow:

- refusal: a key the user gives that the run's choices do not use stops the run before any work, naming the
  key, the choice that makes it unused and the choices that would use it;
- presets: a key a preset set that the user's own choices make unused is dropped with one log line (so
  ``loss=triplet`` on the default preset trains); a preset whose own choices ignore one of its keys is a bug
  (tests check every preset);
- the loss's keyword arguments (:func:`loss_kwargs`), what a resumed run may change (``run`` keys), and the
  grouped ``python -m train --help``.

Choices are ``Literal`` types, most of them imported from the library (geometries, losses, similarities,
mining, encoders) or the data module (samplers, augmentations). ``None`` is the one "use the default" marker
(the encoder's own width, the loss's own margins, all devices, a fresh run directory); on the command line it
is written ``none``. :func:`validate` then rejects values and combinations that have no meaning (an odd
``dim`` for torus_n, a vector similarity on an atlas without a projection head, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from geojax.losses import LossName, Mining
from geojax.manifolds import GEOMETRIES, TORUS_GEOMETRIES, Geometry
from geojax.models import ENCODERS, PROJECTIONS, EncoderName, ProjectionName
from geojax.parallel import MODES
from geojax.similarity import SimilarityName
from train.data import TFDS_NAMES, Augmentation, Sampler, check_dataset_name
from train.errors import UsageError

Labels = Literal["class", "instance"]
Norm = Literal["batch", "group", "none"]
Head = Literal["stowell", "supcontrast", "linear"]
Optimizer = Literal["adam", "adamw", "sgd", "rmsprop"]
Schedule = Literal["cosine", "constant"]
ClipMode = Literal["global_norm", "value"]
Precision = Literal["fp32", "bf16"]
Probe = Literal["linear", "piecewise"]
QatBits = Literal[1, 2, 4, 8]
Feed = Literal["device", "host"]
# "manifold" ranks atlas points by −d_M (Korman 2021 eq. 7); the rest are geojax.similarity's names.
LossSimilarity = SimilarityName | Literal["manifold"]

log = logging.getLogger(__name__)


def dataset_source(name: str) -> str:
    """The kind of a ``dataset`` value: digits, npz, idx or tfds (a tfds name or tfds:NAME)."""
    prefix, sep, _ = name.partition(":")
    if name == "digits" or (sep and prefix in ("npz", "idx")):
        return name if name == "digits" else prefix
    return "tfds"


@dataclass(frozen=True)
class When:
    """The choice a key belongs to: the key is used only when ``choice`` (another key) takes one of
    ``values``. ``kind`` maps the choice's value to what ``values`` lists (``dataset`` → its source);
    ``label`` is how the values read in messages (default: ``a|b|c``)."""

    choice: str
    values: tuple[Any, ...]
    kind: Callable[[Any], Any] | None = None
    label: str | None = None

    def holds(self, cfg: Config) -> bool:
        value = getattr(cfg, self.choice)
        return (value if self.kind is None else self.kind(value)) in self.values

    def __str__(self) -> str:
        return f"{self.choice}={self.label or '|'.join(map(str, self.values))}"


SOFTMAX = When("loss", ("supcon", "sincere", "info_nce"))
TRIPLET = When("loss", ("triplet",))
MARGINS = When("loss", ("contrastive", "lifted_structured"))
SIMO = When("loss", ("simo",))
VECTORS = When("geometry", tuple(g for g in GEOMETRIES if g != "atlas"))
ATLAS = When("geometry", ("atlas",))
TORUS = When("geometry", TORUS_GEOMETRIES)
QAT = When("qat_bits", typing.get_args(QatBits))
CONV = When("encoder", tuple(e for e in ENCODERS if e != "mlp"))
PROJECTED = When("projection", tuple(p for p in PROJECTIONS if p != "none"))
CLIPPED = When("clip", (True,), lambda clip: clip is not None, "a threshold")
ADAMW = When("optimizer", ("adamw",))
MOMENTUM = When("optimizer", ("sgd", "rmsprop"))
COSINE = When("schedule", ("cosine",))
M_PER_CLASS = When("sampler", ("m_per_class",))
CLASS_SUBSAMPLED = When("sampler", ("class_subsampled",))
PROBE = When("probe", typing.get_args(Probe))
SELECT = When("select_best", (True,))
OWN_SPLIT = When("dataset", ("digits", "npz"), dataset_source, "digits|npz:PATH")
TFDS = When("dataset", ("tfds",), dataset_source, f"{'|'.join(TFDS_NAMES)}|tfds:NAME")

GROUPS = {
    "data": "data",
    "model": "model: encoder, geometry head, projection",
    "objective": "objective: loss over the batch similarity, regularisers",
    "optimisation": "optimisation",
    "length": "length (one of steps, epochs)",
    "batches": "batches and views",
    "evaluation": "evaluation",
    "run": "run: how it executes, not what it computes (a resumed run may change these)",
}


def key(
    default: Any,
    help: str,
    *,
    group: str,
    when: When | None = None,
    arg: str | None = None,
) -> Any:
    """A config field: its default, its ``--help`` line, its group (:data:`GROUPS`), the choice it belongs to
    (``when``; None: every run uses it) and, for a loss's hyper-parameter, the loss's keyword (``arg``)."""
    meta = {"help": help, "group": group, "when": when, "arg": arg}
    return dataclasses.field(default=default, metadata=meta)


data = functools.partial(key, group="data")
model = functools.partial(key, group="model")
objective = functools.partial(key, group="objective")
optimisation = functools.partial(key, group="optimisation")
length = functools.partial(key, group="length")
batches = functools.partial(key, group="batches")
evaluation = functools.partial(key, group="evaluation")
run = functools.partial(key, group="run")


@dataclass(frozen=True)
class Config:
    """Every knob of a run (defaults: the offline digits recipe, torus_n + SupCon; the default preset adds
    Stowell 2026's KoLeo and SupContrast's τ/τ_base factor)."""

    preset: str = key("supcon_torus_n", "named recipe whose values replace these defaults", group="preset")
    dataset: str = data(
        "digits", "digits | mnist | fashion_mnist | cifar10 | cifar100 | tfds:NAME | npz:PATH | idx:DIR"
    )
    test_fraction: float = data(0.25, "held-out fraction (data without a test split)", when=OWN_SPLIT)
    data_dir: str | None = data(None, "tfds data directory (none = tfds's default)", when=TFDS)
    # model
    encoder: EncoderName = model("mlp", "image encoder")
    width: int | None = model(
        None,
        "encoder width (none = the encoder's own: mlp 512 hidden per layer; cnn 32, its first stage; "
        "resnet18 / resnet50 64, the base of torchvision's)",
    )
    norm: Norm | None = model(None, "CNN / ResNet normalisation (none = the encoder's own)", when=CONV)
    geometry: Geometry = model("torus_n", "where embeddings live")
    dim: int = model(64, "D before projection (torus_c gives 2D extrinsic values); an atlas's chart dim d")
    charts: int = model(1, "atlas charts n", when=ATLAS)
    head: Head = model(
        "stowell",
        "geometry head: stowell, Linear(F, 4·dim) → ReLU → Linear(4·dim, dim) (Stowell 2026's code); "
        "supcontrast, Linear(F, F) → ReLU → Linear(F, dim) (SupContrast's); linear, Linear(F, dim) (Korman "
        "2021's code); F: the encoder's features",
        when=VECTORS,
    )
    projection: ProjectionName = model("none", "projection head: mlp (SimCLR) or mixed (MSimCLR, atlas only)")
    projection_dim: int = model(64, "projection head output width", when=PROJECTED)
    qat_bits: QatBits | None = model(None, "train the torus head through the b-bit grid", when=TORUS)
    qat_noise: bool = model(False, "one grid step of uniform noise in training, not rounding", when=QAT)
    precision: Precision = model("fp32", "bf16: bf16 compute, fp32 parameters, loss and embeddings")
    # objective
    loss: LossName = objective("supcon", "loss over the batch similarity matrix (simo: over the embeddings)")
    similarity: LossSimilarity = objective(
        "cosine",
        "what the loss compares and retrieval ranks by; torus: −flat-torus L1 of the angles; manifold: an "
        "atlas's −d_M",
    )
    labels: Labels = objective("class", "positives: same class, or instance (each image its own: SimCLR)")
    temperature: float = objective(0.1, "softmax temperature τ", when=SOFTMAX, arg="temperature")
    base_temperature: float | None = objective(
        None,
        "× τ/base_temperature as SupContrast (0.07); none: pytorch-metric-learning's form",
        when=SOFTMAX,
        arg="base_temperature",
    )
    margin: float = objective(0.2, "triplet margin (similarity units)", when=TRIPLET, arg="margin")
    mining: Mining = objective("all", "triplet mining", when=TRIPLET, arg="mining")
    pos_margin: float | None = objective(
        None, "positive margin (none: the loss's own)", when=MARGINS, arg="pos_margin"
    )
    neg_margin: float | None = objective(
        None, "negative margin (none: the loss's own)", when=MARGINS, arg="neg_margin"
    )
    simo_eps: float = objective(1e-6, "SimO ε", when=SIMO, arg="eps")
    simo_orthogonality: bool = objective(
        True, "false: SimO's ablation (every orthogonality term o_ij = 1)", when=SIMO, arg="orthogonality"
    )
    koleo: float = objective(
        0.0, "KoLeo weight: KoLeo of each view's embeddings, summed over views", when=VECTORS
    )
    koleo_eps: float | None = objective(
        None, "KoLeo ε in log(distance + ε) (none: the library's 1e-8, DINOv2's)", when=VECTORS
    )
    mmd: float = objective(0.0, "λ1, the atlas MMD ℓ_Z weight (Korman 2021 eq. 6)", when=ATLAS)
    membership: float = objective(0.0, "λ2, the atlas membership ℓ_J weight", when=ATLAS)
    prior_samples: int = objective(256, "uniform-prior sample size M for ℓ_Z", when=ATLAS)
    # optimisation
    optimizer: Optimizer = optimisation("adamw", "optimiser")
    lr: float = optimisation(1e-3, "peak learning rate")
    weight_decay: float = optimisation(1e-4, "decoupled weight decay", when=ADAMW)
    l2: float = optimisation(
        0.0, "coupled weight decay: l2·w added to the gradient (PyTorch SGD's weight_decay)", when=MOMENTUM
    )
    momentum: float = optimisation(
        0.0, "momentum (0 = none, as PyTorch's and optax's default)", when=MOMENTUM
    )
    schedule: Schedule = optimisation("cosine", "learning-rate schedule after the linear warm-up")
    lr_min: float = optimisation(0.0, "final learning rate (PyTorch's eta_min)", when=COSINE)
    warmup: int = optimisation(100, "linear warm-up steps (at most steps/2)")
    clip: float | None = optimisation(
        100.0, "gradient clipping threshold (Stowell 2026 clips at 100; none: no clipping)"
    )
    clip_mode: ClipMode = optimisation(
        "global_norm", "optax.clip_by_global_norm, or element-wise optax.clip", when=CLIPPED
    )
    ema: float | None = optimisation(
        None, "decay per epoch of an EMA of the weights, which the report evaluates (none: no EMA)"
    )
    # length
    steps: int = length(1500, "training steps (a preset's epochs give way to it)")
    epochs: float | None = length(None, "passes over the training set (none: use steps)")
    # batches
    batch_size: int = batches(256, "images per step (global); each gives `views` augmented views")
    views: int = batches(2, "augmented views per image")
    sampler: Sampler = batches("random", "batch sampler")
    m_per_class: int = batches(4, "images per class (MTriplet: 8 classes × 4)", when=M_PER_CLASS)
    class_fraction: float = batches(0.4, "fraction of classes per batch (< 0.5)", when=CLASS_SUBSAMPLED)
    augment: Augmentation = batches(
        "shift",
        "view augmentation: shift (±1 px + contrast), crop_flip (±2 px crop, flip), simclr (SupContrast's "
        "CIFAR views), crop_jitter_gray (Korman 2021 A.1: no flip), or none",
    )
    seed: int = batches(0, "seed of the initialisation, the batches and the augmentations")
    seeds: int = batches(
        1, "train seeds seed … seed+seeds−1 as replicas in one program (stacked, vmapped); report: their mean"
    )
    # evaluation
    knn_k: int = evaluation(5, "k of the reported kNN accuracy")
    probe: Probe | None = evaluation(None, "linear (frozen-feature classifier) or piecewise (one per chart)")
    probe_epochs: int = evaluation(1, "probe training epochs", when=PROBE)
    select_best: bool = evaluation(
        False,
        "hold out val_fraction of the training set, measure its P@1 every val_every steps and report the "
        "weights of the best evaluation (early stopping, Stowell 2026 §5)",
    )
    val_fraction: float = evaluation(
        0.1, "held-out validation fraction of the training set (stratified, fixed split)", when=SELECT
    )
    val_every: int | None = evaluation(None, "steps between validations (none: one epoch)", when=SELECT)
    # run
    workdir: str | None = run(None, "run directory (none: new, under runs/); an existing one resumes")
    parallel: str = run("shard_map", "data-parallel mode: shard_map or pmap")
    devices: int | None = run(None, "data-parallel devices (none = all)")
    feed: Feed | None = run(
        None,
        "device: training images held on the devices, batches drawn inside the step; host: rows gathered "
        "in NumPy by a prefetch thread; none: device when the images take ≤ 1 GiB and parallel=shard_map",
    )
    steps_per_call: int = run(
        1, "training steps per dispatch (one lax.scan); logs and checkpoints round to calls"
    )
    coordinator: str | None = run(
        None, "multi-process run: jax.distributed coordinator HOST:PORT (none: $JAX_COORDINATOR_ADDRESS)"
    )
    num_processes: int | None = run(None, "multi-process run: number of processes (none: $JAX_NUM_PROCESSES)")
    process_id: int | None = run(None, "multi-process run: this process's id (none: $JAX_PROCESS_ID)")
    multihost: bool = run(
        False, "jax.distributed.initialize() with the cluster's own settings (TPU pod slice, SLURM, Open MPI)"
    )
    checkpoint_every: int | None = run(None, "steps between checkpoints (none: a tenth of the steps)")
    checkpoint_minutes: float = run(10.0, "also checkpoint when this many minutes passed since the last one")
    log_every: int = run(25, "steps between metrics.jsonl lines (each the mean over its window)")
    eval_batch: int = run(1024, "images per evaluation forward pass")
    progress: bool = run(True, "show a progress bar")


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
# trains Fashion-MNIST in under 10 minutes (benchmarks/cpu_recipe.py).
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

FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Config)}
DEFAULTS: dict[str, Any] = {f.name: f.default for f in FIELDS.values()}
WHEN: dict[str, When] = {name: f.metadata["when"] for name, f in FIELDS.items() if f.metadata["when"]}
RUN_KEYS: tuple[str, ...] = tuple(name for name, f in FIELDS.items() if f.metadata["group"] == "run")
LENGTH_KEYS = ("steps", "epochs")
_TYPES = typing.get_type_hints(Config)


def _literals(kind: Any) -> tuple[Any, ...]:
    """Values of the ``Literal`` parts of a (possibly optional / union) type; () when it has none."""
    if typing.get_origin(kind) is Literal:
        return typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return tuple(v for part in typing.get_args(kind) for v in _literals(part))
    return ()


def _base(kind: Any) -> type:
    """The plain Python type of a field: that of its Literal choices, or the non-None part of an Optional."""
    parts = [p for p in typing.get_args(kind) if p is not type(None)] if typing.get_args(kind) else [kind]
    if _literals(kind):
        return type(_literals(kind)[0])
    return parts[0] if typing.get_origin(parts[0]) is None else str


def _optional(kind: Any) -> bool:
    return type(None) in typing.get_args(kind)


def choices(name: str) -> tuple[Any, ...]:
    """The allowed values of a config key ('' tuple: any value of its type)."""
    if name == "preset":
        return tuple(PRESETS)
    if name == "parallel":
        return MODES
    return _literals(_TYPES[name])


def _parse(name: str, text: str) -> Any:
    kind = _TYPES[name]
    if _optional(kind) and text.lower() in ("none", "null"):
        return None
    base = _base(kind)
    if base is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise UsageError(f"{name} must be true or false, got {text!r}")
    try:
        return base(text)
    except ValueError:
        raise UsageError(f"{name} must be a {base.__name__}, got {text!r}") from None


def from_args(args: list[str]) -> Config:
    """Build a config from ``key=value`` strings: preset values first, then the explicit overrides."""
    overrides = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        name = name.lstrip("-").replace("-", "_")
        if not sep:
            raise UsageError(f"arguments must be key=value, got {arg!r} (see python -m train --help)")
        _check_known([name])
        overrides[name] = _parse(name, value)
    return make(**overrides)


def _check_known(names: Any) -> None:
    unknown = sorted(set(names) - set(FIELDS))
    if unknown:
        raise UsageError(f"unknown key(s) {unknown}; valid keys: {', '.join(FIELDS)}")


def preset_values(name: str) -> dict[str, Any]:
    """The values of preset ``name`` (with ``preset`` itself)."""
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return {**PRESETS[name], "preset": name}


def applies(name: str, cfg: Config) -> bool:
    """Whether the run ``cfg`` uses key ``name`` (every key without a :class:`When` is used)."""
    return name not in WHEN or WHEN[name].holds(cfg)


def preset_unused(name: str) -> list[str]:
    """The keys preset ``name`` sets that its own choices do not use (a bug in the preset: empty for every
    shipped preset, which the tests check)."""
    values = preset_values(name)
    cfg = Config(**values)
    return [k for k in values if not applies(k, cfg)]


def unused_message(name: str, cfg: Config) -> str:
    """``margin applies to loss=triplet, not loss='supcon'``."""
    when = WHEN[name]
    return f"{name} applies to {when}, not {when.choice}={getattr(cfg, when.choice)!r}"


def _length(preset: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The preset's values less the length key that the user's own length replaces (logged); both length
    keys from the user is an error."""
    given = [k for k in LENGTH_KEYS if overrides.get(k) is not None]
    if len(given) == 2:
        raise UsageError("steps and epochs both given: a run's length is one of them")
    if given:
        other = LENGTH_KEYS[1 - LENGTH_KEYS.index(given[0])]
        if preset.get(other) is not None:
            log.warning(
                "%s=%s replaces preset %s's %s=%s",
                given[0],
                overrides[given[0]],
                preset["preset"],
                other,
                preset[other],
            )
            return {k: v for k, v in preset.items() if k != other}
    return preset


def make(**overrides: Any) -> Config:
    """Config of ``preset`` (default supcon_torus_n) with ``overrides`` (the user's keys) applied, validated.

    A user key the run does not use raises :class:`UsageError`; a preset key the user's choices make unused
    returns to its default with one log line; the user's ``steps`` or ``epochs`` replaces the preset's other.
    """
    _check_known(overrides)
    preset = _length(preset_values(overrides.get("preset", DEFAULTS["preset"])), overrides)
    cfg = Config(**{**preset, **overrides})
    _check_types(cfg)
    dropped = True
    while dropped:  # dropping a preset's choice (qat_bits) can make another of its keys unused (qat_noise)
        dropped = False
        for name in WHEN:
            if applies(name, cfg):
                continue
            if name in overrides:
                raise UsageError(unused_message(name, cfg))
            if getattr(cfg, name) != DEFAULTS[name]:
                log.warning(
                    "preset %s's %s=%s dropped: %s",
                    cfg.preset,
                    name,
                    getattr(cfg, name),
                    unused_message(name, cfg),
                )
                cfg = dataclasses.replace(cfg, **{name: DEFAULTS[name]})
                dropped = True
    validate(cfg)
    return cfg


def from_saved(values: dict[str, Any]) -> Config:
    """The config of a run directory's config.json (every key, as :func:`dataclasses.asdict` wrote it):
    unknown keys refused, unused ones back to their defaults, the rest validated."""
    _check_known(values)
    cfg = Config(**values)
    _check_types(cfg)
    cfg = dataclasses.replace(cfg, **{name: DEFAULTS[name] for name in WHEN if not applies(name, cfg)})
    validate(cfg)
    return cfg


def used(values: dict[str, Any]) -> dict[str, Any]:
    """The keys of a saved config (a dict of every key) that its run uses, with their values."""
    cfg = Config(**{k: v for k, v in values.items() if k in FIELDS})
    return {k: v for k, v in values.items() if k in FIELDS and applies(k, cfg)}


def loss_kwargs(cfg: Config) -> dict[str, Any]:
    """The keyword arguments of ``cfg.loss`` (its keys' library names; a None value: the loss's default)."""
    return {
        f.metadata["arg"]: getattr(cfg, name)
        for name, f in FIELDS.items()
        if f.metadata["arg"] and applies(name, cfg) and getattr(cfg, name) is not None
    }


def _check_types(cfg: Config) -> None:
    for name, kind in _TYPES.items():
        value = getattr(cfg, name)
        allowed = choices(name)
        if value is None:
            if not _optional(kind):
                raise UsageError(f"{name} must be set (it has no default of its own), got None")
        elif allowed:
            if value not in allowed:
                raise UsageError(f"{name} must be one of {list(allowed)}, got {value!r}")
        else:
            base = _base(kind)
            ok = isinstance(value, base) and not (base is int and isinstance(value, bool))
            if base is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok:
                raise UsageError(f"{name} must be a {base.__name__}, got {value!r}")


_POSITIVE_INTS = (
    "seeds",
    "dim",
    "charts",
    "projection_dim",
    "steps",
    "batch_size",
    "views",
    "m_per_class",
    "prior_samples",
    "eval_batch",
    "knn_k",
    "checkpoint_every",
    "log_every",
    "probe_epochs",
    "val_every",
    "width",
    "devices",
    "steps_per_call",
    "num_processes",
)


def validate(cfg: Config) -> None:
    """Raise :class:`UsageError` naming the key for a bad value or a combination that has no meaning."""
    _check_types(cfg)
    for name in _POSITIVE_INTS:
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise UsageError(f"{name} must be a positive integer, got {value}")
    for name in ("lr", "temperature", "simo_eps", "checkpoint_minutes"):
        if not getattr(cfg, name) > 0:
            raise UsageError(f"{name} must be positive, got {getattr(cfg, name)}")
    for name in ("base_temperature", "koleo_eps", "epochs", "clip"):
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise UsageError(f"{name} must be positive, got {value}")
    if cfg.ema is not None and not 0 < cfg.ema < 1:
        raise UsageError(f"ema (decay per epoch) must be in (0, 1), got {cfg.ema}")
    if not 0 <= cfg.lr_min <= cfg.lr:
        raise UsageError(f"lr_min must be in [0, lr={cfg.lr}], got {cfg.lr_min}")
    for name in ("koleo", "mmd", "membership", "weight_decay", "l2", "momentum", "warmup"):
        if not getattr(cfg, name) >= 0:
            raise UsageError(f"{name} must be non-negative, got {getattr(cfg, name)}")
    for name in ("test_fraction", "val_fraction"):
        if not 0 < getattr(cfg, name) < 1:
            raise UsageError(f"{name} must be in (0, 1), got {getattr(cfg, name)}")
    if not 0 < cfg.class_fraction < 0.5:
        raise UsageError(
            f"class_fraction must be in (0, 0.5) (fewer than half the classes), got {cfg.class_fraction}"
        )
    check_dataset_name(cfg.dataset)
    if cfg.geometry == "torus_n" and cfg.dim % 2:
        raise UsageError(f"dim must be even for geometry='torus_n' (adjacent pairs), got {cfg.dim}")
    if cfg.projection == "mixed" and cfg.geometry != "atlas":
        raise UsageError("projection='mixed' (MSimCLR) needs geometry='atlas'")
    vectors = cfg.geometry != "atlas" or cfg.projection != "none"  # does the loss see plain vectors?
    if cfg.similarity == "manifold" and vectors:
        raise UsageError(
            "similarity='manifold' (atlas d_M) needs geometry='atlas' and projection='none'; "
            f"got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.similarity != "manifold":
        raise UsageError(
            f"geometry='atlas' without a projection head has no vector similarity: use "
            f"similarity='manifold' (Korman 2021 eq. 7) or projection=mixed, got {cfg.similarity!r}"
        )
    if cfg.similarity == "torus" and (cfg.geometry not in TORUS_GEOMETRIES or cfg.projection != "none"):
        raise UsageError(
            "similarity='torus' (flat-torus distance of the angles) needs geometry torus_c or torus_n and "
            f"projection='none'; got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.loss == "simo":
        raise UsageError("loss='simo' needs vectors: with geometry='atlas' use projection=mixed or mlp")
    if cfg.labels == "instance" and cfg.views < 2:
        raise UsageError("labels='instance' needs views >= 2 (the positives are the other views)")
    if cfg.sampler == "m_per_class" and cfg.batch_size % cfg.m_per_class:
        raise UsageError(
            f"batch_size must be a multiple of m_per_class={cfg.m_per_class}, got {cfg.batch_size}"
        )
    if cfg.seeds > 1 and (cfg.feed == "host" or cfg.parallel != "shard_map"):
        raise UsageError(
            "seeds > 1 draws each replica's batches on the devices: it needs feed=device (or none) and "
            f"parallel=shard_map, got feed={cfg.feed!r}, parallel={cfg.parallel!r}"
        )
    if cfg.feed == "device" and cfg.parallel != "shard_map":
        raise UsageError("feed='device' (images held on the devices) needs parallel='shard_map'")
    if cfg.process_id is not None and not 0 <= cfg.process_id < (cfg.num_processes or cfg.process_id + 1):
        raise UsageError(
            f"process_id must be in [0, num_processes={cfg.num_processes}), got {cfg.process_id}"
        )
    if cfg.coordinator is not None and not cfg.coordinator.rpartition(":")[2].isdigit():
        raise UsageError(f"coordinator must be HOST:PORT, got {cfg.coordinator!r}")
    if cfg.probe == "piecewise" and cfg.geometry != "atlas":
        raise UsageError("probe='piecewise' (one linear classifier per chart) needs geometry='atlas'")


def _key_lines(name: str, indent: str) -> list[str]:
    f = FIELDS[name]
    default = "none" if f.default is None else repr(f.default)
    lines = [f"{indent}{name:18s} {default:16s} {f.metadata['help']}"]
    if choices(name) and name != "preset":
        lines.append(f"{indent}{'':18s} {'':16s} one of: {', '.join(map(str, choices(name)))}")
    return lines


def help_text() -> str:
    """Text for ``python -m train --help``: usage, presets, then the keys by group, each key that belongs to
    a choice listed under that choice."""
    lines = ["usage: python -m train [preset=NAME] [key=value ...]", "", "presets:"]
    for name, values in PRESETS.items():
        lines.append(f"  {name:24s} {', '.join(f'{k}={v}' for k, v in values.items()) or '(the defaults)'}")
    lines += [
        "",
        "keys (default; `none` selects the default marked so). A key listed under `when CHOICE=...` is used",
        "only with that choice: given with another, the run is refused; set by a preset, it is dropped.",
    ]
    for group, title in GROUPS.items():
        names = [n for n, f in FIELDS.items() if f.metadata["group"] == group and n != "preset"]
        lines += ["", f"{title}:"]
        lines += [line for n in names if n not in WHEN for line in _key_lines(n, "  ")]
        for when in dict.fromkeys(WHEN[n] for n in names if n in WHEN):
            lines.append(f"  when {when}:")
            lines += [line for n in names if WHEN.get(n) == when for line in _key_lines(n, "    ")]
    return "\n".join(lines)
