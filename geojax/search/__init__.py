"""Search over compact codes: exact scans, and indexes that own their codec (faiss's shape).

- :mod:`geojax.search.scan`: exact top-k scans (``torus_topk``, ``hamming_topk``, ``pq_topk``) and their
  distance kernels, re-exported here;
- :mod:`geojax.search.codecs`: what an index stores and how it measures distance (``TorusCodec``,
  ``BinaryCodec``, ``PQCodec``);
- :mod:`geojax.search.merge`: the (distance, id) top-k merge every index ends with;
- :mod:`geojax.search.placement`: rows on a device mesh over one or several processes;
- :mod:`geojax.search.index`: ``Index``, the contract every index keeps, and its shared checks;
- :mod:`geojax.search.flat`: ``IndexFlat``, the exact index sharded over devices and processes;
- :mod:`geojax.search.ivf`: ``IndexIVF``, inverted lists with a coarse quantiser in the code's geometry
  (:mod:`geojax.search.coarse`: the k-means; :mod:`geojax.search.ivf_scan`: the lists' blocks on the devices
  and the search program);
- :mod:`geojax.search.filters`: which ids a search may return (``allowed=``: a mask over ids, a per-query
  bitset, ``IdRanges``);
- :mod:`geojax.search.ranges`: range search, every row nearer than a radius (``range_search``);
- :mod:`geojax.search.io`: ``write_index`` / ``read_index``, one versioned, atomic file format.

Every index: ``train(x)``, ``add(x, ids=None)``, ``add_codes(codes, ids=None)``, ``search(q, k, *,
allowed=None)`` → ``(distances [Q, k], ids [Q, k])`` as ``jax.Array``s ascending with ties to the lower id,
``range_search(q, radius, *, max_results)`` → faiss's ``(lims, D, I)``, ``reconstruct(ids)`` (the codec's
decode of the stored codes), ``remove_ids``, ``reset``, ``ntotal``.
"""

from geojax.search.codecs import BinaryCodec, PQCodec, TorusCodec
from geojax.search.filters import IdRanges
from geojax.search.flat import IndexFlat
from geojax.search.io import read_index, write_index
from geojax.search.ivf import IndexIVF
from geojax.search.scan import (
    hamming_distances,
    hamming_topk,
    pq_distances,
    pq_topk,
    torus_distances,
    torus_topk,
    use_cpu_cores,
)

__all__: list[str] = [
    "BinaryCodec",
    "IdRanges",
    "IndexFlat",
    "IndexIVF",
    "PQCodec",
    "TorusCodec",
    "hamming_distances",
    "hamming_topk",
    "pq_distances",
    "pq_topk",
    "read_index",
    "torus_distances",
    "torus_topk",
    "use_cpu_cores",
    "write_index",
]
