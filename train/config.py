"""Run configuration: one flat dataclass, named presets (the seeds' recipes) and ``key=value`` overrides.

Any loss runs on any geometry: ``loss``, ``geometry``, ``similarity`` and the regulariser weights are
independent keys; :func:`validate` rejects only combinations that have no meaning (an odd ``dim`` for
torus_n, a vector similarity on an atlas without a projection head, ...), before any work is done.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass

from geojax.models import ENCODERS, GEOMETRIES

LOSSES = ("supcon", "sincere", "info_nce", "contrastive", "triplet", "lifted_structured", "simo")
SIMILARITIES = ("cosine", "neg_arc_length", "neg_euclidean", "neg_sq_euclidean", "dot", "torus", "manifold")


@dataclass(frozen=True)
class Config:
    """Every knob of a run (defaults: the offline digits recipe, torus_n + SupCon + KoLeo)."""

    preset: str = "supcon_torus_n"  # named recipe whose values replace these defaults (see PRESETS)
    workdir: str = ""  # run directory; '' = a fresh folder under runs/; an existing one resumes
    dataset: str = "digits"  # digits | mnist | fashion_mnist | cifar10 | cifar100 | npz:PATH
    test_fraction: float = 0.25  # held-out fraction for datasets without a test split (digits, npz)
    data_dir: str = ""  # tfds data directory ('' = tfds default)
    # model
    encoder: str = "mlp"  # mlp | cnn | resnet18 | resnet50
    width: int = 512  # encoder width (mlp hidden / cnn base / resnet base); 0 = the encoder's default
    norm: str = ""  # cnn / resnet normalisation: batch | group | none ('' = the encoder's default)
    geometry: str = "torus_n"  # euclidean | sphere | torus_c | torus_n | atlas
    dim: int = 64  # D before projection (torus_c gives 2D extrinsic); chart dim d for the atlas
    charts: int = 1  # atlas charts n
    projection: str = "none"  # none | mlp (SimCLR head) | mixed (MSimCLR q-mixed heads, atlas only)
    projection_dim: int = 64
    # objective
    loss: str = "supcon"
    # torus = −flat-torus L1 distance between the angles of torus embeddings (seed 000 §4); manifold = −d_M of
    # seed 001 eq. 7 (atlas without projection head)
    similarity: str = "cosine"
    labels: str = "class"  # class (supervised) | instance (each image its own class: SimCLR)
    temperature: float = 0.1
    margin: float = 0.2  # triplet margin
    mining: str = "all"  # triplet mining: all | hard | semihard
    pos_margin: float = math.nan  # contrastive / lifted_structured positive margin (nan = the loss's default)
    neg_margin: float = math.nan  # contrastive / lifted_structured negative margin (nan = the loss's default)
    simo_eps: float = 1e-6
    simo_orthogonality: bool = True  # False: seed 004's ablation (every o_ij replaced by 1)
    koleo: float = 0.1  # KoLeo weight (on the geometry embedding)
    mmd: float = 0.0  # λ1, atlas MMD ℓ_Z weight (seed 001 eq. 6)
    membership: float = 0.0  # λ2, ℓ_J weight
    prior_samples: int = 256  # uniform-prior sample size M for ℓ_Z
    # optimisation
    optimizer: str = "adamw"  # adam | adamw | sgd | rmsprop
    lr: float = 1e-3
    weight_decay: float = 1e-4  # adamw only
    momentum: float = 0.9  # sgd / rmsprop
    schedule: str = "cosine"  # cosine | constant (both after a linear warm-up)
    warmup: int = 100
    clip: float = 100.0  # seed 000
    clip_mode: str = "global_norm"  # global_norm (optax.clip_by_global_norm) | value (optax.clip)
    steps: int = 1500
    batch_size: int = 256  # images per step (global); each gives `views` augmented views
    views: int = 2
    sampler: str = "random"  # random | m_per_class | class_subsampled
    m_per_class: int = 4  # m_per_class: images per class (MTriplet: 8 classes × 4)
    class_fraction: float = 0.4  # class_subsampled: fraction of the classes in each batch (< 0.5, SimO)
    augment: str = "shift"  # shift (small images: ±1 px shift + contrast) | simclr | none
    # run
    seed: int = 0
    parallel: str = "shard_map"  # shard_map | pmap
    devices: int = 0  # data-parallel devices (0 = all)
    precision: str = "fp32"  # fp32 | bf16 (bf16 compute, fp32 params, loss and embeddings)
    multihost: bool = False  # call jax.distributed.initialize(); each process reads its own shard
    checkpoint_every: int = 500
    log_every: int = 25
    eval_batch: int = 1024
    knn_k: int = 5
    probe: str = ""  # '' | linear (frozen-feature linear classifier) | piecewise (one per atlas chart)
    probe_epochs: int = 1
    progress: bool = True


PRESETS: dict[str, dict[str, typing.Any]] = {
    # seed 000: SupCon τ = 0.1, KoLeo, clip 100, two views, P@1.
    "supcon_torus_n": {},
    "supcon_sphere": {"geometry": "sphere"},
    "supcon_torus_c": {"geometry": "torus_c", "dim": 32},
    # seed 003: SupCon / SINCERE on the sphere, cosine or negative arc length, 1NN / 5NN.
    "supcon": {"geometry": "sphere", "koleo": 0.0},
    "sincere": {"geometry": "sphere", "loss": "sincere", "koleo": 0.0},
    # seed 001 §3.1: NT-Xent on q-mixed projection heads, λ1 = 20, λ2 = 0.1, τ = 1 (MNIST), SimCLR views.
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
        "batch_size": 128,  # seed 001 A.1
    },
    # seed 001 §3.2: batch-all triplet on d_M, margin 0.2, 8 classes × 4, λ1 = 1, λ2 = 0.1, RMSProp.
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
    # seed 004: SimO, class-subsampled batches (< 50 % of classes), frozen-feature linear head for 1 epoch.
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

CHOICES: dict[str, tuple] = {
    "encoder": ENCODERS,
    "geometry": GEOMETRIES,
    "projection": ("none", "mlp", "mixed"),
    "loss": LOSSES,
    "similarity": SIMILARITIES,
    "labels": ("class", "instance"),
    "mining": ("all", "hard", "semihard"),
    "norm": ("", "batch", "group", "none"),
    "optimizer": ("adam", "adamw", "sgd", "rmsprop"),
    "schedule": ("cosine", "constant"),
    "clip_mode": ("global_norm", "value"),
    "sampler": ("random", "m_per_class", "class_subsampled"),
    "augment": ("shift", "simclr", "none"),
    "parallel": ("shard_map", "pmap"),
    "precision": ("fp32", "bf16"),
    "probe": ("", "linear", "piecewise"),
    "preset": tuple(PRESETS),
}

_FIELDS = {f.name: f for f in dataclasses.fields(Config)}
_TYPES = typing.get_type_hints(Config)


def _parse(key: str, text: str):
    kind = _TYPES[key]
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{key} must be true or false, got {text!r}")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{key} must be a {kind.__name__}, got {text!r}") from None


def from_args(args: list[str]) -> Config:
    """Build a config from ``key=value`` strings: preset values first, then the explicit overrides."""
    overrides = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        key = key.lstrip("-").replace("-", "_")
        if not sep:
            raise ValueError(f"arguments must be key=value, got {arg!r} (see python -m train --help)")
        if key not in _FIELDS:
            raise ValueError(f"unknown key {key!r}; valid keys: {', '.join(_FIELDS)}")
        overrides[key] = _parse(key, value)
    return make(**overrides)


def make(**overrides) -> Config:
    """Config of ``preset`` (default supcon_torus_n) with ``overrides`` applied, validated."""
    unknown = set(overrides) - set(_FIELDS)
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(unknown)}; valid keys: {', '.join(_FIELDS)}")
    preset = overrides.get("preset", Config.preset)
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    cfg = Config(**{**PRESETS[preset], **overrides})
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Raise ValueError naming the key for a bad value or an impossible combination."""
    for key, choices in CHOICES.items():
        if getattr(cfg, key) not in choices:
            raise ValueError(f"{key} must be one of {list(choices)}, got {getattr(cfg, key)!r}")
    for key in (
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
    ):
        if getattr(cfg, key) < 1:
            raise ValueError(f"{key} must be a positive integer, got {getattr(cfg, key)}")
    for key in ("lr", "temperature", "clip", "simo_eps"):
        if not getattr(cfg, key) > 0:
            raise ValueError(f"{key} must be positive, got {getattr(cfg, key)}")
    for key in ("koleo", "mmd", "membership", "weight_decay", "momentum", "warmup", "width", "devices"):
        if getattr(cfg, key) < 0:
            raise ValueError(f"{key} must be non-negative, got {getattr(cfg, key)}")
    if not 0 < cfg.test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {cfg.test_fraction}")
    if not 0 < cfg.class_fraction < 0.5:
        raise ValueError(
            f"class_fraction must be in (0, 0.5) (SimO: fewer than half the classes), "
            f"got {cfg.class_fraction}"
        )
    if not (
        cfg.dataset in ("digits", "mnist", "fashion_mnist", "cifar10", "cifar100")
        or cfg.dataset.startswith("npz:")
    ):
        raise ValueError(
            f"dataset must be digits, mnist, fashion_mnist, cifar10, cifar100 or npz:PATH, "
            f"got {cfg.dataset!r}"
        )
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
            f"similarity='manifold' (seed 001 eq. 7) or projection=mixed, got {cfg.similarity!r}"
        )
    if cfg.similarity == "torus" and (cfg.geometry not in ("torus_c", "torus_n") or cfg.projection != "none"):
        raise ValueError(
            "similarity='torus' (flat-torus distance of the angles) needs geometry torus_c or torus_n and "
            f"projection='none'; got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.loss == "simo":
        raise ValueError(
            "loss='simo' needs vector embeddings; geometry='atlas' needs projection=mixed or mlp"
        )
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
    """Text for ``python -m train --help``: usage, presets and every key with its default."""
    lines = ["usage: python -m train [preset=NAME] [key=value ...]", "", "presets:"]
    for name, values in PRESETS.items():
        desc = ", ".join(f"{k}={v}" for k, v in values.items()) or "(the defaults)"
        lines.append(f"  {name:16s} {desc}")
    lines += ["", "keys (default):"]
    for f in dataclasses.fields(Config):
        choices = CHOICES.get(f.name)
        extra = f"  one of {list(choices)}" if choices and f.name != "preset" else ""
        lines.append(f"  {f.name:18s} {f.default!r}{extra}")
    return "\n".join(lines)
