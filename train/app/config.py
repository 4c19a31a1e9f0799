"""Run configuration: one typed, frozen ``Config`` whose every key is declared once, the named presets (the
papers' recipes, held in :mod:`train.app.presets` and re-exported here), and ``key=value`` overrides.

The keys every run has are declared here; the keys of a choice are declared beside the code the choice
selects, with its registration (:mod:`train.app.registry`): a loss's in :mod:`train.app.objective`, an
optimiser's in :mod:`train.app.optim`, a sampler's and a data source's in :mod:`train.app.data`, an encoder's
and a geometry's in :mod:`train.app.model`. ``Config`` is built from those declarations (and rebuilt when a
user registers a choice of their own); a type checker reads it as ``RunConfig`` (train/app/config_types.pyi,
generated from the same declarations: every key a typed field). Each key carries its type, default, one line
of help, its group, its range and — when it only means something for some choices — the choice it belongs to
(:class:`~train.app.registry.When`): ``margin`` belongs to ``loss=triplet``, ``momentum`` to
``optimizer=sgd|rmsprop``, ``charts`` to ``geometry=atlas``. From that one table follow:

- refusal: a key the user gives that the run's choices do not use stops the run before any work, naming the
  key, the choice that makes it unused and the choices that would use it;
- presets: a key a preset set that the user's own choices make unused is dropped with one log line (so
  ``loss=triplet`` on the default preset trains); a preset whose own choices ignore one of its keys is a bug
  (tests check every preset);
- the range checks, the keyword arguments of what each choice calls
  (:func:`train.app.registry.option_kwargs`), what a resumed run may change (``run`` keys), and the grouped
  ``python -m train --help``.

``None`` is the one "use the default" marker (the encoder's own width, the loss's own margins, all devices,
a fresh run directory); on the command line it is written ``none``. :func:`validate` then rejects
combinations that have no meaning (an odd ``dim`` for torus_n, a vector similarity on an atlas without a
projection head, ...).
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from typing import TYPE_CHECKING, Any, Literal

from geojax import geometries
from geojax.parallel import MODES
from geojax.similarity import SimilarityName
from train.app import model, objective, optim, registry  # noqa: F401  (their registrations declare keys)
from train.app.data import Augmentation, check_dataset_name, dataset_source
from train.app.errors import UsageError

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

# The papers' recipes live in train/app/presets.py; re-exported here (config.PRESETS is presets.PRESETS, the
# one dict) for the code that reads them as config.X.
from train.app.presets import BOUHSINE_2024 as BOUHSINE_2024
from train.app.presets import CPU_SMALL_IMAGES as CPU_SMALL_IMAGES
from train.app.presets import FEENEY_HUGHES_2024 as FEENEY_HUGHES_2024
from train.app.presets import KORMAN_2021_MSIMCLR as KORMAN_2021_MSIMCLR
from train.app.presets import KORMAN_2021_MTRIPLET as KORMAN_2021_MTRIPLET
from train.app.presets import PRESETS as PRESETS
from train.app.presets import SINCERE_CIFAR10 as SINCERE_CIFAR10
from train.app.presets import STOWELL_2026 as STOWELL_2026
from train.app.presets import STOWELL_2026_DIGITS as STOWELL_2026_DIGITS
from train.app.presets import SUPCON_CIFAR10 as SUPCON_CIFAR10
from train.app.registry import (
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    Key,
    When,
)

Labels = Literal["class", "instance"]
ClassSplit = Literal["all", "disjoint"]
Precision = Literal["fp32", "bf16"]
Probe = Literal["linear", "piecewise"]
Feed = Literal["device", "host"]
ClipMode = Literal["global_norm", "value"]
# "manifold" ranks atlas points by −d_M (Korman 2021 eq. 7); the rest are geojax.similarity's names.
LossSimilarity = SimilarityName | Literal["manifold"]

log = logging.getLogger(__name__)

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
CLIPPED = When("clip", (True,), lambda clip: clip is not None, "a threshold")
PROBED = When("probe", typing.get_args(Probe))
SELECT = When("select_best", (True,))
MEMORY_ON = When("memory", (True,), lambda size: size > 0, "a positive size")
OPTIONAL_INT = int | None


def _keys(group: str, *rows: tuple | Key) -> tuple[Key, ...]:
    """Core keys of one group from (name, default, help, type[, range[, when]]) rows (or keys)."""
    return tuple(
        row if isinstance(row, Key) else Key(row[0], row[1], row[2], row[3], group, *row[4:]) for row in rows
    )


def _choice(name: str, default: str, text: str, group: str, kind: Any = None) -> Key:
    """A choice key: its values are the registered ones (``kind`` maps a value to its registration)."""
    return Key(name, default, text, str, group, options=True, kind=kind)


registry.core(
    Key("preset", "supcon_torus_n", "named recipe whose values replace these defaults", str, "preset"),
    _choice(
        "dataset",
        "digits",
        "digits | mnist | fashion_mnist | cifar10 | cifar100 | tfds:NAME | npz:PATH | idx:DIR",
        "data",
        kind=dataset_source,
    ),
    Key(
        "classes",
        "all",
        "all: train and retrieve over every class; disjoint: train on the first half of the classes' "
        "training images, retrieve among the other half's test images, each against the rest (the metric-"
        "learning protocol of Korman 2021 §3.2.1)",
        ClassSplit,
        "data",
    ),
    *_keys(
        "model",
        _choice("encoder", "mlp", "image encoder", "model"),
        (
            "width",
            None,
            "encoder width (none = the encoder's own: mlp 512 hidden per layer; cnn 32, its first "
            "stage; resnet18 / resnet50 64, the base of torchvision's)",
            OPTIONAL_INT,
            POSITIVE_INT,
        ),
        _choice("geometry", "torus_n", "where embeddings live", "model"),
        (
            "dim",
            64,
            "D before projection (torus_c gives 2D extrinsic values); an atlas's chart dim d",
            int,
            POSITIVE_INT,
        ),
        _choice(
            "projection", "none", "projection head: mlp (SimCLR) or mixed (MSimCLR, atlas only)", "model"
        ),
        ("precision", "fp32", "bf16: bf16 compute, fp32 parameters, loss and embeddings", Precision),
    ),
    *_keys(
        "objective",
        _choice(
            "loss", "supcon", "loss over the batch similarity matrix (simo: over the embeddings)", "objective"
        ),
        (
            "similarity",
            "cosine",
            "what the loss compares and retrieval ranks by; torus: −flat-torus L1 of the "
            "angles; manifold: an atlas's −d_M",
            LossSimilarity,
        ),
        ("labels", "class", "positives: same class, or instance (each image its own: SimCLR)", Labels),
        (
            "memory_warmup",
            0,
            "steps before the cross-batch memory starts filling (it stays empty until then: XBM starts "
            "it once the embeddings drift slowly)",
            int,
            NON_NEGATIVE_INT,
            MEMORY_ON,
        ),
    ),
    *_keys(
        "optimisation",
        _choice("optimizer", "adamw", "optimiser", "optimisation"),
        ("lr", 1e-3, "peak learning rate", float, POSITIVE),
        (
            "init_from",
            None,
            "start a new run from the newest checkpoint of this run directory: its weights, "
            "optimiser state and step, under this run's keys (fine-tuning, e.g. qat_bits on a float run; the "
            "model's shapes must match)",
            str | None,
        ),
        _choice("schedule", "cosine", "learning-rate schedule after the linear warm-up", "optimisation"),
        ("warmup", 100, "linear warm-up steps (at most steps/2)", int, NON_NEGATIVE),
        (
            "clip",
            100.0,
            "gradient clipping threshold (Stowell 2026 clips at 100; none: no clipping)",
            float | None,
            POSITIVE,
        ),
        (
            "clip_mode",
            "global_norm",
            "optax.clip_by_global_norm, or element-wise optax.clip",
            ClipMode,
            None,
            CLIPPED,
        ),
        (
            "ema",
            None,
            "decay per epoch of an EMA of the weights, which the report evaluates (none: no EMA)",
            float | None,
            UNIT_INTERVAL,
        ),
    ),
    *_keys(
        "length",
        ("steps", 1500, "training steps (a preset's epochs give way to it)", int, POSITIVE_INT),
        ("epochs", None, "passes over the training set (none: use steps)", float | None, POSITIVE),
    ),
    *_keys(
        "batches",
        (
            "batch_size",
            256,
            "images per step (global); each gives `views` augmented views",
            int,
            POSITIVE_INT,
        ),
        ("views", 2, "augmented views per image", int, POSITIVE_INT),
        _choice("sampler", "random", "batch sampler", "batches"),
        (
            "augment",
            "shift",
            "view augmentation: shift (±1 px + contrast), crop_flip (±2 px crop, flip), "
            "simclr (SupContrast's CIFAR views), crop_jitter_gray (Korman 2021 A.1: no flip), or none",
            Augmentation,
        ),
        ("seed", 0, "seed of the initialisation, the batches and the augmentations", int),
        (
            "seeds",
            1,
            "train seeds seed … seed+seeds−1 as replicas in one program (stacked, vmapped); report: "
            "their mean",
            int,
            POSITIVE_INT,
        ),
    ),
    *_keys(
        "evaluation",
        ("knn_k", 5, "k of the reported kNN accuracy", int, POSITIVE_INT),
        ("probe", None, "linear (frozen-feature classifier) or piecewise (one per chart)", Probe | None),
        ("probe_epochs", 1, "probe training epochs", int, POSITIVE_INT, PROBED),
        (
            "select_best",
            False,
            "hold out val_fraction of the training set, measure its P@1 every val_every "
            "steps and report the weights of the best evaluation (early stopping, Stowell 2026 §5)",
            bool,
        ),
        (
            "val_fraction",
            0.1,
            "held-out validation fraction of the training set (stratified, fixed split)",
            float,
            UNIT_INTERVAL,
            SELECT,
        ),
        (
            "val_every",
            None,
            "steps between validations (none: one epoch)",
            OPTIONAL_INT,
            POSITIVE_INT,
            SELECT,
        ),
    ),
    *_keys(
        "run",
        ("workdir", None, "run directory (none: new, under runs/); an existing one resumes", str | None),
        ("parallel", "shard_map", "data-parallel mode: shard_map or pmap", str),
        ("devices", None, "data-parallel devices (none = all)", OPTIONAL_INT, POSITIVE_INT),
        (
            "feed",
            None,
            "device: training images held on the devices, batches drawn inside the step; host: rows "
            "gathered in NumPy by a prefetch thread; none: device when the images take ≤ 1 GiB and "
            "parallel=shard_map",
            Feed | None,
        ),
        (
            "steps_per_call",
            1,
            "training steps per dispatch (one lax.scan); logs and checkpoints round to calls",
            int,
            POSITIVE_INT,
        ),
        (
            "coordinator",
            None,
            "multi-process run: jax.distributed coordinator HOST:PORT (none: $JAX_COORDINATOR_ADDRESS)",
            str | None,
        ),
        (
            "num_processes",
            None,
            "multi-process run: number of processes (none: $JAX_NUM_PROCESSES)",
            OPTIONAL_INT,
            POSITIVE_INT,
        ),
        ("process_id", None, "multi-process run: this process's id (none: $JAX_PROCESS_ID)", OPTIONAL_INT),
        (
            "multihost",
            False,
            "jax.distributed.initialize() with the cluster's own settings (TPU pod slice, SLURM, Open MPI)",
            bool,
        ),
        (
            "distributed_timeout_s",
            180,
            "multi-process run: seconds without a heartbeat before the other processes stop, and the "
            "longest wait at exit for the others to finish",
            int,
            POSITIVE_INT,
        ),
        (
            "checkpoint_every",
            None,
            "steps between checkpoints (none: a tenth of the steps)",
            OPTIONAL_INT,
            POSITIVE_INT,
        ),
        (
            "checkpoint_minutes",
            10.0,
            "also checkpoint when this many minutes passed since the last one",
            float,
            POSITIVE,
        ),
        (
            "log_every",
            25,
            "steps between metrics.jsonl lines (each the mean over its window)",
            int,
            POSITIVE_INT,
        ),
        ("eval_batch", 1024, "images per evaluation forward pass", int, POSITIVE_INT),
        ("progress", True, "show a progress bar", bool),
    ),
)


LENGTH_KEYS = ("steps", "epochs")
_CLASSES: dict[tuple[Key, ...], type] = {}


def _build() -> None:
    """(Re)build ``Config`` and its tables from the declared keys: one frozen dataclass field per key (the
    class of a set of keys is made once, so unregistering a user's choice gives back the class before it)."""
    global Config, KEYS, FIELDS, DEFAULTS, WHEN, RUN_KEYS, _TYPES
    KEYS = registry.keys()
    signature = tuple(KEYS.values())
    if signature not in _CLASSES:
        fields = [(k.name, k.type, dataclasses.field(default=k.default)) for k in signature]
        cls = dataclasses.make_dataclass("Config", fields, frozen=True)
        cls.__module__ = __name__
        _CLASSES[signature] = cls
        cls.__doc__ = (
            "Every knob of a run (defaults: the offline digits recipe, torus_n + SupCon; the default preset "
            "adds Stowell 2026's KoLeo and SupContrast's τ/τ_base factor)."
        )
    Config = _CLASSES[signature]
    FIELDS = {f.name: f for f in dataclasses.fields(Config)}
    DEFAULTS = {k.name: k.default for k in signature}
    WHEN = {k.name: k.when for k in signature if k.when is not None}
    RUN_KEYS = tuple(k.name for k in signature if k.group == "run")
    _TYPES = typing.get_type_hints(Config)


Config: type[RunConfig]  # the type checker's view of it: train/app/config_types.pyi
KEYS: dict[str, Key]
FIELDS: dict[str, dataclasses.Field]
DEFAULTS: dict[str, Any]
WHEN: dict[str, When]
RUN_KEYS: tuple[str, ...]
_TYPES: dict[str, Any]
registry.on_change(_build)


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
    """The allowed values of a config key.

    Args:
        name: a config key (a field of ``Config``), e.g. ``"loss"``, ``"preset"``, ``"precision"``.

    Returns:
        The values the key may take (the presets' names, the registered choices or its ``Literal`` values);
        the empty tuple when any value of its type is allowed.
    """
    if name == "preset":
        return tuple(PRESETS)
    if name == "parallel":
        return MODES
    if KEYS[name].options and KEYS[name].kind is None:
        return tuple(registry.OPTIONS[name])
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


def from_args(args: list[str]) -> RunConfig:
    """Build a config from ``key=value`` strings: preset values first, then the explicit overrides.

    A key may carry leading dashes and dashes for underscores (``--batch-size=128``); ``none`` / ``null``
    give None to an optional key, and ``1/true/yes/on`` / ``0/false/no/off`` a boolean.

    Args:
        args: the command-line arguments, each ``key=value``.

    Returns:
        The validated ``Config`` (as :func:`make` builds it from the parsed overrides).

    Raises:
        UsageError: an argument without ``=``, an unknown key, a value that does not parse as the key's
            type, or any error :func:`make` raises.
    """
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
    """The values of preset ``name`` (with ``preset`` itself).

    Args:
        name: a preset's name, a key of ``PRESETS`` (e.g. ``"supcon_torus_n"``).

    Returns:
        A new dict of the keys the preset sets, with their values, and ``preset: name``.

    Raises:
        UsageError: ``name`` is not a preset.
    """
    if name not in PRESETS:
        raise UsageError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return {**PRESETS[name], "preset": name}


def applies(name: str, cfg: RunConfig) -> bool:
    """Whether the run ``cfg`` uses key ``name`` (every key without a :class:`When` is used).

    Args:
        name: a config key.
        cfg: the run's configuration.

    Returns:
        True when ``name`` belongs to no choice, or to a choice that ``cfg`` makes (``margin`` with
        ``loss=triplet``); False otherwise.
    """
    return name not in WHEN or WHEN[name].holds(cfg)


def preset_unused(name: str) -> list[str]:
    """The keys preset ``name`` sets that its own choices do not use.

    Such a key is a bug in the preset: the list is empty for every shipped preset, which the tests check.

    Args:
        name: a preset's name, a key of ``PRESETS``.

    Returns:
        The unused keys, in the preset's order; empty when the preset is consistent.

    Raises:
        UsageError: ``name`` is not a preset.
    """
    values = preset_values(name)
    cfg = Config(**values)
    return [k for k in values if not applies(k, cfg)]


def unused_message(name: str, cfg: RunConfig) -> str:
    """The line refusing a key the run does not use: ``margin applies to loss=triplet, not loss='supcon'``.

    Args:
        name: a config key that belongs to a choice (a key of ``WHEN``).
        cfg: the run's configuration, whose choice does not use ``name``.

    Returns:
        One line naming the key, the choice values that use it and the run's own value of that choice.
    """
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


def make(**overrides: Any) -> RunConfig:
    """Config of ``preset`` (default supcon_torus_n) with ``overrides`` (the user's keys) applied, validated.

    A preset key the user's choices make unused returns to its default with one log line; the user's
    ``steps`` or ``epochs`` replaces the preset's other.

    Args:
        **overrides: config keys with their values (Python values of each key's type, not strings);
            ``preset`` picks the recipe they override.

    Returns:
        The validated ``Config``.

    Raises:
        UsageError: an unknown key or preset, a value of the wrong type or outside its range, a user key
            the run does not use, both ``steps`` and ``epochs``, or a combination :func:`validate` refuses.
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


def from_saved(values: dict[str, Any]) -> RunConfig:
    """The config of a run directory's config.json: unknown keys refused, unused ones back to their defaults.

    Args:
        values: every key of a saved config with its value, as :func:`dataclasses.asdict` wrote it.

    Returns:
        The validated ``Config``, the keys its choices do not use set back to their defaults.

    Raises:
        UsageError: an unknown key (a config.json of another version), a value of the wrong type or a
            combination :func:`validate` refuses.
    """
    _check_known(values)
    cfg = Config(**values)
    _check_types(cfg)
    cfg = dataclasses.replace(cfg, **{name: DEFAULTS[name] for name in WHEN if not applies(name, cfg)})
    validate(cfg)
    return cfg


def used(values: dict[str, Any]) -> dict[str, Any]:
    """The keys of a saved config that its run uses, with their values.

    Args:
        values: a saved config, a dict of every key (keys that are not config keys are ignored).

    Returns:
        The items of ``values`` whose key is a config key that the run uses (:func:`applies`).
    """
    cfg = Config(**{k: v for k, v in values.items() if k in FIELDS})
    return {k: v for k, v in values.items() if k in FIELDS and applies(k, cfg)}


def _check_types(cfg: RunConfig) -> None:
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


def _check_registered(cfg: RunConfig) -> None:
    """What the registrations declare: each key's range, what the loss's registration needs (class labels for
    its proxies, the cosine similarity for a margin on the angle), and the data set's name (its loader's
    check)."""
    for k in KEYS.values():
        if k.range is not None and not k.range.ok(getattr(cfg, k.name)):
            raise UsageError(f"{k.name} must be {k.range}, got {getattr(cfg, k.name)}")
    loss = registry.option("loss", cfg.loss)
    if loss.info.get("input") == "proxies" and cfg.labels != "class":
        raise UsageError(f"loss={cfg.loss!r} learns one proxy per class: it needs labels='class'")
    if loss.info.get("cosine") and cfg.similarity != "cosine":
        raise UsageError(
            f"loss={cfg.loss!r} puts its margin on the angle (or the cosine) to the class weights: it needs "
            f"similarity='cosine', got {cfg.similarity!r}"
        )
    check_dataset_name(cfg.dataset)


def validate(cfg: RunConfig) -> None:
    """Raise :class:`UsageError` naming the key for a bad value or a combination that has no meaning.

    Checked: each value's type; what the registrations declare (:func:`_check_registered`: each value's
    range, the loss's needs, the data set's name); ``0 ≤ lr_min ≤ lr``; against the geometry's record
    (:mod:`geojax.geometries`): an even ``dim`` where it asks for one (torus_n), the projection, the
    similarity (an atlas without a projection head ranks by −d_M, Korman 2021 eq. 7) and the piecewise
    probe; ``views ≥ 2`` for instance labels, a batch size divisible by ``m_per_class``, the feed and
    parallel mode of a several-seeds run, the multi-process keys, and no probe or early stopping with
    ``classes=disjoint``.

    Args:
        cfg: the configuration to check.

    Raises:
        UsageError: the first bad value or combination found, in one line naming the key(s).
    """
    _check_types(cfg)
    _check_registered(cfg)
    if not 0 <= cfg.lr_min <= cfg.lr:
        raise UsageError(f"lr_min must be in [0, lr={cfg.lr}], got {cfg.lr_min}")
    geometry = geometries.get(cfg.geometry)
    if geometry.even_dim and cfg.dim % 2:
        raise UsageError(f"dim must be even for geometry={cfg.geometry!r} (adjacent pairs), got {cfg.dim}")
    if cfg.projection not in geometry.projections:
        raise UsageError(
            f"projection={cfg.projection!r} needs a geometry that allows it (mixed, MSimCLR's: an atlas); "
            f"geometry={cfg.geometry!r} allows {list(geometry.projections)}"
        )
    vectors = not geometry.is_atlas or cfg.projection != "none"  # does the loss see plain vectors?
    if cfg.similarity == "manifold" and vectors:
        raise UsageError(
            "similarity='manifold' (atlas d_M) needs an atlas geometry and projection='none'; "
            f"got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.similarity != "manifold":
        raise UsageError(
            f"geometry={cfg.geometry!r} (an atlas) without a projection head has no vector similarity: use "
            f"similarity='manifold' (Korman 2021 eq. 7) or projection=mixed, got {cfg.similarity!r}"
        )
    if cfg.similarity == "torus" and (not geometry.is_torus or cfg.projection != "none"):
        raise UsageError(
            "similarity='torus' (flat-torus distance of the angles) needs a torus geometry (torus_c, "
            f"torus_n) and projection='none'; got geometry={cfg.geometry!r}, projection={cfg.projection!r}"
        )
    if not vectors and cfg.loss == "simo":
        raise UsageError("loss='simo' needs vectors: with an atlas geometry use projection=mixed or mlp")
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
    if cfg.classes == "disjoint" and (cfg.probe is not None or cfg.select_best):
        raise UsageError(
            "classes='disjoint' retrieves among classes the model never saw: it has no probe (a classifier "
            f"of the unseen classes) and no early stopping on them; got probe={cfg.probe!r}, "
            f"select_best={cfg.select_best!r}"
        )
    if cfg.probe == "piecewise" and not geometry.is_atlas:
        raise UsageError(
            "probe='piecewise' (one linear classifier per chart) needs an atlas geometry, "
            f"got {cfg.geometry!r}"
        )


def _key_lines(name: str, indent: str) -> list[str]:
    k = KEYS[name]
    default = "none" if k.default is None else repr(k.default)
    lines = [f"{indent}{name:18s} {default:16s} {k.help}"]
    if choices(name) and name != "preset":
        lines.append(f"{indent}{'':18s} {'':16s} one of: {', '.join(map(str, choices(name)))}")
    return lines


def help_text() -> str:
    """Text for ``python -m train --help``: usage, presets, then the keys by group.

    Each key that belongs to a choice is listed under that choice (``when loss=triplet:``).

    Returns:
        The help text, lines joined by newlines: each key with its default, help line and allowed values.
    """
    lines = ["usage: python -m train [preset=NAME] [key=value ...]", "", "presets:"]
    for name, values in PRESETS.items():
        lines.append(f"  {name:24s} {', '.join(f'{k}={v}' for k, v in values.items()) or '(the defaults)'}")
    lines += [
        "",
        "keys (default; `none` selects the default marked so). A key listed under `when CHOICE=...` is used",
        "only with that choice: given with another, the run is refused; set by a preset, it is dropped.",
    ]
    for group, title in GROUPS.items():
        names = [n for n, k in KEYS.items() if k.group == group and n != "preset"]
        lines += ["", f"{title}:"]
        lines += [line for n in names if n not in WHEN for line in _key_lines(n, "  ")]
        for when, owned in _choices_keys(names):
            lines.append(f"  when {when}:")
            lines += [line for n in owned for line in _key_lines(n, "    ")]
    return "\n".join(lines)


def _choices_keys(names: list[str]) -> list[tuple[When, list[str]]]:
    """The choices that own some of ``names``, each with the keys of ``names`` it owns: in the order of
    ``names``' first key of each choice, keys in their own order."""
    owned: dict[When, list[str]] = {}
    for n in names:
        if n in WHEN:
            owned.setdefault(WHEN[n], []).append(n)
    return list(owned.items())


def choice_table() -> str:
    """README's "choice | its keys" table, from the registrations.

    One row per choice that owns keys (the values that use them) with all its keys, in ``--help``'s order;
    ``|`` escaped for Markdown.

    Returns:
        The Markdown table, a header and one row per choice, lines joined by newlines.
    """
    rows = ["| choice | its keys |", "|---|---|"]
    names = [n for group in GROUPS for n, k in KEYS.items() if k.group == group]
    for when, owned in _choices_keys(names):
        choice = str(when).replace("|", "\\|")
        rows.append(f"| `{choice}` | {', '.join(f'`{n}`' for n in owned)} |")
    return "\n".join(rows)
