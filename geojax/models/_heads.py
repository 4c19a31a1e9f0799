"""The heads: the geometry projection (:func:`project`, :func:`embedding_width`), :class:`GeometryHead`,
:class:`AtlasHead`, and the projection heads :class:`ProjectionHead` and :class:`MixedProjection` with
their names.
"""

from __future__ import annotations

from typing import Literal, get_args

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import DTypeLike

from geojax import _checks, geometries, manifolds, quantize

ProjectionName = Literal["none", "mlp", "mixed"]
PROJECTIONS: tuple[str, ...] = get_args(ProjectionName)


def _vector_geometry(geometry: str) -> geometries.Geometry:
    """The registered vector geometry ``geometry``; ValueError when it is unknown or an atlas."""
    g = geometries.get(geometry)
    if g.is_atlas:
        raise ValueError(f"geometry must be a vector geometry, got the atlas {geometry!r}")
    return g


def embedding_width(geometry: str, dim: int) -> int:
    """Extrinsic width of a geometry head's output for pre-projection width ``dim`` (Stowell 2026 Tab. 1).

    The geometry's ``width``: torus_c maps D turns to 2D coordinates; the other built-in vector geometries
    keep D.

    Args:
        geometry: a registered vector geometry ('euclidean', 'sphere', 'torus_c', 'torus_n', ...).
        dim: D, the head's pre-projection width.

    Returns:
        2·dim for torus_c, else dim (the registered geometry's ``width``).

    Raises:
        ValueError: ``geometry`` is not a registered vector geometry.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> models.embedding_width("torus_c", 8), models.embedding_width("sphere", 8)
        (16, 8)
    """
    return _vector_geometry(geometry).width(dim)


def project(raw: jax.Array, geometry: str) -> jax.Array:
    """Apply the geometry's projection (Stowell 2026 Tab. 1) to raw head output, in float32.

    The registered geometry's ``project``: ``sphere``: L2 (:func:`geojax.manifolds.sphere`); ``torus_c``:
    Clifford of D turns → 2D (:func:`geojax.manifolds.torus_clifford`); ``torus_n``: pairwise L2
    (:func:`geojax.manifolds.torus_l2p`); ``euclidean``: the raw vector.

    Args:
        raw: [N, D] raw head output.
        geometry: a registered vector geometry's name.

    Returns:
        [N, D'] float32 embeddings (D' = 2D for torus_c, else D).

    Raises:
        ValueError: ``geometry`` is not a registered vector geometry.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> print(models.project(jnp.array([[3.0, 4.0]]), "sphere"))
        [[0.6 0.8]]
    """
    return _vector_geometry(geometry).project(raw.astype(jnp.float32))


def check_qat(record: geometries.Geometry, geometry: str, qat_bits: int | None, qat_noise: bool) -> None:
    """Refuse quantisation-aware training options that ``geometry`` cannot take.

    ``qat_bits`` must be one of the torus code widths and the geometry a torus one; ``qat_noise`` needs
    ``qat_bits``.

    Args:
        record: the geometry's record (:func:`geojax.geometries.get`).
        geometry: its name, for the message.
        qat_bits: bits per angle of the quantisation-aware head, or None.
        qat_noise: whether that head adds uniform noise instead of rounding.

    Raises:
        ValueError: an option the geometry cannot take, named.
    """
    if qat_bits is not None:
        _checks.check_choice(qat_bits, "qat_bits", quantize.TORUS_BITS)
        if not record.is_torus:
            raise ValueError(f"qat_bits needs a torus geometry (torus_c, torus_n), got {geometry!r}")
    elif qat_noise:
        raise ValueError("qat_noise needs qat_bits")


class GeometryHead(nnx.Module):
    """Stowell 2026's head: Linear(F, 4D) → ReLU → Linear(4D, D), then the geometry projection.

    The head of Stowell's public code; h [N, F] → [N, D'] (D' = 2D for torus_c, else D). ``hidden`` replaces
    the 4D hidden width (SupContrast's head: F); ``hidden=0`` leaves one Linear(F, D) (Korman 2021's public
    code maps its trunk to the code so). ``qat_bits`` (torus geometries only; 1, 2, 4 or 8) trains through the
    b-bit torus grid of ``quantize.torus_codes``: the flat angles (the raw turns of torus_c, the pair angles
    of torus_n) pass through ``quantize.torus_fake_quantize`` before the Clifford projection, so the forward
    pass sees the grid angles and the backward pass the straight-through gradient. With ``qat_noise`` the
    training forward adds one grid step of uniform noise instead; evaluation mode (``model.eval()``, which
    sets ``deterministic``) always rounds, so the embeddings a trained model gives are exactly its codes.

    Args:
        in_features: F.
        dim: D (a positive int; even for a geometry with ``even_dim``: torus_n).
        geometry: a registered vector geometry ('euclidean', 'sphere', 'torus_c', 'torus_n', ...).
        hidden: the hidden width; None: 4·dim; 0: no hidden layer.
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        qat_bits: None, or 1, 2, 4 or 8 for quantisation-aware training of a torus head.
        qat_noise: train with uniform noise instead of rounding (needs ``qat_bits``).
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``dim`` or ``hidden`` is not a positive int, ``geometry`` is unknown, ``dim`` is odd for
            an ``even_dim`` geometry (torus_n), ``qat_bits`` is not 1, 2, 4 or 8 or is given for a non-torus
            geometry, or ``qat_noise`` without ``qat_bits``.

    References:
        Stowell 2026, "Torus embeddings" (arXiv 2603.03135), Table 1 and §5.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> head = models.GeometryHead(16, 4, geometry="torus_c", rngs=nnx.Rngs(0))
        >>> z = head(jnp.ones((2, 16)))
        >>> z.shape, bool(jnp.allclose(jnp.linalg.norm(z, axis=-1), 1.0))
        ((2, 8), True)
    """

    def __init__(
        self,
        in_features: int,
        dim: int,
        *,
        geometry: str,
        hidden: int | None = None,
        compute_dtype: DTypeLike | None = None,
        qat_bits: int | None = None,
        qat_noise: bool = False,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(dim, "dim")
        hidden = 4 * dim if hidden is None else hidden
        if hidden:
            _checks.check_positive_int(hidden, "hidden")
        record = _vector_geometry(geometry)
        if record.even_dim:
            _checks.check_even(dim, "dim")
        check_qat(record, geometry, qat_bits, qat_noise)
        self.hidden = nnx.Linear(in_features, hidden, dtype=compute_dtype, rngs=rngs) if hidden else None
        self.out = nnx.Linear(hidden or in_features, dim, dtype=compute_dtype, rngs=rngs)
        self.geometry = geometry
        self.qat_bits = qat_bits
        self.qat_noise = bool(qat_noise)
        self.deterministic = False

    def __call__(self, h: jax.Array) -> jax.Array:
        raw = self.out(h if self.hidden is None else nnx.relu(self.hidden(h)))
        if self.qat_bits is None:
            return project(raw, self.geometry)
        angles = geometries.get(self.geometry).flat_angles(raw.astype(jnp.float32))
        noise = self.qat_noise and not self.deterministic
        return manifolds.torus_clifford(quantize.torus_fake_quantize(angles, self.qat_bits, noise=noise))


class AtlasHead(nnx.Module):
    """Korman 2021 §2.4: n chart heads of width d (pre-sigmoid) and a softmax membership head, as one Linear.

    h [N, F] → (coords [N, n, d] pre-sigmoid float32, q [N, n] float32 summing to 1), split by
    :func:`geojax.manifolds.atlas_split`.

    Args:
        in_features: F.
        charts: n (a positive int).
        dim: d (a positive int).
        compute_dtype: the dtype of the layer computations (e.g. ``jnp.bfloat16``); None: the parameters'
            float32.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``charts`` or ``dim`` is not a positive int.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), §2.4.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> coords, q = models.AtlasHead(16, charts=3, dim=2, rngs=nnx.Rngs(0))(jnp.ones((2, 16)))
        >>> coords.shape, q.shape
        ((2, 3, 2), (2, 3))
    """

    def __init__(
        self,
        in_features: int,
        *,
        charts: int,
        dim: int,
        compute_dtype: DTypeLike | None = None,
        rngs: nnx.Rngs,
    ):
        _checks.check_positive_int(charts, "charts")
        _checks.check_positive_int(dim, "dim")
        self.linear = nnx.Linear(in_features, charts * dim + charts, dtype=compute_dtype, rngs=rngs)
        self.charts, self.dim = charts, dim

    def __call__(self, h: jax.Array) -> tuple[jax.Array, jax.Array]:
        return manifolds.atlas_split(self.linear(h).astype(jnp.float32), charts=self.charts, dim=self.dim)


class ProjectionHead(nnx.Module):
    """SimCLR's projection head g (Chen et al. 2020 §2.1): Linear(D, hidden) → ReLU → Linear(hidden, out).

    Both layers without bias, the hidden layer as wide as the input by default (Chen et al. 2020; Korman
    2021's public code for its SimCLR baseline: Linear(d, d) → ReLU → Linear(d, 64)). z [N, D] → [N, out].

    Args:
        in_features: D (a positive int).
        hidden: the hidden width; None: D.
        out: the output width P.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``in_features`` is not a positive int.

    References:
        Chen et al. 2020, "A Simple Framework for Contrastive Learning of Visual Representations" (arXiv
        2002.05709), §2.1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> models.ProjectionHead(8, out=4, rngs=nnx.Rngs(0))(jnp.ones((2, 8))).shape
        (2, 4)
    """

    def __init__(self, in_features: int, *, hidden: int | None = None, out: int = 64, rngs: nnx.Rngs):
        _checks.check_positive_int(in_features, "in_features")
        hidden = in_features if hidden is None else hidden
        self.hidden = nnx.Linear(in_features, hidden, use_bias=False, rngs=rngs)
        self.out = nnx.Linear(hidden, out, use_bias=False, rngs=rngs)

    def __call__(self, z: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(z)))


class MixedProjection(nnx.Module):
    """MSimCLR projection (Korman 2021 Tab. 1): z = Σ_c q_c · h_c(sigmoid(coords_c)), one head per chart.

    Each head has :class:`ProjectionHead`'s form, Linear(d, hidden) → ReLU → Linear(hidden, out) without
    bias, hidden = d by default, as Korman 2021's public code. Called as ``(coords [N, n, d] pre-sigmoid,
    q [N, n])`` → z [N, out] float32.

    Args:
        charts: n (a positive int).
        dim: d (a positive int).
        hidden: the hidden width; None: d.
        out: the output width P.
        rngs: the ``nnx.Rngs`` that initialise the parameters.

    Raises:
        ValueError: ``charts`` or ``dim`` is not a positive int.

    References:
        Korman 2021, manifold (atlas) target spaces (arXiv 2106.07062), Table 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from geojax import models
        >>> head = models.MixedProjection(charts=3, dim=2, out=4, rngs=nnx.Rngs(0))
        >>> head(jnp.zeros((2, 3, 2)), jnp.full((2, 3), 1 / 3)).shape
        (2, 4)
    """

    def __init__(self, *, charts: int, dim: int, hidden: int | None = None, out: int = 64, rngs: nnx.Rngs):
        _checks.check_positive_int(charts, "charts")
        _checks.check_positive_int(dim, "dim")
        hidden = dim if hidden is None else hidden
        init = nnx.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
        self.w1 = nnx.Param(init(rngs.params(), (charts, dim, hidden)))
        self.w2 = nnx.Param(init(rngs.params(), (charts, hidden, out)))

    def __call__(self, coords: jax.Array, q: jax.Array) -> jax.Array:
        hid = nnx.relu(jnp.einsum("ncd,cdh->nch", jax.nn.sigmoid(coords), self.w1[...]))
        per_chart = jnp.einsum("nch,cho->nco", hid, self.w2[...])
        return jnp.einsum("nc,nco->no", q, per_chart)
