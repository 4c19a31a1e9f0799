"""geojax: geometric embedding spaces in JAX — projections, similarities, losses, codes and search."""

from geojax import (
    binary,
    losses,
    manifolds,
    metrics,
    quantize,
    regularizers,
    search,
    similarity,
    tt,
)

__version__ = "0.1.0"
__all__ = [
    "binary",
    "losses",
    "manifolds",
    "metrics",
    "quantize",
    "regularizers",
    "search",
    "similarity",
    "tt",
]
