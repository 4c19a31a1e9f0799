"""Run configuration: one typed dataclass, named presets (the papers' recipes) and ``key=value`` overrides.

Every field carries its type, its default and one line of help. Choices are ``Literal`` types, most of them
imported from the library (geometries, losses, similarities, mining, encoders) or the data module (samplers,
augmentations), and validation and ``python -m train --help`` are derived from them. ``None`` is the one
"use the default" marker (the encoder's own width, the loss's own margins, all devices, a fresh run
directory); on the command line it is written ``none``.

Any loss runs on any geometry: ``loss``, ``geometry``, ``similarity`` and the regulariser weights are
independent keys; :func:`validate` rejects only combinations that have no meaning (an odd ``dim`` for
torus_n, a vector similarity on an atlas without a projection head, ...), before any work is done.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from geojax.losses import LossName, Mining
from geojax.manifolds import Geometry
from geojax.models import EncoderName, ProjectionName
from geojax.parallel import MODES
from geojax.similarity import SimilarityName
from train.data import Augmentation, Sampler, check_dataset_name

Labels = Literal["class", "instance"]
Norm = Literal["batch", "group", "none"]
Optimizer = Literal["adam", "adamw", "sgd", "rmsprop"]
Schedule = Literal["cosine", "constant"]
ClipMode = Literal["global_norm", "value"]
Precision = Literal["fp32", "bf16"]
Probe = Literal["linear", "piecewise"]
QatBits = Literal[1, 2, 4, 8]
Feed = Literal["device", "host"]
# "manifold" ranks atlas points by −d_M (Korman 2021 eq. 7); the rest are geojax.similarity's names.
LossSimilarity = SimilarityName | Literal["manifold"]


def key(default: Any, help: str) -> Any:
    """A config field with its default and its ``--help`` line."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Config:
    """Every knob of a run (defaults: the offline digits recipe, torus_n + SupCon + KoLeo)."""

    preset: str = key("supcon_torus_n", "named recipe whose values replace these defaults (see presets)")
    workdir: str | None = key(None, "run directory (none: new, under runs/); an existing one resumes")
    dataset: str = key("digits", "digits | mnist | fashion_mnist | cifar10 | cifar100 | tfds:NAME | npz:PATH")
    test_fraction: float = key(0.25, "held-out fraction for data without a test split (digits, npz)")
    data_dir: str | None = key(None, "tfds data directory (none = tfds's default)")
    # model
    encoder: EncoderName = key("mlp", "image encoder")
    width: int | None = key(512, "encoder width: MLP hidden / CNN or ResNet base (none = the encoder's own)")
    norm: Norm | None = key(None, "CNN / ResNet normalisation (none = the encoder's own)")
    geometry: Geometry = key("torus_n", "where embeddings live")
    dim: int = key(64, "D before projection (torus_c gives 2D extrinsic values); an atlas's chart dim d")
    charts: int = key(1, "atlas charts n")
    projection: ProjectionName = key("none", "projection head: mlp (SimCLR) or mixed (MSimCLR, atlas only)")
    projection_dim: int = key(64, "projection head output width")
    # objective
    loss: LossName = key("supcon", "loss over the batch similarity matrix")
    similarity: LossSimilarity = key(
        "cosine",
        "what the loss compares; torus: −flat-torus L1 of the angles; manifold: an atlas's −d_M",
    )
    labels: Labels = key("class", "positives: same class, or instance (each image its own class: SimCLR)")
    temperature: float = key(0.1, "softmax temperature τ (supcon, sincere, info_nce)")
    base_temperature: float | None = key(
        None, "supcon × τ/base_temperature as SupContrast (0.07); none: pytorch-metric-learning's form"
    )
    margin: float = key(0.2, "triplet margin")
    mining: Mining = key("all", "triplet mining")
    pos_margin: float | None = key(None, "contrastive, lifted_structured positive margin (none: the loss's)")
    neg_margin: float | None = key(None, "contrastive, lifted_structured negative margin (none: the loss's)")
    simo_eps: float = key(1e-6, "SimO ε")
    simo_orthogonality: bool = key(True, "false: SimO's ablation (every orthogonality term o_ij = 1)")
    qat_bits: QatBits | None = key(None, "train the torus head through the b-bit grid (torus_c / torus_n)")
    qat_noise: bool = key(False, "with qat_bits: one grid step of uniform noise in training, not rounding")
    koleo: float = key(0.1, "KoLeo weight: KoLeo of each view's embeddings, summed over the views")
    koleo_eps: float = key(1e-6, "KoLeo ε in log(distance + ε) (Stowell 2026's code: 1e-6; DINOv2: 1e-8)")
    mmd: float = key(0.0, "λ1, the atlas MMD ℓ_Z weight (Korman 2021 eq. 6)")
    membership: float = key(0.0, "λ2, the atlas membership ℓ_J weight")
    prior_samples: int = key(256, "uniform-prior sample size M for ℓ_Z")
    # optimisation
    optimizer: Optimizer = key("adamw", "optimiser")
    lr: float = key(1e-3, "peak learning rate")
    weight_decay: float = key(1e-4, "adamw weight decay")
    momentum: float = key(0.9, "sgd / rmsprop momentum (0 = none)")
    schedule: Schedule = key("cosine", "learning-rate schedule after the linear warm-up")
    lr_min: float = key(0.0, "cosine schedule's final learning rate (PyTorch's eta_min)")
    warmup: int = key(100, "linear warm-up steps (at most steps/2)")
    clip: float = key(100.0, "gradient clipping threshold (Stowell 2026 clips at 100)")
    clip_mode: ClipMode = key("global_norm", "optax.clip_by_global_norm, or element-wise optax.clip")
    steps: int = key(1500, "training steps (ignored when epochs is set)")
    epochs: float | None = key(None, "train for this many passes over the training set (none: use steps)")
    ema: float | None = key(
        None, "decay per epoch of an EMA of the weights, which the report evaluates (none: no EMA)"
    )
    batch_size: int = key(256, "images per step (global); each gives `views` augmented views")
    views: int = key(2, "augmented views per image")
    sampler: Sampler = key("random", "batch sampler")
    m_per_class: int = key(4, "m_per_class sampler: images per class (MTriplet: 8 classes × 4)")
    class_fraction: float = key(0.4, "class_subsampled sampler: fraction of classes per batch (< 0.5)")
    augment: Augmentation = key("shift", "view augmentation: shift (±1 px + contrast), simclr, or none")
    # run
    seed: int = key(0, "seed of the initialisation, the batches and the augmentations")
    parallel: str = key("shard_map", "data-parallel mode: shard_map or pmap")
    devices: int | None = key(None, "data-parallel devices (none = all)")
    precision: Precision = key("fp32", "bf16: bf16 compute, fp32 parameters, loss and embeddings")
    feed: Feed | None = key(
        None,
        "device: training images held on the devices, batches drawn inside the step; host: rows gathered "
        "in NumPy by a prefetch thread; none: device when the images take ≤ 1 GiB and parallel=shard_map",
    )
    steps_per_call: int = key(
        1, "training steps per dispatch (one lax.scan); logs and checkpoints round to calls"
    )
    coordinator: str | None = key(
        None, "multi-process run: jax.distributed coordinator HOST:PORT (none: $JAX_COORDINATOR_ADDRESS)"
    )
    num_processes: int | None = key(None, "multi-process run: number of processes (none: $JAX_NUM_PROCESSES)")
    process_id: int | None = key(None, "multi-process run: this process's id (none: $JAX_PROCESS_ID)")
    multihost: bool = key(
        False, "jax.distributed.initialize() with the cluster's own settings (TPU pod slice, SLURM, Open MPI)"
    )
    checkpoint_every: int | None = key(None, "steps between checkpoints (none: a tenth of the steps)")
    checkpoint_minutes: float = key(10.0, "also checkpoint when this many minutes passed since the last one")
    log_every: int = key(25, "steps between metrics.jsonl lines (each the mean over its window)")
    eval_batch: int = key(1024, "images per evaluation forward pass")
    knn_k: int = key(5, "k of the reported kNN accuracy")
    probe: Probe | None = key(None, "linear (frozen-feature classifier) or piecewise (one per atlas chart)")
    probe_epochs: int = key(1, "probe training epochs")
    progress: bool = key(True, "show a progress bar")


# Stowell 2026's CIFAR recipe as its public code runs it (SupCon-Framework, branch torus, configs/train):
# ResNet-18, D = 16, 100 epochs of 200 images, SGD lr 0.1 (no momentum) with cosine annealing to 0.01, SupCon
# τ = 0.1 with SupContrast's τ/0.07 factor, KoLeo weight 1 per view, gradients clamped element-wise at 100, an
# EMA of the weights (decay 0.3 per epoch) for evaluation, mixed precision. The public code starts from
# ImageNet weights; geojax trains from scratch.
_TORUS_CIFAR = {
    "encoder": "resnet18",
    "dim": 16,
    "batch_size": 200,
    "epochs": 100,
    "optimizer": "sgd",
    "lr": 0.1,
    "momentum": 0.0,
    "weight_decay": 0.0,
    "schedule": "cosine",
    "warmup": 0,
    "lr_min": 0.01,
    "temperature": 0.1,
    "base_temperature": 0.07,
    "koleo": 1.0,
    "clip": 100.0,
    "clip_mode": "value",
    "ema": 0.3,
    "precision": "bf16",
    "augment": "simclr",
    "eval_batch": 500,
}
_TORUS_GEOMETRIES = ("sphere", "torus_c", "torus_n")
_CIFAR10 = {
    "dataset": "cifar10",
    "encoder": "resnet18",
    "dim": 128,
    "batch_size": 512,
    "epochs": 100,
    "augment": "simclr",
    "precision": "bf16",
    "eval_batch": 500,
}

PRESETS: dict[str, dict[str, Any]] = {
    # Stowell 2026 on the bundled digits: SupCon τ = 0.1 (× τ/0.07), KoLeo, clip 100, two views, P@1.
    "supcon_torus_n": {"base_temperature": 0.07},
    "supcon_sphere": {"geometry": "sphere", "base_temperature": 0.07},
    "supcon_torus_c": {"geometry": "torus_c", "dim": 32, "base_temperature": 0.07},
    **{
        f"supcon_{geometry}_{data}": {**_TORUS_CIFAR, "geometry": geometry, "dataset": data}
        for geometry in _TORUS_GEOMETRIES
        for data in ("cifar10", "cifar100")
    },
    # Feeney & Hughes 2024: SupCon / SINCERE on the sphere, cosine or negative arc length, 1NN / 5NN.
    "supcon": {"geometry": "sphere", "koleo": 0.0},
    "sincere": {"geometry": "sphere", "loss": "sincere", "koleo": 0.0},
    # Korman 2021 §3.1: NT-Xent on q-mixed projection heads, λ1 = 20, λ2 = 0.1, τ = 1 (MNIST), SimCLR views.
    "msimclr": {
        "geometry": "atlas",
        "charts": 16,
        "dim": 4,
        "projection": "mixed",
        "loss": "info_nce",
        "labels": "instance",
        "temperature": 1.0,
        "mmd": 20.0,
        "membership": 0.1,
        "koleo": 0.0,
        "optimizer": "adam",
        "lr": 1e-3,
        "augment": "shift",
        "probe": "piecewise",
        "probe_epochs": 20,
        "batch_size": 128,  # Korman 2021 appendix A.1
    },
    # Korman 2021 appendix A.1 on MNIST: ResNet-18, batch 128, Adam 1e-4, 100 epochs, SimCLR augmentations,
    # λ1 = 20, λ2 = 0.1, τ = 1; d = 2 with n = 16 charts (Table 2's MNIST row varies n ∈ {1, 4, 16, 32}).
    "msimclr_mnist": {
        "preset": "msimclr",
        "dataset": "mnist",
        "encoder": "resnet18",
        "dim": 2,
        "lr": 1e-4,
        "epochs": 100,
        "augment": "simclr",
        "probe_epochs": 20,
    },
    # Korman 2021 §3.2: batch-all triplet on d_M, margin 0.2, 8 classes × 4, λ1 = 1, λ2 = 0.1, RMSProp.
    "mtriplet": {
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
        "koleo": 0.0,
        "optimizer": "rmsprop",
        "lr": 1e-4,
        "views": 1,
        "steps": 2000,
    },
    # Feeney & Hughes 2024 on CIFAR-10 (the blog gives no training sizes: SupContrast's ResNet-18, D = 128,
    # batch 512, SimCLR views, 100 epochs here).
    "supcon_cifar10": {"preset": "supcon", **_CIFAR10},
    "sincere_cifar10": {"preset": "sincere", **_CIFAR10},
    # Bouhsine et al. 2024: SimO, class-subsampled batches (< 50 % of classes), linear head for 1 epoch.
    "simo": {
        "geometry": "euclidean",
        "dim": 16,
        "loss": "simo",
        "sampler": "class_subsampled",
        "koleo": 0.0,
        "probe": "linear",
        "batch_size": 128,
    },
    # Bouhsine et al. 2024 on CIFAR-10: ResNet-18 encoder, D = 16, class-subsampled batches, SimCLR views.
    "simo_cifar10": {"preset": "simo", **_CIFAR10, "dim": 16, "batch_size": 128},
}

FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(Config)}
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
        raise ValueError(f"{name} must be true or false, got {text!r}")
    try:
        return base(text)
    except ValueError:
        raise ValueError(f"{name} must be a {base.__name__}, got {text!r}") from None


def from_args(args: list[str]) -> Config:
    """Build a config from ``key=value`` strings: preset values first, then the explicit overrides."""
    overrides = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        name = name.lstrip("-").replace("-", "_")
        if not sep:
            raise ValueError(f"arguments must be key=value, got {arg!r} (see python -m train --help)")
        if name not in FIELDS:
            raise ValueError(f"unknown key {name!r}; valid keys: {', '.join(FIELDS)}")
        overrides[name] = _parse(name, value)
    return make(**overrides)


def make(**overrides: Any) -> Config:
    """Config of ``preset`` (default supcon_torus_n) with ``overrides`` applied, validated."""
    unknown = set(overrides) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}; valid keys: {', '.join(FIELDS)}")
    preset = overrides.get("preset", Config.preset)
    cfg = Config(**{**preset_values(preset), **overrides})
    validate(cfg)
    return cfg


def preset_values(name: str) -> dict[str, Any]:
    """The values of preset ``name``: those of the preset it names as its base (its ``preset`` key) first."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    values = dict(PRESETS[name])
    base = values.pop("preset", None)
    return {**(preset_values(base) if base else {}), **values, "preset": name}


def _check_types(cfg: Config) -> None:
    for name, kind in _TYPES.items():
        value = getattr(cfg, name)
        allowed = choices(name)
        if value is None:
            if not _optional(kind):
                raise ValueError(f"{name} must be set (it has no default of its own), got None")
        elif allowed:
            if value not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        else:
            base = _base(kind)
            ok = isinstance(value, base) and not (base is int and isinstance(value, bool))
            if base is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok:
                raise ValueError(f"{name} must be a {base.__name__}, got {value!r}")


_POSITIVE_INTS = (
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
    "width",
    "devices",
    "steps_per_call",
    "num_processes",
)


def validate(cfg: Config) -> None:
    """Raise ValueError naming the key for a bad value or an impossible combination."""
    _check_types(cfg)
    for name in _POSITIVE_INTS:
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    for name in ("lr", "temperature", "clip", "simo_eps", "checkpoint_minutes"):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be positive, got {getattr(cfg, name)}")
    for name in ("base_temperature", "koleo_eps", "epochs"):
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if cfg.ema is not None and not 0 < cfg.ema < 1:
        raise ValueError(f"ema (decay per epoch) must be in (0, 1), got {cfg.ema}")
    if not 0 <= cfg.lr_min <= cfg.lr:
        raise ValueError(f"lr_min must be in [0, lr={cfg.lr}], got {cfg.lr_min}")
    if cfg.base_temperature is not None and cfg.loss not in ("supcon", "sincere", "info_nce"):
        raise ValueError(f"base_temperature scales the softmax losses only, got loss={cfg.loss!r}")
    if cfg.qat_bits is not None and cfg.geometry not in ("torus_c", "torus_n"):
        raise ValueError(f"qat_bits needs a torus geometry (torus_c, torus_n), got {cfg.geometry!r}")
    if cfg.qat_noise and cfg.qat_bits is None:
        raise ValueError("qat_noise needs qat_bits")
    for name in ("koleo", "mmd", "membership", "weight_decay", "momentum", "warmup"):
        if not getattr(cfg, name) >= 0:
            raise ValueError(f"{name} must be non-negative, got {getattr(cfg, name)}")
    if not 0 < cfg.test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {cfg.test_fraction}")
    if not 0 < cfg.class_fraction < 0.5:
        raise ValueError(
            f"class_fraction must be in (0, 0.5) (fewer than half the classes), got {cfg.class_fraction}"
        )
    check_dataset_name(cfg.dataset)
    if cfg.geometry == "torus_n" and cfg.dim % 2:
        raise ValueError(f"dim must be even for geometry='torus_n' (adjacent pairs), got {cfg.dim}")
    if cfg.projection == "mixed" and cfg.geometry != "atlas":
        raise ValueError("projection='mixed' (MSimCLR) needs geometry='atlas'")
    vectors = cfg.geometry != "atlas" or cfg.projection != "none"  # does the loss see plain vectors?
    if cfg.similarity == "manifold" and vectors:
        raise ValueError(
            "similarity='manifold' (atlas d_M) needs geometry='atlas' and projection='none'; "
            f"got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.similarity != "manifold":
        raise ValueError(
            f"geometry='atlas' without a projection head has no vector similarity: use "
            f"similarity='manifold' (Korman 2021 eq. 7) or projection=mixed, got {cfg.similarity!r}"
        )
    if cfg.similarity == "torus" and (cfg.geometry not in ("torus_c", "torus_n") or cfg.projection != "none"):
        raise ValueError(
            "similarity='torus' (flat-torus distance of the angles) needs geometry torus_c or torus_n and "
            f"projection='none'; got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.loss == "simo":
        raise ValueError("loss='simo' needs vectors: with geometry='atlas' use projection=mixed or mlp")
    if cfg.geometry == "atlas" and cfg.koleo > 0:
        raise ValueError("koleo needs vector embeddings; with geometry='atlas' use mmd / membership instead")
    if cfg.geometry != "atlas" and (cfg.mmd > 0 or cfg.membership > 0):
        raise ValueError("mmd and membership regularise an atlas; they need geometry='atlas'")
    if cfg.labels == "instance" and cfg.views < 2:
        raise ValueError("labels='instance' needs views >= 2 (the positives are the other views)")
    if cfg.sampler == "m_per_class" and cfg.batch_size % cfg.m_per_class:
        raise ValueError(
            f"batch_size must be a multiple of m_per_class={cfg.m_per_class}, got {cfg.batch_size}"
        )
    if cfg.feed == "device" and cfg.parallel != "shard_map":
        raise ValueError("feed='device' (images held on the devices) needs parallel='shard_map'")
    if cfg.process_id is not None and not 0 <= cfg.process_id < (cfg.num_processes or cfg.process_id + 1):
        raise ValueError(
            f"process_id must be in [0, num_processes={cfg.num_processes}), got {cfg.process_id}"
        )
    if cfg.coordinator is not None and not cfg.coordinator.rpartition(":")[2].isdigit():
        raise ValueError(f"coordinator must be HOST:PORT, got {cfg.coordinator!r}")
    if cfg.probe == "piecewise" and cfg.geometry != "atlas":
        raise ValueError("probe='piecewise' (one linear classifier per chart) needs geometry='atlas'")


def help_text() -> str:
    """Text for ``python -m train --help``: usage, presets and every key with its default and meaning."""
    lines = ["usage: python -m train [preset=NAME] [key=value ...]", "", "presets:"]
    for name, values in PRESETS.items():
        desc = ", ".join(f"{k}={v}" for k, v in values.items() if not isinstance(v, dict)) or "(the defaults)"
        lines.append(f"  {name:16s} {desc}")
    lines += ["", "keys (default; `none` selects the default marked so):"]
    for f in dataclasses.fields(Config):
        allowed = choices(f.name) if f.name != "preset" else ()
        default = "none" if f.default is None else repr(f.default)
        lines.append(f"  {f.name:18s} {default:16s} {f.metadata['help']}")
        if allowed:
            lines.append(f"  {'':18s} {'':16s} one of: {', '.join(map(str, allowed))}")
    return "\n".join(lines)
