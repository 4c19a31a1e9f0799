"""The training objective: a loss over the batch similarity (or over the embeddings) plus weighted
regularisers. Each loss and each regulariser is registered here (:mod:`train.app.registry`) with the keys it
uses and the library function it calls; :class:`Objective` finds them by the config's values."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

import jax

from geojax import losses, manifolds, models, parallel, regularizers
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
    """

    loss: str
    similarity: str
    loss_kwargs: tuple[tuple[str, Any], ...] = ()
    regularizers: tuple[tuple[str, float, tuple[tuple[str, Any], ...]], ...] = ()
    views: int = 1
    chart_dim: int = 1

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
            if (reg.when is None or reg.when.holds(cfg)) and getattr(cfg, reg.weight.name) > 0
        ]
        return cls(
            loss=cfg.loss,
            similarity=cfg.similarity,
            loss_kwargs=_pairs(registry.option_kwargs(cfg, "loss")),
            regularizers=tuple(on),
            views=cfg.views,
            chart_dim=cfg.dim,
        )

    def _on_embeddings(self) -> bool:
        return registry.option("loss", self.loss).info.get("input") == "embeddings"

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
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(total, {term: unweighted value}) of one device's outputs (n rows, ``labels`` [n]) against the keys
        of all devices, followed by the rows of ``memory`` when given (constants; its empty slots left out);
        every term is the value on the global batch."""
        rows = self.key_rows(out)
        key_rows, key_labels = self.gathered_keys(out, labels, axis_name)
        keys = {"self_index": parallel.self_index(labels.shape[0], axis_name), "axis_name": axis_name}
        if memory is not None:
            key_rows, key_labels, keys["key_valid"] = memory_lib.keys(memory, key_rows, key_labels)
        keys["key_labels"] = key_labels
        loss = registry.option("loss", self.loss)
        if self._on_embeddings():
            inputs = {"key_embeddings": key_rows}
            main = loss.calls(rows, labels, **inputs, **dict(self.loss_kwargs), **keys)
        else:
            main = loss.calls(self._similarity(rows, key_rows), labels, **dict(self.loss_kwargs), **keys)
        terms = {self.loss: main}
        total = main
        ctx = Context(key, axis_name, self.views, self.chart_dim)
        for name, weight, kwargs in self.regularizers:
            terms[name] = registry.REGULARIZERS[name].calls(out, ctx, **dict(kwargs))
            total = total + weight * terms[name]
        return total, terms
