"""geojax: geometric embedding spaces in JAX — projections, similarities, losses, codes and search."""

from geojax import manifolds, similarity

__version__ = "0.1.0"
__all__ = ["manifolds", "similarity"]
