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
    dataset: str = key("digits", "digits | mnist | fashion_mnist | cifar10 | cifar100 | npz:PATH")
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
    margin: float = key(0.2, "triplet margin")
    mining: Mining = key("all", "triplet mining")
    pos_margin: float | None = key(None, "contrastive, lifted_structured positive margin (none: the loss's)")
    neg_margin: float | None = key(None, "contrastive, lifted_structured negative margin (none: the loss's)")
    simo_eps: float = key(1e-6, "SimO ε")
    simo_orthogonality: bool = key(True, "false: SimO's ablation (every orthogonality term o_ij = 1)")
    koleo: float = key(0.1, "KoLeo weight (on the geometry embedding)")
    mmd: float = key(0.0, "λ1, the atlas MMD ℓ_Z weight (Korman 2021 eq. 6)")
    membership: float = key(0.0, "λ2, the atlas membership ℓ_J weight")
    prior_samples: int = key(256, "uniform-prior sample size M for ℓ_Z")
    # optimisation
    optimizer: Optimizer = key("adamw", "optimiser")
    lr: float = key(1e-3, "peak learning rate")
    weight_decay: float = key(1e-4, "adamw weight decay")
    momentum: float = key(0.9, "sgd / rmsprop momentum (0 = none)")
    schedule: Schedule = key("cosine", "learning-rate schedule after the linear warm-up")
    warmup: int = key(100, "linear warm-up steps (at most steps/2)")
    clip: float = key(100.0, "gradient clipping threshold (Stowell 2026 clips at 100)")
    clip_mode: ClipMode = key("global_norm", "optax.clip_by_global_norm, or element-wise optax.clip")
    steps: int = key(1500, "training steps")
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
    multihost: bool = key(False, "call jax.distributed.initialize(); each process reads its own shard")
    checkpoint_every: int = key(500, "steps between checkpoints")
    log_every: int = key(25, "steps between metrics.jsonl lines (each the mean over its window)")
    eval_batch: int = key(1024, "images per evaluation forward pass")
    knn_k: int = key(5, "k of the reported kNN accuracy")
    probe: Probe | None = key(None, "linear (frozen-feature classifier) or piecewise (one per atlas chart)")
    probe_epochs: int = key(1, "probe training epochs")
    progress: bool = key(True, "show a progress bar")


PRESETS: dict[str, dict[str, Any]] = {
    # Stowell 2026: SupCon τ = 0.1, KoLeo, clip 100, two views, P@1.
    "supcon_torus_n": {},
    "supcon_sphere": {"geometry": "sphere"},
    "supcon_torus_c": {"geometry": "torus_c", "dim": 32},
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
    """The plain Python type of a field: str for Literal choices, the non-None part of an Optional."""
    parts = [p for p in typing.get_args(kind) if p is not type(None)] if typing.get_args(kind) else [kind]
    if _literals(kind):
        return str
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
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    cfg = Config(**{**PRESETS[preset], **overrides})
    validate(cfg)
    return cfg


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
)


def validate(cfg: Config) -> None:
    """Raise ValueError naming the key for a bad value or an impossible combination."""
    _check_types(cfg)
    for name in _POSITIVE_INTS:
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    for name in ("lr", "temperature", "clip", "simo_eps"):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be positive, got {getattr(cfg, name)}")
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
    if cfg.probe == "piecewise" and cfg.geometry != "atlas":
        raise ValueError("probe='piecewise' (one linear classifier per chart) needs geometry='atlas'")


def help_text() -> str:
    """Text for ``python -m train --help``: usage, presets and every key with its default and meaning."""
    lines = ["usage: python -m train [preset=NAME] [key=value ...]", "", "presets:"]
    for name, values in PRESETS.items():
        desc = ", ".join(f"{k}={v}" for k, v in values.items()) or "(the defaults)"
        lines.append(f"  {name:16s} {desc}")
    lines += ["", "keys (default; `none` selects the default marked so):"]
    for f in dataclasses.fields(Config):
        allowed = choices(f.name) if f.name != "preset" else ()
        default = "none" if f.default is None else repr(f.default)
        lines.append(f"  {f.name:18s} {default:16s} {f.metadata['help']}")
        if allowed:
            lines.append(f"  {'':18s} {'':16s} one of: {', '.join(map(str, allowed))}")
    return "\n".join(lines)
