"""What a geometry is, in one record: the Geometry of each embedding space, registered once by name.

Everything that builds, trains, ranks or quantises embeddings asks the record instead of branching on the
geometry's name: the model's head (:class:`geojax.models.EmbeddingModel`) projects with ``project`` and sizes
its output with ``width``; retrieval ranks by :func:`geojax.similarity.retrieval_similarity`, which reads
``output`` and ``unit_norm``; the torus quantisers and quantisation-aware training read the flat angles
through ``angles``. A new geometry is one :func:`register` call.

Registered here: ``euclidean`` (raw vectors), ``sphere`` (Stowell 2026 Table 1: L2 normalisation),
``torus_c`` and ``torus_n`` (Stowell 2026 eqs. 2 and 3: the Clifford torus from D angles, or from D/2 pairs
each normalised), and ``atlas`` (Korman 2021 §2.4: n charts of dimension d with soft memberships).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal, get_args

import jax

from geojax import manifolds

Output = Literal["vector", "atlas"]
OUTPUTS: tuple[str, ...] = get_args(Output)


def _same_width(dim: int) -> int:
    return dim


def _raw(x: jax.Array) -> jax.Array:
    return x


def _pair_angles(x: jax.Array) -> jax.Array:
    """torus_n's flat angles (Stowell 2026 eq. 3): the angle in turns of each adjacent pair of raw output."""
    return manifolds.clifford_to_angles(manifolds.torus_l2p(x))


@dataclasses.dataclass(frozen=True)
class Geometry:
    """An embedding space: how a head's raw output becomes an embedding, and how embeddings are compared.

    Attributes:
        name: the name the geometry is registered under (``geometry=`` of the training application).
        output: ``'vector'``: one embedding vector per input, from a
            :class:`geojax.models.GeometryHead`; ``'atlas'``: chart coordinates and memberships from a
            :class:`geojax.models.AtlasHead`, whose embedding is the compressed code of
            :func:`geojax.manifolds.atlas_code`.
        project: raw head output [N, D], cast to float32 → embeddings [N, width(D)] (a vector geometry's
            projection; the identity by default; unused for an atlas).
        width: the embedding's width for a head of width D.
        unit_norm: every embedding has unit L2 norm, so retrieval ranks by cosine (on unit vectors the arc
            length and the Euclidean distance give the same order).
        angles: for a flat-torus geometry, float32 raw head output [N, D] → its flat angles in turns
            [N, width(D)/2] (unwrapped: any real values),
            the input of the torus quantisers and of quantisation-aware training; None for any other.
        even_dim: the head's width D must be even (pairs of coordinates).
        projections: the projection heads the geometry allows (``'none'``, ``'mlp'``, and ``'mixed'`` for an
            atlas: one projection per chart).
        summary: one line for help texts.
    """

    name: str
    output: Output = "vector"
    project: Callable[[jax.Array], jax.Array] = _raw
    width: Callable[[int], int] = _same_width
    unit_norm: bool = False
    angles: Callable[[jax.Array], jax.Array] | None = None
    even_dim: bool = False
    projections: tuple[str, ...] = ("none", "mlp")
    summary: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {list(OUTPUTS)}, got {self.output!r}")
        if self.output == "atlas" and (self.angles is not None or self.unit_norm):
            raise ValueError("an atlas geometry has no flat angles and no unit-norm vectors")

    @property
    def is_atlas(self) -> bool:
        """Whether the geometry's outputs are an atlas (charts and memberships), not one vector per input."""
        return self.output == "atlas"

    @property
    def is_torus(self) -> bool:
        """Whether the geometry is a flat torus (its embeddings are Clifford pairs of the flat angles)."""
        return self.angles is not None

    def flat_angles(self, raw: jax.Array) -> jax.Array:
        """A flat-torus geometry's angles in turns of float32 raw head output (its ``angles``).

        Args:
            raw: [N, D] float32 raw head output.

        Returns:
            [N, width(D)/2] flat angles in turns, unwrapped.

        Raises:
            ValueError: the geometry is not a flat torus.

        Example:
            >>> import jax.numpy as jnp
            >>> from geojax import geometries
            >>> print(geometries.get("torus_n").flat_angles(jnp.array([[0.0, 2.0, -3.0, 0.0]])))
            [[0.25 0.5 ]]
        """
        if self.angles is None:
            raise ValueError(f"geometry {self.name!r} is not a flat torus: it has no flat angles")
        return self.angles(raw)


_REGISTRY: dict[str, Geometry] = {}


def register(geometry: Geometry) -> Geometry:
    """Register ``geometry`` under its name: every part of geojax that takes a geometry's name accepts it.

    Args:
        geometry: the record.

    Returns:
        ``geometry``.

    Raises:
        ValueError: a geometry of that name is registered already.

    Example:
        >>> from geojax import geometries, manifolds
        >>> double = geometries.Geometry("radius_2", project=lambda x: 2 * manifolds.sphere(x))
        >>> _ = geometries.register(double)
        >>> "radius_2" in geometries.names()
        True
        >>> geometries.unregister("radius_2")
    """
    if geometry.name in _REGISTRY:
        raise ValueError(f"geometry {geometry.name!r} is registered already")
    _REGISTRY[geometry.name] = geometry
    return geometry


def unregister(name: str) -> None:
    """Remove a registered geometry (a test's own, after the test).

    Args:
        name: its name.

    Raises:
        ValueError: no geometry of that name is registered.
    """
    get(name)
    del _REGISTRY[name]


def get(name: str) -> Geometry:
    """The geometry registered as ``name``.

    Args:
        name: a registered name (:func:`names`).

    Returns:
        Its :class:`Geometry`.

    Raises:
        ValueError: ``name`` is not registered (the message lists those that are).

    Example:
        >>> from geojax import geometries
        >>> g = geometries.get("torus_c")
        >>> g.width(8), g.unit_norm, g.is_torus
        (16, True, True)
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"geometry must be one of {list(_REGISTRY)}, got {name!r}") from None


def names() -> tuple[str, ...]:
    """The registered geometries' names, in registration order.

    Returns:
        The names, the built-in ones first.

    Example:
        >>> from geojax import geometries
        >>> geometries.names()
        ('euclidean', 'sphere', 'torus_c', 'torus_n', 'atlas')
    """
    return tuple(_REGISTRY)


register(Geometry("euclidean", summary="raw vectors"))
register(
    Geometry(
        "sphere",
        project=manifolds.sphere,
        unit_norm=True,
        summary="the unit hypersphere: L2 normalisation (Stowell 2026 Table 1)",
    )
)
register(
    Geometry(
        "torus_c",
        project=manifolds.torus_clifford,
        width=lambda dim: 2 * dim,
        unit_norm=True,
        angles=_raw,
        summary="the Clifford torus of D angles in turns (Stowell 2026 eq. 2)",
    )
)
register(
    Geometry(
        "torus_n",
        project=manifolds.torus_l2p,
        unit_norm=True,
        angles=_pair_angles,
        even_dim=True,
        summary="the Clifford torus of D/2 pairs, each L2-normalised (Stowell 2026 eq. 3)",
    )
)
register(
    Geometry(
        "atlas",
        output="atlas",
        projections=("none", "mlp", "mixed"),
        summary="n charts of dimension d with soft memberships (Korman 2021 §2.4)",
    )
)
