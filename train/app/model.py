"""The model of a run: the encoder, the geometry head and the projection that a config selects, each value
registered with the keys it uses (:mod:`train.app.registry`); the library's own tables
(:data:`geojax.models.ENCODERS`, :mod:`geojax.geometries`, :data:`geojax.models.PROJECTIONS`) select the
code by the value. A new geometry is one :func:`register_geometry` call."""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Any, Literal

import jax.numpy as jnp
from flax import nnx

from geojax import geometries, models, parallel
from train.app import registry
from train.app.registry import POSITIVE_INT, Key, When

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

Norm = Literal["batch", "fused_batch", "group", "none"]
Head = Literal["stowell", "supcontrast", "linear"]
QatBits = Literal[1, 2, 4, 8]

NORM = Key("norm", None, "CNN / ResNet normalisation (none = the encoder's own)", Norm | None, "model")
HEAD = Key(
    "head",
    "stowell",
    "geometry head: stowell, Linear(F, 4·dim) → ReLU → Linear(4·dim, dim) (Stowell 2026's code); "
    "supcontrast, Linear(F, F) → ReLU → Linear(F, dim) (SupContrast's); linear, Linear(F, dim) (Korman "
    "2021's code); F: the encoder's features",
    Head,
    "model",
)
CHARTS = Key("charts", 1, "atlas charts n", int, "model", POSITIVE_INT)
QAT_BITS = Key("qat_bits", None, "train the torus head through the b-bit grid", QatBits | None, "model")
QAT_NOISE = Key(
    "qat_noise",
    False,
    "one grid step of uniform noise in training, not rounding",
    bool,
    "model",
    when=When("qat_bits", typing.get_args(QatBits)),
)
PROJECTION_DIM = Key("projection_dim", 64, "projection head output width", int, "model", POSITIVE_INT)


def geometry_keys(geometry: geometries.Geometry) -> tuple[Key, ...]:
    """The keys a geometry uses: an atlas its chart count, a vector geometry its head (a torus also QAT bits).

    Args:
        geometry: the geometry's record.

    Returns:
        The keys, in ``--help`` order.
    """
    if geometry.is_atlas:
        return (CHARTS,)
    return (HEAD, QAT_BITS) if geometry.is_torus else (HEAD,)


def register_geometry(geometry: geometries.Geometry) -> None:
    """Register a new geometry with the library and as a value of the ``geometry`` key (with its keys).

    After :func:`geojax.geometries.register` and the key's registration, ``python -m train geometry=NAME``
    trains it.

    Args:
        geometry: the geometry's record.

    Raises:
        ValueError: a geometry of that name is registered already.
    """
    geometries.register(geometry)
    registry.register("geometry", geometry.name, keys=geometry_keys(geometry))


def unregister_geometry(name: str) -> None:
    """Remove a geometry that :func:`register_geometry` added (a test's own, after the test).

    Args:
        name: its name.

    Raises:
        ValueError: no geometry of that name is registered.
    """
    geometries.unregister(name)
    registry.unregister("geometry", name)


def geometry_output(name: str) -> str:
    """The output kind (``vector`` or ``atlas``) of the registered geometry ``name``.

    It is the ``kind`` of the keys that only one kind uses (:class:`train.app.registry.When`).

    Args:
        name: a registered geometry's name.

    Returns:
        Its record's ``output``.
    """
    return geometries.get(name).output


for _name in models.ENCODERS:
    registry.register("encoder", _name, keys=() if _name == "mlp" else (NORM,))
for _name in geometries.names():
    registry.register("geometry", _name, keys=geometry_keys(geometries.get(_name)))
registry.core(QAT_NOISE)
for _name in models.PROJECTIONS:
    registry.register("projection", _name, keys=() if _name == "none" else (PROJECTION_DIM,))


def compute_dtype(cfg: RunConfig) -> Any:
    """Layer compute dtype for ``cfg.precision`` (parameters, loss and embeddings stay float32).

    Args:
        cfg: the run's configuration (its ``precision``: ``fp32`` or ``bf16``).

    Returns:
        ``jnp.bfloat16`` for ``bf16``; None (the layers' own float32) for ``fp32``.
    """
    return jnp.bfloat16 if cfg.precision == "bf16" else None


def build_model(
    cfg: RunConfig, image_shape: tuple[int, int, int], *, axis_name: str | None = parallel.AXIS
) -> models.EmbeddingModel:
    """The encoder + head (+ projection) of ``cfg`` for images of ``image_shape``, initialised from the seed.

    Batch norm (if any) synchronises its statistics over ``axis_name``.

    Args:
        cfg: the run's configuration (encoder, width, norm, geometry, dim, head, charts, projection,
            projection_dim, qat_bits, qat_noise, precision, seed).
        image_shape: the input images' shape (H, W, C).
        axis_name: the data-parallel mesh axis batch norm averages over (None: a plain single-device step).

    Returns:
        The initialised :class:`geojax.models.EmbeddingModel`.
    """
    rngs = nnx.Rngs(cfg.seed)
    dt = compute_dtype(cfg)
    enc = models.encoder(
        cfg.encoder,
        input_shape=image_shape,
        width=cfg.width,
        norm=cfg.norm,
        axis_name=axis_name,
        compute_dtype=dt,
        rngs=rngs,
    )
    return models.EmbeddingModel(
        enc,
        geometry=cfg.geometry,
        dim=cfg.dim,
        head_hidden={"stowell": None, "supcontrast": enc.features, "linear": 0}[cfg.head],
        charts=cfg.charts,
        projection=cfg.projection,
        projection_dim=cfg.projection_dim,
        qat_bits=cfg.qat_bits,
        qat_noise=cfg.qat_noise,
        compute_dtype=dt,
        rngs=rngs,
    )
