"""geojax: geometric embedding spaces in JAX — projections, similarities, losses, codes and search.

Compilation rule: no public function is wrapped in ``jax.jit``; wrap your training or evaluation step (or a
single call) in ``jax.jit`` yourself. Every public function is traceable — it can be called under
``jax.jit``, ``jax.grad``, ``jax.vmap`` and ``jax.shard_map`` — except the ranking metrics of
:mod:`geojax.metrics` (``precision_at_1``, ``recall_at_k``, ``map_at_r``, ``mean_average_precision``,
``knn_accuracy``, ``nearest_neighbors``, ``few_shot_accuracy``), which drive a host-side loop over query
chunks and return NumPy values. Inside the library only private kernels are jitted — for example the
kernels those host-side loops call, the iterative fits of :mod:`geojax.binary` and :mod:`geojax.quantize`,
the blocked top-k of :mod:`geojax.search` and the squared-distance kernel of :mod:`geojax.similarity`
(op-by-op dispatch of its tiles would be slow). A jit nested in your own jit is inlined: it costs nothing.
:func:`geojax.parallel.data_parallel` returns a compiled runner by design, and the indexes of
:mod:`geojax.search` (``IndexFlat``, ``IndexIVF``: databases of codes that a user keeps, adds to, searches,
writes and reads) run compiled searches.

Non-finite input: traceable functions never return a plausible number from a NaN or ±Inf input — every
output entry computed from a non-finite input entry is NaN (docs/conventions.md, "Non-finite input").

Importing geojax before the first JAX computation keeps XLA's CPU backend off YNNPACK's convolutions (XLA's
own run 2–3× faster) and, from jaxlib 0.11 on, off YNNPACK's element-wise and reduction fusions, which
miscompute bfloat16 programs (see ``geojax._xla_cpu``).
"""

from geojax import _xla_cpu

_xla_cpu.set_ynn_fusion_flag()

from geojax import (  # noqa: E402
    binary,
    geometries,
    losses,
    manifolds,
    memory,
    metrics,
    miners,
    parallel,
    quantize,
    regularizers,
    search,
    similarity,
    tt,
)

__version__ = "0.1.0"
__all__ = [
    "binary",
    "geometries",
    "losses",
    "manifolds",
    "memory",
    "metrics",
    "miners",
    "parallel",
    "quantize",
    "regularizers",
    "search",
    "similarity",
    "tt",
]
