"""The whole model: :class:`EmbeddingModel` (encoder, head, projection head), the :class:`Outputs` it
returns and the :class:`Encoder` protocol it needs of its encoder.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax
from flax import nnx
from jax.typing import DTypeLike

from geojax import _checks, geometries, manifolds
from geojax.models._heads import (
    PROJECTIONS,
    AtlasHead,
    GeometryHead,
    MixedProjection,
    ProjectionHead,
    check_qat,
    embedding_width,
)


class Outputs(NamedTuple):
    """What :class:`EmbeddingModel` returns for a batch of N inputs (float32 arrays; absent parts are None).

    Attributes:
        embedding: [N, D'] the geometry's extrinsic vector (for the atlas, the compressed code sigmoid(coords
            of the argmax chart) [N, d]).
        coords: [N, n, d] pre-sigmoid chart coordinates (atlas only).
        q: [N, n] memberships (atlas only).
        projection: [N, P] the projection head's output, what a SimCLR-style loss sees (None without one).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> models.Outputs(jnp.ones((2, 3))).loss_vectors.shape
        (2, 3)
    """

    embedding: jax.Array
    coords: jax.Array | None = None
    q: jax.Array | None = None
    projection: jax.Array | None = None

    @property
    def loss_vectors(self) -> jax.Array:
        """The vectors a vector similarity compares, the projection when there is one, else the embedding."""
        return self.embedding if self.projection is None else self.projection


class Encoder(Protocol):
    """What :class:`EmbeddingModel` needs of an encoder: x [N, ...] → features [N, F], and ``features`` = F.

    :func:`encoder`'s modules have it; so may one of your own."""

    features: int

    def __call__(self, x: jax.Array) -> jax.Array: ...


class EmbeddingModel(nnx.Module):
    """Encoder + geometry (or atlas) head + optional projection head: x → :class:`Outputs`.

    The head is a :class:`GeometryHead` for a vector geometry, an :class:`AtlasHead` for ``atlas`` (whose
    embedding is the compressed code of :func:`geojax.manifolds.atlas_code`); the projection head is none, a
    :class:`ProjectionHead` on the embedding ('mlp') or a :class:`MixedProjection` on the charts ('mixed').

    Args:
        encoder_module: an :class:`Encoder`: one of :func:`encoder`'s, or any module with ``.features``.
        geometry: a registered geometry's name (:func:`geojax.geometries.names`).
        dim: D (the head's width) or, for the atlas, each chart's d.
        head_hidden: the geometry head's hidden width (None: 4·dim; 0: one linear layer).
        charts: n, the atlas's charts.
        projection: 'none', 'mlp' or 'mixed' (atlas only).
        projection_dim: P, the projection head's output width.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        qat_bits: quantisation-aware training of a torus head (:class:`GeometryHead`).
        qat_noise: train with noise instead of rounding (:class:`GeometryHead`).
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``geometry`` or ``projection`` is unknown, ``qat_bits`` / ``qat_noise`` with the atlas, or
            'mixed' without the atlas; the heads' own checks.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135) (geometry heads); Korman 2021, manifold (atlas)
        target spaces (arXiv 2106.07062), §2.4 and Table 1 (atlas, MSimCLR).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> trunk = models.encoder("mlp", input_shape=(4, 4, 1), width=16, rngs=nnx.Rngs(0))
        >>> model = models.EmbeddingModel(trunk, geometry="sphere", dim=8, projection="mlp", projection_dim=4,
        ...                               rngs=nnx.Rngs(0))
        >>> out = model(jnp.ones((2, 4, 4, 1)))
        >>> out.embedding.shape, out.loss_vectors.shape
        ((2, 8), (2, 4))
    """

    def __init__(
        self,
        encoder_module: Encoder,
        *,
        geometry: str,
        dim: int,
        head_hidden: int | None = None,
        charts: int = 1,
        projection: str = "none",
        projection_dim: int = 64,
        compute_dtype: DTypeLike | None = None,
        qat_bits: int | None = None,
        qat_noise: bool = False,
        rngs: nnx.Rngs,
    ):
        record = geometries.get(geometry)
        _checks.check_choice(projection, "projection", PROJECTIONS)
        if record.is_atlas:  # the vector heads check their own
            check_qat(record, geometry, qat_bits, qat_noise)
        if projection not in record.projections:
            raise ValueError(
                f"projection={projection!r} needs a geometry that allows it (mixed: one head per chart of "
                f"geometry='atlas'); geometry={geometry!r} allows {list(record.projections)}"
            )
        self.encoder = encoder_module
        feats = encoder_module.features
        self.geometry = geometry
        self.head: AtlasHead | GeometryHead
        self.projection: MixedProjection | ProjectionHead | None
        if record.is_atlas:
            self.head = AtlasHead(feats, charts=charts, dim=dim, compute_dtype=compute_dtype, rngs=rngs)
        else:
            self.head = GeometryHead(
                feats,
                dim,
                geometry=geometry,
                hidden=head_hidden,
                compute_dtype=compute_dtype,
                qat_bits=qat_bits,
                qat_noise=qat_noise,
                rngs=rngs,
            )
        if projection == "mixed":
            self.projection = MixedProjection(charts=charts, dim=dim, out=projection_dim, rngs=rngs)
        elif projection == "mlp":
            width = dim if record.is_atlas else embedding_width(geometry, dim)
            self.projection = ProjectionHead(width, out=projection_dim, rngs=rngs)
        else:
            self.projection = None
        self.projection_kind = projection

    def __call__(self, x: jax.Array) -> Outputs:
        h = self.encoder(x)
        if isinstance(self.head, AtlasHead):
            coords, q = self.head(h)
            out = Outputs(manifolds.atlas_code(coords, q)[0], coords, q)
            if isinstance(self.projection, MixedProjection):  # 'mixed': on the charts (atlas only)
                return out._replace(projection=self.projection(coords, q))
        else:
            out = Outputs(self.head(h))
        if isinstance(self.projection, ProjectionHead):
            out = out._replace(projection=self.projection(out.embedding))
        return out
