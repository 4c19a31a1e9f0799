"""Flax NNX encoders and embedding heads for sphere, torus and atlas geometries (Stowell 2026; Korman 2021).

Encoders map images ``x: [N, H, W, C]`` (or flat ``[N, F]`` for the MLP) to features ``h: [N, F]``.
Heads map features to the embedding space the losses see:

- :class:`GeometryHead` — Stowell 2026's head, Linear(h, 4D) → ReLU → Linear(4D, D), then the projection of
  the chosen geometry's record (:mod:`geojax.geometries`: ``euclidean`` raw, ``sphere`` L2, ``torus_c``
  Clifford of D turns → 2D, ``torus_n`` pairwise L2 of D (even) values, or any registered one).
- :class:`AtlasHead` — Korman 2021's n + 1 linear heads: pre-sigmoid chart coordinates ``[N, n, d]`` and the
  softmax membership ``q: [N, n]``.
- :class:`ProjectionHead` and :class:`MixedProjection` — SimCLR's projection head (Chen et al. 2020: one
  hidden layer as wide as its input) and MSimCLR's q-weighted sum of one such head per chart,
  z = Σ_c q_c h_c(sigmoid(coords_c)) (Korman 2021, Table 1; the head sizes of its public code).

``compute_dtype`` (e.g. ``jnp.bfloat16``) sets the dtype of the layer computations; parameters stay
float32 and every head casts to float32 before its projection, so losses see float32 embeddings.
"""

from geojax.models._batchnorm import FusedBatchNorm as FusedBatchNorm
from geojax.models._batchnorm import batch_norm_train as batch_norm_train
from geojax.models._encoders import ENCODERS as ENCODERS
from geojax.models._encoders import MLP as MLP
from geojax.models._encoders import NORMS as NORMS
from geojax.models._encoders import OWN_WIDTHS as OWN_WIDTHS
from geojax.models._encoders import EncoderName as EncoderName
from geojax.models._encoders import ResNet as ResNet
from geojax.models._encoders import SmallCNN as SmallCNN
from geojax.models._encoders import encoder as encoder
from geojax.models._heads import PROJECTIONS as PROJECTIONS
from geojax.models._heads import AtlasHead as AtlasHead
from geojax.models._heads import GeometryHead as GeometryHead
from geojax.models._heads import MixedProjection as MixedProjection
from geojax.models._heads import ProjectionHead as ProjectionHead
from geojax.models._heads import ProjectionName as ProjectionName
from geojax.models._heads import embedding_width as embedding_width
from geojax.models._heads import project as project
from geojax.models._kernels import tap_conv as tap_conv
from geojax.models._model import EmbeddingModel as EmbeddingModel
from geojax.models._model import Encoder as Encoder
from geojax.models._model import Outputs as Outputs
