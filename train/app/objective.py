"""The training objective: a loss over the batch similarity (or over the embeddings) plus weighted
regularisers. Each loss and each regulariser is registered here (:mod:`train.app.registry`) with the keys it
uses and the library function it calls; :class:`Objective` finds them by the config's values."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax

from geojax import losses, manifolds, models, parallel, regularizers
from geojax import similarity as similarity_lib
from geojax.manifolds import GEOMETRIES
from train.app import registry
from train.app.registry import NON_NEGATIVE, POSITIVE, POSITIVE_INT, Key, When

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

registry.register("loss", "supcon", keys=(TEMPERATURE, BASE_TEMPERATURE), calls=losses.supcon)
registry.register("loss", "sincere", keys=(TEMPERATURE, BASE_TEMPERATURE), calls=losses.sincere)
registry.register("loss", "info_nce", keys=(TEMPERATURE, BASE_TEMPERATURE), calls=losses.info_nce)
registry.register("loss", "contrastive", keys=(POS_MARGIN, NEG_MARGIN), calls=losses.contrastive)
registry.register("loss", "triplet", keys=(MARGIN, MINING), calls=losses.triplet)
registry.register("loss", "lifted_structured", keys=(POS_MARGIN, NEG_MARGIN), calls=losses.lifted_structured)
# SimO compares the embeddings themselves (Bouhsine 2024 eq. 4), not a similarity matrix.
registry.register("loss", "simo", keys=(SIMO_EPS, SIMO_ORTHOGONALITY), calls=losses.simo, input="embeddings")


class Context(NamedTuple):
    """What a regulariser may read besides the model's outputs and its own keys."""

    key: jax.Array  # the step's randomness for the objective (an atlas's prior sample)
    axis_name: str | None
    views: int
    chart_dim: int


def koleo_term(out: models.Outputs, ctx: Context, *, eps: float | None = None) -> jax.Array:
    """KoLeo of each view's embeddings, summed over the views, as Stowell 2026's code: two views of one image
    are not each other's nearest neighbours (``eps`` None: the library's own)."""
    own = {} if eps is None else {"eps": eps}
    return regularizers.koleo(out.embedding, views=ctx.views, axis_name=ctx.axis_name, **own)


def mmd_term(out: models.Outputs, ctx: Context, *, samples: int) -> jax.Array:
    """Korman 2021's ℓ_Z (eq. 6) against ``samples`` draws of the uniform prior."""
    prior = regularizers.sample_prior(ctx.key, samples, ctx.chart_dim)
    return regularizers.mmd_atlas(out.coords, out.q, prior, axis_name=ctx.axis_name)


def membership_term(out: models.Outputs, ctx: Context) -> jax.Array:
    """Korman 2021's membership ℓ_J."""
    return regularizers.membership(out.q, axis_name=ctx.axis_name)


VECTORS = When("geometry", tuple(g for g in GEOMETRIES if g != "atlas"))
ATLAS = When("geometry", ("atlas",))
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
        "mmd", 0.0, "λ1, the atlas MMD ℓ_Z weight (Korman 2021 eq. 6)", float, "objective", NON_NEGATIVE
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

    ``similarity`` is a geojax.similarity name, ``torus`` (flat-torus L1 of the angles of torus embeddings)
    or ``manifold`` (−d_M of an atlas, Korman 2021 eq. 7); ``loss_kwargs`` are the loss's hyper-parameters
    (its registered keys); ``regularizers`` holds (name, weight, keyword arguments) of each one that is on.
    """

    loss: str
    similarity: str
    loss_kwargs: tuple[tuple[str, Any], ...] = ()
    regularizers: tuple[tuple[str, float, tuple[tuple[str, Any], ...]], ...] = ()
    views: int = 1
    chart_dim: int = 1

    @classmethod
    def from_config(cls, cfg: Any) -> Objective:
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

    def _similarity(self, out: models.Outputs, axis_name: str | None) -> jax.Array:
        """[n, M] similarity of the n local rows to the gathered M global rows."""
        if self.similarity == "manifold":
            return -similarity_lib.manifold_distance(
                out.coords,
                out.q,
                parallel.gather(out.coords, axis_name),
                parallel.gather(out.q, axis_name),
                no_overlap=NO_OVERLAP,
            )
        vectors = out.loss_vectors
        if self.similarity == "torus":
            vectors = manifolds.clifford_to_angles(vectors)
        return similarity_lib.get(self.similarity)(vectors, parallel.gather(vectors, axis_name))

    def __call__(
        self, out: models.Outputs, labels: jax.Array, key: jax.Array, axis_name: str | None
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """(total, {term: unweighted value}) of one device's outputs (n rows, ``labels`` [n]) against the keys
        of all devices; every term is the value on the global batch."""
        n = labels.shape[0]
        keys = {
            "key_labels": parallel.gather(labels, axis_name),
            "self_index": parallel.self_index(n, axis_name),
            "axis_name": axis_name,
        }
        loss = registry.option("loss", self.loss)
        if loss.info.get("input") == "embeddings":
            vectors = out.loss_vectors
            inputs = {"key_embeddings": parallel.gather(vectors, axis_name)}
            main = loss.calls(vectors, labels, **inputs, **dict(self.loss_kwargs), **keys)
        else:
            main = loss.calls(self._similarity(out, axis_name), labels, **dict(self.loss_kwargs), **keys)
        terms = {self.loss: main}
        total = main
        ctx = Context(key, axis_name, self.views, self.chart_dim)
        for name, weight, kwargs in self.regularizers:
            terms[name] = registry.REGULARIZERS[name].calls(out, ctx, **dict(kwargs))
            total = total + weight * terms[name]
        return total, terms
