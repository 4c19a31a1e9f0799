"""Run configuration: one typed dataclass whose every key belongs to a choice, the named presets (the papers'
recipes, held in :mod:`train.presets` and re-exported here), and ``key=value`` overrides.

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

# The papers' recipes live in train/presets.py; re-exported here (config.PRESETS is presets.PRESETS, the one
# dict) for the code that reads them as config.X.
from train.presets import BOUHSINE_2024 as BOUHSINE_2024
from train.presets import CPU_SMALL_IMAGES as CPU_SMALL_IMAGES
from train.presets import FEENEY_HUGHES_2024 as FEENEY_HUGHES_2024
from train.presets import KORMAN_2021_MSIMCLR as KORMAN_2021_MSIMCLR
from train.presets import KORMAN_2021_MTRIPLET as KORMAN_2021_MTRIPLET
from train.presets import PRESETS as PRESETS
from train.presets import SINCERE_CIFAR10 as SINCERE_CIFAR10
from train.presets import STOWELL_2026 as STOWELL_2026
from train.presets import STOWELL_2026_DIGITS as STOWELL_2026_DIGITS
from train.presets import SUPCON_CIFAR10 as SUPCON_CIFAR10

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
    init_from: str | None = optimisation(
        None,
        "start a new run from the newest checkpoint of this run directory: its weights, optimiser state and "
        "step, under this run's keys (fine-tuning, e.g. qat_bits on a float run; the model's shapes must "
        "match)",
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
