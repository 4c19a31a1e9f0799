"""The training objective: a loss over the batch similarity (or over the embeddings) plus weighted
regularisers. Each loss and each regulariser is registered here (:mod:`train.app.registry`) with the keys it
uses and the library function it calls; :class:`Objective` finds them by the config's values."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from geojax import geometries, losses, manifolds, miners, models, parallel, regularizers
from geojax import memory as memory_lib
from geojax import similarity as similarity_lib
from train.app import registry
from train.app.model import geometry_output
from train.app.registry import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, Key, When

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

NO_OVERLAP = 1e3  # d_M where two atlas points share no chart (finite, so losses stay finite)

TEMPERATURE = Key(
    "temperature", 0.1, "softmax temperature τ", float, "objective", POSITIVE, arg="temperature"
)
BASE_TEMPERATURE = Key(
    "base_temperature",
    None,
    "× τ/base_temperature as SupContrast (0.07); none: pytorch-metric-learning's form",
    float | None,
    "objective",
    POSITIVE,
    arg="base_temperature",
)
MARGIN = Key("margin", 0.2, "triplet margin (similarity units)", float, "objective", arg="margin")
MINING = Key("mining", "all", "triplet mining", losses.Mining, "objective", arg="mining")
POS_MARGIN = Key(
    "pos_margin", None, "positive margin (none: the loss's own)", float | None, "objective", arg="pos_margin"
)
NEG_MARGIN = Key(
    "neg_margin", None, "negative margin (none: the loss's own)", float | None, "objective", arg="neg_margin"
)
SIMO_EPS = Key("simo_eps", 1e-6, "SimO ε", float, "objective", POSITIVE, arg="eps")
SIMO_ORTHOGONALITY = Key(
    "simo_orthogonality",
    True,
    "false: SimO's ablation (every orthogonality term o_ij = 1)",
    bool,
    "objective",
    arg="orthogonality",
)
SIMO_ORTHOGONALITY_WEIGHT = Key(
    "simo_orthogonality_weight",
    1.0,
    "SimO's orthogonality learning factor: the weight of the dissimilar pairs' term (1: eq. 1 as written)",
    float,
    "objective",
    NON_NEGATIVE,
    arg="orthogonality_weight",
)

# A cross-batch memory (Wang et al. 2020, XBM; geojax.memory) is a key of the losses that read key rows beside
# their anchors. SimO is not one of them: its loss is a ratio of sums over *every* pair of the set, so memory
# rows would bring their M² pairs with each other into each step (left out, the ratios would change).
MEMORY = Key(
    "memory",
    0,
    "cross-batch memory: the key rows of the last M embeddings (all views, every device) as extra keys, "
    "constants, enqueued after each step's loss (Wang et al. 2020, XBM); 0: off",
    int,
    "objective",
    NON_NEGATIVE_INT,
)
# Keys of the metric-learning losses whose papers' values differ between losses: none (the default) passes
# nothing, so that each loss takes its paper's own value (geojax.losses' defaults, listed in each help line).
LOSS_MARGIN = Key(
    "loss_margin",
    None,
    "margin (none: the loss's own: proxy_anchor 0.1, arcface 0.5 rad, cosface 0.35, circle 0.4)",
    float | None,
    "objective",
    NON_NEGATIVE,
    arg="margin",
)
LOSS_SCALE = Key(
    "loss_scale",
    None,
    "logit scale (none: the loss's own: proxy_nca 1, arcface and cosface 64, sigmoid 10)",
    float | None,
    "objective",
    POSITIVE,
    arg="scale",
)
ALPHA = Key(
    "alpha",
    None,
    "α (none: the loss's own: proxy_anchor 32, multi_similarity 2)",
    float | None,
    "objective",
    POSITIVE,
    arg="alpha",
)
BETA = Key("beta", None, "β of the negatives (none: 50)", float | None, "objective", POSITIVE, arg="beta")
BASE = Key("base", None, "similarity offset λ (none: 0.5)", float | None, "objective", arg="base")
GAMMA = Key("gamma", None, "scale γ (none: 80)", float | None, "objective", POSITIVE, arg="gamma")
SUB_CENTERS = Key(
    "sub_centers",
    None,
    "sub-centres K per class (SubCenter ArcFace; none: 1)",
    int | None,
    "objective",
    POSITIVE_INT,
    arg="sub_centers",
)
SIGMOID_BIAS = Key(
    "sigmoid_bias",
    None,
    "bias b (none: −10); with sigmoid_learn, its start",
    float | None,
    "objective",
    arg="bias",
)
SIGMOID_LEARN = Key(
    "sigmoid_learn",
    False,
    "learn the scale (as log t′, SigLIP's t = exp t′) and the bias with the model",
    bool,
    "objective",
)
PROXY_LR_SCALE = Key(
    "proxy_lr_scale",
    None,
    "learning-rate factor of the proxies / class weights (none: the loss's own: 100 for proxy_anchor, as "
    "Kim et al. 2020's code, 1 for the others)",
    float | None,
    "objective",
    POSITIVE,
)
MINER = Key(
    "miner",
    None,
    "mine the pairs a pair loss sees (geojax.miners; none: every pair)",
    str | None,
    "objective",
    options=True,
)

registry.register("loss", "supcon", keys=(TEMPERATURE, BASE_TEMPERATURE, MEMORY), calls=losses.supcon)
registry.register("loss", "sincere", keys=(TEMPERATURE, BASE_TEMPERATURE, MEMORY), calls=losses.sincere)
registry.register("loss", "info_nce", keys=(TEMPERATURE, BASE_TEMPERATURE, MEMORY), calls=losses.info_nce)
registry.register("loss", "contrastive", keys=(POS_MARGIN, NEG_MARGIN, MEMORY), calls=losses.contrastive)
registry.register("loss", "triplet", keys=(MARGIN, MINING, MEMORY), calls=losses.triplet)
registry.register(
    "loss", "lifted_structured", keys=(POS_MARGIN, NEG_MARGIN, MEMORY), calls=losses.lifted_structured
)
# SimO compares the embeddings themselves (Bouhsine 2024 eq. 4), not a similarity matrix.
registry.register(
    "loss",
    "simo",
    keys=(SIMO_EPS, SIMO_ORTHOGONALITY, SIMO_ORTHOGONALITY_WEIGHT),
    calls=losses.simo,
    input="embeddings",
)
registry.register(
    "loss", "multi_similarity", keys=(ALPHA, BETA, BASE, MEMORY), calls=losses.multi_similarity, pairs=True
)
registry.register("loss", "circle", keys=(LOSS_MARGIN, GAMMA, MEMORY), calls=losses.circle, pairs=True)
registry.register(
    "loss",
    "sigmoid",
    keys=(LOSS_SCALE, SIGMOID_BIAS, SIGMOID_LEARN, MEMORY),
    calls=losses.sigmoid,
    pairs=True,
)
# Losses against class proxies (one learned row per class, or per sub-centre) on the run's geometry: the
# similarity of each embedding to every proxy, [n, C·K].
_PROXY = {"input": "proxies", "proxy_lr_scale": 1.0}
registry.register(
    "loss",
    "proxy_anchor",
    keys=(LOSS_MARGIN, ALPHA, PROXY_LR_SCALE),
    calls=losses.proxy_anchor,
    **_PROXY | {"proxy_lr_scale": 100.0},
)
registry.register("loss", "proxy_nca", keys=(LOSS_SCALE, PROXY_LR_SCALE), calls=losses.proxy_nca, **_PROXY)
registry.register(
    "loss",
    "normalized_softmax",
    keys=(TEMPERATURE, PROXY_LR_SCALE),
    calls=losses.normalized_softmax,
    **_PROXY,
)
# ArcFace and CosFace put their margin on the angle or the cosine: they need similarity=cosine.
registry.register(
    "loss",
    "arcface",
    keys=(LOSS_MARGIN, LOSS_SCALE, SUB_CENTERS, PROXY_LR_SCALE),
    calls=losses.arcface,
    cosine=True,
    **_PROXY,
)
registry.register(
    "loss",
    "cosface",
    keys=(LOSS_MARGIN, LOSS_SCALE, PROXY_LR_SCALE),
    calls=losses.cosface,
    cosine=True,
    **_PROXY,
)
# The pair losses take a miner's masks (geojax.miners: each keeps some pairs of the batch, as
# pytorch-metric-learning's miners pick the pairs a loss sees).
PAIR_LOSSES = ("contrastive", "triplet", "multi_similarity", "circle", "sigmoid")
registry.core(dataclasses.replace(MINER, when=When("loss", PAIR_LOSSES)))
MINER_EPSILON = Key(
    "miner_epsilon", 0.1, "ε of the multi-similarity miner", float, "objective", NON_NEGATIVE, arg="epsilon"
)
MINER_POS_MARGIN = Key(
    "miner_pos_margin",
    None,
    "the pair-margin miner keeps positives with similarity below this (none: the miner's own, 0.98)",
    float | None,
    "objective",
    arg="pos_margin",
)
MINER_NEG_MARGIN = Key(
    "miner_neg_margin",
    None,
    "the pair-margin miner keeps negatives with similarity above this (none: the miner's own, 0.68)",
    float | None,
    "objective",
    arg="neg_margin",
)
MINER_MARGIN = Key(
    "miner_margin",
    0.2,
    "the triplet-margin miner's margin (similarity units)",
    float,
    "objective",
    arg="margin",
)
MINER_KIND = Key(
    "miner_kind",
    "all",
    "which violating triplets the triplet-margin miner keeps",
    Literal["all", "hard", "semihard", "easy"],
    "objective",
    arg="kind",
)
registry.register("miner", "multi_similarity", keys=(MINER_EPSILON,), calls=miners.multi_similarity)
registry.register("miner", "pair_margin", keys=(MINER_POS_MARGIN, MINER_NEG_MARGIN), calls=miners.pair_margin)
registry.register("miner", "triplet_margin", keys=(MINER_MARGIN, MINER_KIND), calls=miners.triplet_margin)
registry.register("miner", "batch_hard", calls=miners.batch_hard)


class Context(NamedTuple):
    """What a regulariser may read besides the model's outputs and its own keys.

    Attributes:
        key: the step's PRNG key for the objective (an atlas's prior sample).
        axis_name: the data-parallel mesh axis the regularisers reduce over (None: one device).
        views: augmented views per image (KoLeo treats each view's embeddings as one set).
        chart_dim: an atlas's chart dimension d.
    """

    key: jax.Array  # the step's randomness for the objective (an atlas's prior sample)
    axis_name: str | None
    views: int
    chart_dim: int


def koleo_term(out: models.Outputs, ctx: Context, *, eps: float | None = None) -> jax.Array:
    """KoLeo of each view's embeddings, summed over the views (the ``koleo`` regulariser).

    −mean_i log(‖x̂_i − x̂_nn(i)‖ + ε) (Sablayrolles et al. 2019, eq. 4, DINOv2's form) of each view's rows,
    as Stowell 2026's code: two views of one image are not each other's nearest neighbours. See
    :func:`geojax.regularizers.koleo`.

    Args:
        out: the model's outputs on one device's rows (their ``embedding`` [n, D], view-major).
        ctx: the step's context (views, axis name).
        eps: ε > 0 in log(distance + ε); None: the library's own (1e-8, DINOv2's).

    Returns:
        The KoLeo value of the global batch, a float32 scalar.
    """
    own = {} if eps is None else {"eps": eps}
    return regularizers.koleo(out.embedding, views=ctx.views, axis_name=ctx.axis_name, **own)


def mmd_term(out: models.Outputs, ctx: Context, *, samples: int) -> jax.Array:
    """Korman 2021's atlas MMD ℓ_Z (§2.2) against ``samples`` draws of the uniform prior (the ``mmd`` term).

    See :func:`geojax.regularizers.mmd_atlas`: MMD² between the membership-weighted chart coordinates and
    the prior pulled back to pre-sigmoid space.

    Args:
        out: the model's outputs on one device's rows (an atlas's ``coords`` [n, charts, d] and ``q``
            [n, charts]).
        ctx: the step's context (its PRNG key draws the prior sample; chart dim, axis name).
        samples: the prior sample size M ≥ 1.

    Returns:
        ℓ_Z of the global batch, a float32 scalar.
    """
    prior = regularizers.sample_prior(ctx.key, samples, ctx.chart_dim)
    return regularizers.mmd_atlas(out.coords, out.q, prior, axis_name=ctx.axis_name)


def membership_term(out: models.Outputs, ctx: Context) -> jax.Array:
    """Korman 2021's membership ℓ_J (§2.2): −mean_x Σ_i (q_i(x) − 1/n)² (the ``membership`` term).

    Args:
        out: the model's outputs on one device's rows (an atlas's memberships ``q`` [n, charts]).
        ctx: the step's context (its axis name).

    Returns:
        ℓ_J of the global batch, a float32 scalar.
    """
    return regularizers.membership(out.q, axis_name=ctx.axis_name)


# The regularisers of one output kind: help and messages list the geometries registered with it.
VECTORS = When("geometry", ("vector",), kind=geometry_output)
ATLAS = When("geometry", ("atlas",), kind=geometry_output)
registry.register_regularizer(
    "koleo",
    weight=Key(
        "koleo",
        0.0,
        "KoLeo weight: KoLeo of each view's embeddings, summed over views",
        float,
        "objective",
        NON_NEGATIVE,
    ),
    keys=(
        Key(
            "koleo_eps",
            None,
            "KoLeo ε in log(distance + ε) (none: the library's 1e-8, DINOv2's)",
            float | None,
            "objective",
            POSITIVE,
            arg="eps",
        ),
    ),
    calls=koleo_term,
    when=VECTORS,
)
registry.register_regularizer(
    "mmd",
    weight=Key(
        "mmd", 0.0, "λ1, the atlas MMD ℓ_Z weight (Korman 2021 eq. 5)", float, "objective", NON_NEGATIVE
    ),
    keys=(
        Key(
            "prior_samples",
            256,
            "uniform-prior sample size M for ℓ_Z",
            int,
            "objective",
            POSITIVE_INT,
            arg="samples",
        ),
    ),
    calls=mmd_term,
    when=ATLAS,
)
registry.register_regularizer(
    "membership",
    weight=Key("membership", 0.0, "λ2, the atlas membership ℓ_J weight", float, "objective", NON_NEGATIVE),
    calls=membership_term,
    when=ATLAS,
)


def _pairs(values: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(values.items()))


class LossParams(nnx.Module):
    """A loss's own parameters, trained with the model (its ``loss_params``; :func:`attach_loss_params`).

    ``proxies`` [C·K, W]: one raw row per class (K per class for sub-centres, class-major), raw as a head's
    output is: the run's geometry maps them to proxies as it maps the head's output to embeddings
    (:meth:`Objective.proxy_rows`): on the sphere they are projected, on the flat torus they are angles.
    ``log_scale`` and ``bias``: the sigmoid loss's t′ and b (Zhai et al. 2023: t = exp t′), when learned.

    Args:
        proxies: (rows, width) of the proxies, or None for none.
        turns: the proxies are torus angles in turns (drawn uniformly), not raw vectors (drawn N(0, 1)).
        scale: the sigmoid loss's starting scale t (None: no learned scale and bias).
        bias: the sigmoid loss's starting bias b.
        rngs: the ``nnx.Rngs`` that draw the proxies.
    """

    def __init__(
        self,
        *,
        proxies: tuple[int, int] | None = None,
        turns: bool = False,
        scale: float | None = None,
        bias: float = -10.0,
        rngs: nnx.Rngs,
    ):
        if proxies is not None:
            key = rngs.params()
            draw = jax.random.uniform(key, proxies) if turns else jax.random.normal(key, proxies)
            self.proxies = nnx.Param(draw.astype(jnp.float32))
        if scale is not None:
            self.log_scale = nnx.Param(jnp.log(jnp.float32(scale)))
            self.bias = nnx.Param(jnp.float32(bias))


def attach_loss_params(model: models.EmbeddingModel, cfg: RunConfig, classes: int | None) -> None:
    """Give ``model`` the parameters ``cfg``'s loss trains (``model.loss_params``), if it has any.

    A proxy loss gets C·K proxies (K: ``sub_centers``) of the width the loss compares: the head's raw
    width D for a vector geometry (projected by it), the atlas head's charts·(d + 1) raw outputs (split into
    chart coordinates and memberships), or the projection head's width. A learned sigmoid gets its scale and
    bias. The parameters are drawn from the run's seed (its replica's, for several seeds), after the model's.

    Args:
        model: the run's model (:func:`train.app.model.build_model`).
        cfg: the run's configuration.
        classes: C, the classes of the training labels (0 … C − 1); needed by a proxy loss.

    Raises:
        ValueError: a proxy loss without ``classes``.
    """
    option = registry.option("loss", cfg.loss)
    rngs = nnx.Rngs(jax.random.fold_in(jax.random.key(cfg.seed), 1))
    if option.info.get("input") == "proxies":
        if classes is None:
            raise ValueError(f"loss={cfg.loss!r} trains one proxy per class: the number of classes is needed")
        geometry = geometries.get(cfg.geometry)
        if cfg.projection != "none":
            width = cfg.projection_dim
        elif geometry.is_atlas:
            width = cfg.charts * (cfg.dim + 1)
        else:
            width = cfg.dim
        rows = classes * (cfg.sub_centers or 1)
        torus_angles = geometry.name == "torus_c" and cfg.projection == "none"
        model.loss_params = LossParams(proxies=(rows, width), turns=torus_angles, rngs=rngs)
    elif cfg.loss == "sigmoid" and cfg.sigmoid_learn:
        kw = registry.option_kwargs(cfg, "loss")
        model.loss_params = LossParams(scale=kw.get("scale", 10.0), bias=kw.get("bias", -10.0), rngs=rngs)


@dataclasses.dataclass(frozen=True)
class Objective:
    """The loss on the batch similarity (or on the embeddings) plus weighted regularisers.

    Calling it on one device's outputs gives (total, {term: unweighted value}), each term the value on the
    global batch (the keys of every device, then a cross-batch memory's rows when given).

    Attributes:
        loss: the registered loss (``supcon``, ``triplet``, ``simo``, ...).
        similarity: a geojax.similarity name, ``torus`` (flat-torus L1 of the angles of torus embeddings) or
            ``manifold`` (−d_M of an atlas, Korman 2021 eq. 7).
        loss_kwargs: the loss's hyper-parameters (its registered keys), (argument, value) pairs.
        regularizers: (name, weight, keyword arguments) of each regulariser that is on.
        views: augmented views per image.
        chart_dim: an atlas's chart dimension d (the config's ``dim``).
        miner: the registered miner whose masks a pair loss takes (None: every pair).
        miner_kwargs: the miner's hyper-parameters, (argument, value) pairs.
        geometry: the run's geometry, which maps raw proxies to proxies.
        projection: the run's projection head (``none``, ``mlp``, ``mixed``): with one, proxies are free
            vectors of its width.
        charts: an atlas's charts n.
    """

    loss: str
    similarity: str
    loss_kwargs: tuple[tuple[str, Any], ...] = ()
    regularizers: tuple[tuple[str, float, tuple[tuple[str, Any], ...]], ...] = ()
    views: int = 1
    chart_dim: int = 1
    miner: str | None = None
    miner_kwargs: tuple[tuple[str, Any], ...] = ()
    geometry: str = "sphere"
    projection: str = "none"
    charts: int = 1

    @classmethod
    def from_config(cls, cfg: RunConfig) -> Objective:
        """The objective of a run: its loss with its keys, and the regularisers whose weight is positive.

        Args:
            cfg: the run's configuration (loss, similarity, views, dim, the loss's and regularisers' keys).

        Returns:
            The Objective; a regulariser is on when its weight is > 0 and the geometry uses it.
        """
        on = [
            (reg.name, getattr(cfg, reg.weight.name), _pairs(registry.kwargs(cfg, reg.keys)))
            for reg in registry.REGULARIZERS.values()
            if getattr(cfg, reg.weight.name) > 0 and (reg.when is None or reg.when.holds(cfg))
        ]
        return cls(
            loss=cfg.loss,
            similarity=cfg.similarity,
            loss_kwargs=_pairs(registry.option_kwargs(cfg, "loss")),
            regularizers=tuple(on),
            views=cfg.views,
            chart_dim=cfg.dim,
            miner=cfg.miner if cfg.loss in PAIR_LOSSES else None,
            miner_kwargs=_pairs(registry.option_kwargs(cfg, "miner")) if cfg.miner else (),
            geometry=cfg.geometry,
            projection=cfg.projection,
            charts=cfg.charts,
        )

    def _input(self) -> str:
        """What the loss takes: ``sim`` (the batch's pairs), ``embeddings`` (SimO) or ``proxies``."""
        return registry.option("loss", self.loss).info.get("input", "sim")

    def _on_embeddings(self) -> bool:
        return self._input() == "embeddings"

    def proxy_rows(self, raw: jax.Array) -> Any:
        """The proxies as the loss compares them (:meth:`key_rows` of proxy outputs) from their raw rows.

        The raw rows become outputs as the model's head makes its own: projected by a vector geometry
        (torus_c: D angles in turns → the Clifford torus), split into chart coordinates and memberships by an
        atlas, or taken as they are in a projection head's space.

        Args:
            raw: [C·K, W] raw proxy rows (:class:`LossParams`).

        Returns:
            The proxies' key rows: [C·K, D'] vectors, [C·K, D'/2] angles for ``similarity=torus``, or an
            atlas's ``{'coords', 'q'}``.
        """
        raw = raw.astype(jnp.float32)
        geometry = geometries.get(self.geometry)
        if self.projection != "none":
            out = models.Outputs(raw, projection=raw)
        elif geometry.is_atlas:
            coords, q = manifolds.atlas_split(raw, charts=self.charts, dim=self.chart_dim)
            out = models.Outputs(manifolds.atlas_code(coords, q)[0], coords, q)
        else:
            out = models.Outputs(geometry.project(raw))
        return self.key_rows(out)

    def key_rows(self, out: models.Outputs) -> Any:
        """What the loss compares of each row, and so what a cross-batch memory stores.

        Args:
            out: the model's outputs on n rows.

        Returns:
            The loss vectors [n, D'] (the projection head's output when there is one, else the embedding)
            for a loss on the embeddings (SimO) and a vector similarity; an atlas's chart coordinates and
            memberships ``{'coords': [n, charts, d], 'q': [n, charts]}`` for ``manifold`` (d_M needs both);
            the angles [n, D/2] in turns of torus embeddings for ``torus``.
        """
        if self._on_embeddings():
            return out.loss_vectors
        if self.similarity == "manifold":
            return {"coords": out.coords, "q": out.q}
        if self.similarity == "torus":
            return manifolds.clifford_to_angles(out.loss_vectors)
        return out.loss_vectors

    def _similarity(self, rows: Any, keys: Any) -> jax.Array:
        """[n, M] similarity of the n local rows to the M keys (:meth:`key_rows` of both)."""
        if self.similarity == "manifold":
            return -similarity_lib.manifold_distance(
                rows["coords"], rows["q"], keys["coords"], keys["q"], no_overlap=NO_OVERLAP
            )
        return similarity_lib.get(self.similarity)(rows, keys)

    def gathered_keys(
        self, out: models.Outputs, labels: jax.Array, axis_name: str | None
    ) -> tuple[Any, jax.Array]:
        """(:meth:`key_rows`, labels) of the rows of every device in device order: the global batch's keys.

        They are also what a step enqueues into its cross-batch memory.

        Args:
            out: the model's outputs on this device's n rows.
            labels: their labels [n], int32.
            axis_name: the data-parallel mesh axis to gather over (None: one device, nothing gathered).

        Returns:
            (key rows of all N = devices·n rows, as :meth:`key_rows` shapes them, labels [N]).
        """
        gather = lambda x: parallel.gather(x, axis_name)  # noqa: E731
        return jax.tree.map(gather, self.key_rows(out)), gather(labels)

    def __call__(
        self,
        out: models.Outputs,
        labels: jax.Array,
        key: jax.Array,
        axis_name: str | None,
        memory: memory_lib.Memory | None = None,
        loss_params: LossParams | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(total, {term: unweighted value}) of one device's outputs (n rows, ``labels`` [n]) against the keys
        of all devices, followed by the rows of ``memory`` when given (constants; its empty slots left out),
        or against the class proxies of ``loss_params`` for a proxy loss; every term is the value on the
        global batch."""
        loss = registry.option("loss", self.loss)
        if self._input() == "proxies":
            assert loss_params is not None  # attach_loss_params gives every proxy loss its proxies
            sim = self._similarity(self.key_rows(out), self.proxy_rows(loss_params.proxies[...]))
            main = loss.calls(sim, labels, **dict(self.loss_kwargs), axis_name=axis_name)
        else:
            main = self._batch_loss(loss, out, labels, axis_name, memory, loss_params)
        terms = {self.loss: main}
        total = main
        ctx = Context(key, axis_name, self.views, self.chart_dim)
        for name, weight, kwargs in self.regularizers:
            terms[name] = registry.REGULARIZERS[name].calls(out, ctx, **dict(kwargs))
            total = total + weight * terms[name]
        return total, terms

    def _batch_loss(
        self,
        loss: registry.Option,
        out: models.Outputs,
        labels: jax.Array,
        axis_name: str | None,
        memory: memory_lib.Memory | None,
        loss_params: LossParams | None,
    ) -> jax.Array:
        """The loss of this device's rows against the keys of every device (and of ``memory``), on their
        similarity (or their embeddings, for SimO), the miner's pairs only when there is one."""
        rows = self.key_rows(out)
        key_rows, key_labels = self.gathered_keys(out, labels, axis_name)
        keys = {"self_index": parallel.self_index(labels.shape[0], axis_name), "axis_name": axis_name}
        if memory is not None:
            key_rows, key_labels, keys["key_valid"] = memory_lib.keys(memory, key_rows, key_labels)
        keys["key_labels"] = key_labels
        kwargs = dict(self.loss_kwargs)
        if self._on_embeddings():
            return loss.calls(rows, labels, key_embeddings=key_rows, **kwargs, **keys)
        sim = self._similarity(rows, key_rows)
        if self.miner is not None:
            mine = registry.option("miner", self.miner).calls
            local = {k: v for k, v in keys.items() if k != "axis_name"}  # a miner's choice is per anchor
            masks = mine(jax.lax.stop_gradient(sim), labels, **dict(self.miner_kwargs), **local)
            kwargs |= dict(zip(("pos_mask", "neg_mask"), masks, strict=True))
        if loss_params is not None and hasattr(loss_params, "log_scale"):  # the sigmoid's learned t′ and b
            kwargs |= {"scale": jnp.exp(loss_params.log_scale[...]), "bias": loss_params.bias[...]}
        return loss.calls(sim, labels, **kwargs, **keys)
