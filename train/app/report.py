"""After training: the evaluation of a trained state, embeddings.npz, the retrieval report and report.json.

A trained state's outputs come from :func:`embed` (per seed, :func:`embed_replicas`) and each seed's retrieval
report from :func:`evaluate`; embeddings.npz is what the evaluation tools read.

Retrieval protocol: queries = test split, reference = train split. Besides the metrics of the learnt
embedding, the report holds the raw-input 1-NN baseline (Euclidean on pixels) of the same split.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from geojax import geometries, manifolds, metrics, models
from geojax import similarity as similarity_lib
from geojax.models import Outputs
from train.app import probe, step
from train.app.data import Dataset
from train.helpers import files
from train.helpers.version import code_version

if TYPE_CHECKING:
    from train.app.config_types import RunConfig


def embed_replicas(
    cfg: RunConfig, graphdef: nnx.GraphDef, state: step.State, images: np.ndarray
) -> list[models.Outputs]:
    """:func:`embed` of ``images`` by each replica of a run's state (one output for a single-seed run).

    Args:
        cfg: the run's configuration (``seeds``, ``eval_batch``, ``precision``).
        graphdef: the model's NNX graph definition.
        state: the run's state (stacked replicas for ``seeds`` > 1), on this process.
        images: the images [N, H, W, C].

    Returns:
        One :class:`geojax.models.Outputs` per seed, in seed order.
    """
    own = [state] if cfg.seeds == 1 else [step.replica(state, i) for i in range(cfg.seeds)]
    return [embed(graphdef, s, images, batch=cfg.eval_batch, precision=cfg.precision) for s in own]


@functools.partial(jax.jit, static_argnames="bf16")
def _forward(model: nnx.Module, x: jax.Array, *, bf16: bool) -> models.Outputs:
    """The model's outputs for ``x`` as float32, computed in bf16 when ``bf16``: one jitted function, so every
    evaluation of a model of the same structure and batch shape reuses one compiled program."""
    out = model(x.astype(jnp.bfloat16 if bf16 else jnp.float32))
    return jax.tree.map(lambda v: v.astype(jnp.float32), out)


def embed(
    graphdef: nnx.GraphDef, state: step.State, images: np.ndarray, *, batch: int, precision: str = "fp32"
) -> models.Outputs:
    """Evaluation-mode outputs (no augmentation) for ``images`` [N, H, W, C], in chunks of ``batch``.

    The EMA of the weights is used when the run keeps one; the last chunk is zero-padded to ``batch`` so that
    one compiled program serves every chunk.

    Args:
        graphdef: the model's NNX graph definition.
        state: a single run's state (not a stacked several-seeds one: see :func:`train.app.step.replica`).
        images: the images [N, H, W, C], float32 in [0, 1] (or uint8 codes).
        batch: the images per forward pass, ≥ 1.
        precision: ``fp32``, or ``bf16`` to compute in bfloat16 (outputs are float32 either way).

    Returns:
        The model's outputs (:class:`geojax.models.Outputs`) for the N images, as float32 NumPy arrays.
    """
    model = nnx.merge(graphdef, state.get("ema", state["params"]), state["rest"])
    model.eval()
    chunks = []
    for start in range(0, len(images), batch):  # one compiled shape: the last chunk is zero-padded
        x = images[start : start + batch]
        rows, pad = len(x), batch - len(x)
        x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]) if pad else x
        out = _forward(model, x, bf16=precision == "bf16")
        chunks.append(jax.tree.map(lambda v, rows=rows: np.asarray(v)[:rows], out))
    return jax.tree.map(lambda *parts: np.concatenate(parts), *chunks)


def evaluate(
    cfg: RunConfig, graphdef: nnx.GraphDef, state: step.State, ds: Dataset
) -> tuple[list[dict[str, Any]], tuple[Outputs, Outputs]]:
    """The retrieval report of each replica of a trained run, each evaluated as its single run would be.

    Args:
        cfg: the run's configuration (``seed``, ``seeds`` = S, the evaluation keys).
        graphdef: the model's NNX graph definition.
        state: the run's trained state (stacked replicas for S > 1), on this process.
        ds: the data set: the test images are the queries, the training images the references.

    Returns:
        (S reports of :func:`retrieval_report`, in seed order; the first seed's (query, reference) outputs,
        what embeddings.npz holds).
    """
    queries = embed_replicas(cfg, graphdef, state, ds.test_x)
    references = embed_replicas(cfg, graphdef, state, ds.train_x)
    reports = []
    for index, (query, reference) in enumerate(zip(queries, references, strict=True)):
        own = dataclasses.replace(cfg, seed=cfg.seed + index, seeds=1)
        reports.append(retrieval_report(own, query, reference, ds))
    return reports, (queries[0], references[0])


def write_embeddings(path: str, cfg: RunConfig, query: Outputs, reference: Outputs, ds: Dataset) -> None:
    """WORKDIR/embeddings.npz, what the evaluation tools read.

    It holds ``query`` [M, D] and ``reference`` [N, D] float32 extrinsic embeddings, their int32 labels
    (``query_labels``, ``reference_labels``), the ``geometry`` and the ``similarity`` the model was trained
    with, and for an atlas the chart coordinates and memberships (``query_coords``, ``query_q``,
    ``reference_coords``, ``reference_q``).

    Args:
        path: the .npz file to write.
        cfg: the run's configuration (geometry, similarity).
        query: the model's outputs on the test images (the queries).
        reference: the model's outputs on the training images (the references).
        ds: the data set (its labels).
    """
    arrays = {
        "query": query.embedding.astype(np.float32),
        "query_labels": ds.test_y.astype(np.int32),
        "reference": reference.embedding.astype(np.float32),
        "reference_labels": ds.train_y.astype(np.int32),
        "geometry": np.array(cfg.geometry),
        "similarity": np.array(cfg.similarity),
    }
    if geometries.get(cfg.geometry).is_atlas:
        arrays.update(
            query_coords=query.coords,
            query_q=query.q,
            reference_coords=reference.coords,
            reference_q=reference.q,
        )
    files.write_npz(path, **arrays)


def _neg_manifold_distance(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> jax.Array:
    """−d_M (Korman 2021 eq. 7) between atlas points given as (coords, q); no shared chart ranks last."""
    return -similarity_lib.manifold_distance(a[0], a[1], b[0], b[1], no_overlap=np.inf)


def _neg_compressed_distance(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> jax.Array:
    """−d_M between compressed atlas codes (Korman 2021 eq. 3, §2.4): other charts rank last."""
    return -similarity_lib.compressed_manifold_distance(a[0], a[1], b[0], b[1])


def retrieval_inputs(cfg: RunConfig, out: Outputs) -> tuple[Any, Any]:
    """What ranks ``out`` at retrieval: its rows and the similarity of the run's geometry.

    The similarity is :func:`geojax.similarity.retrieval_similarity`'s choice; an atlas trained on d_M
    ranks by −d_M (Korman 2021 eq. 7), points sharing no chart last.

    Args:
        cfg: the run's configuration (geometry, similarity).
        out: the model's outputs on some images.

    Returns:
        (rows, similarity): the embeddings [n, D] and a geojax.similarity name, or an atlas's (coords
        [n, charts, d], q [n, charts]) and a function of two such pairs giving the [n, m] −d_M matrix.
    """
    name = similarity_lib.retrieval_similarity(cfg.geometry, cfg.similarity)
    if name == "manifold":
        return (out.coords, out.q), _neg_manifold_distance
    return out.embedding, name


def _digest(ds: Dataset) -> str:
    """A digest of the data set's arrays (its split and labels included)."""
    h = hashlib.blake2b(digest_size=16)
    for a in (ds.train_x, ds.train_y, ds.test_x, ds.test_y):
        h.update(str((a.shape, a.dtype)).encode())
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


_RAW_BASELINES: dict[tuple[str, int, bool], dict[str, float]] = {}


def raw_baseline(ds: Dataset, knn_k: int, *, within_test: bool = False) -> dict[str, float]:
    """P@1 and kNN accuracy of the raw pixels (negative Euclidean distance), test images against train.

    The same for every run on the same data, and the costliest part of a report on large data (Fashion-MNIST:
    10,000 × 60,000 × 784), so it is computed once per data set and process (keyed by the arrays' digest).

    Args:
        ds: the data set.
        knn_k: k of the kNN accuracy, ≥ 1.
        within_test: rank the test images among themselves, each against the rest (the
            ``classes=disjoint`` protocol), instead of against the training images.

    Returns:
        ``{"precision_at_1": float, "knn_accuracy": float}``, both in [0, 1] (a new dict each call).
    """
    key = (_digest(ds), knn_k, within_test)
    if key not in _RAW_BASELINES:
        args = (ds.test_x.reshape(len(ds.test_x), -1), ds.test_y)
        if not within_test:
            args += (ds.train_x.reshape(len(ds.train_x), -1), ds.train_y)
        _RAW_BASELINES[key] = {
            "precision_at_1": metrics.precision_at_1(*args, similarity="neg_euclidean"),
            "knn_accuracy": metrics.knn_accuracy(*args, k=knn_k, similarity="neg_euclidean"),
        }
    return dict(_RAW_BASELINES[key])


def retrieval_report(cfg: RunConfig, query: Outputs, reference: Outputs, ds: Dataset) -> dict[str, Any]:
    """Retrieval metrics of test vs train, circular variance, the raw-pixel baseline and the run's probe.

    With ``classes=disjoint`` the test images are ranked among themselves, each against the rest. An atlas
    gets R@1, 2, 4, 8 (Korman 2021 §3.2), and when trained on d_M also R@k on its compressed code (Korman
    2021 §2.4: the code the paper evaluates). Circular variance is that of the unit embeddings (None for an
    atlas, whose code is not a unit vector).

    Args:
        cfg: the run's configuration (one seed).
        query: the model's outputs on the test images.
        reference: the model's outputs on the training images.
        ds: the data set.

    Returns:
        The metrics of :func:`geojax.metrics.retrieval_metrics` (``precision_at_1``, ``knn_accuracy``, ...)
        with ``knn_k``, ``circular_variance``, ``baseline_raw_1nn`` and, as the run asks,
        ``recall_at_k``, ``compressed_recall_at_k``, ``linear_probe_accuracy`` or
        ``piecewise_linear_accuracy`` with ``charts_used``.
    """
    within = cfg.classes == "disjoint"
    geometry = geometries.get(cfg.geometry)
    q, sim = retrieval_inputs(cfg, query)
    r, _ = retrieval_inputs(cfg, reference)
    args = (q, ds.test_y) if within else (q, ds.test_y, r, ds.train_y)
    # Korman 2021 §3.2 reports R@1, 2, 4, 8 for an atlas (the rest: python -m train.evaluate).
    ks = (1, 2, 4, 8) if geometry.is_atlas else ()
    out: dict[str, Any] = metrics.retrieval_metrics(*args, knn_k=cfg.knn_k, ks=ks, similarity=sim)
    out["knn_k"] = cfg.knn_k
    if ks:
        out["recall_at_k"] = {str(k): v for k, v in out["recall_at_k"].items()}
    if geometry.is_atlas and cfg.similarity == "manifold":
        against = () if within else ((reference.coords, reference.q), ds.train_y)
        compressed = metrics.recall_at_k(
            (query.coords, query.q), ds.test_y, *against, ks=ks, similarity=_neg_compressed_distance
        )
        out["compressed_recall_at_k"] = {str(k): v for k, v in compressed.items()}
    if not geometry.is_atlas:
        both = np.concatenate([query.embedding, reference.embedding])
        unit = both if geometry.unit_norm else np.asarray(manifolds.sphere(both))
        out["circular_variance"] = float(metrics.circular_variance(unit))
    else:
        out["circular_variance"] = None  # defined for unit vectors; the atlas code is not one
    out["baseline_raw_1nn"] = raw_baseline(ds, cfg.knn_k, within_test=within)
    if cfg.probe == "linear":
        out["linear_probe_accuracy"] = probe.linear_probe(
            reference.embedding,
            ds.train_y,
            query.embedding,
            ds.test_y,
            num_classes=ds.num_classes,
            epochs=cfg.probe_epochs,
            seed=cfg.seed,
        )
    elif cfg.probe == "piecewise":
        tr_code, tr_chart = manifolds.atlas_code(reference.coords, reference.q)
        te_code, te_chart = manifolds.atlas_code(query.coords, query.q)
        out["piecewise_linear_accuracy"] = probe.piecewise_linear(
            np.asarray(tr_code),
            np.asarray(tr_chart),
            ds.train_y,
            np.asarray(te_code),
            np.asarray(te_chart),
            ds.test_y,
            charts=cfg.charts,
            num_classes=ds.num_classes,
            epochs=cfg.probe_epochs,
            seed=cfg.seed,
        )
        out["charts_used"] = int(len(np.unique(np.asarray(tr_chart))))
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _mean_tree(values: list[Any]) -> Any:
    """The mean over replicas of each number of the reports (None where any is None; an integer setting that
    all replicas share, such as ``knn_k``, as that integer); others as the first."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _mean_tree([v[k] for v in values]) for k in first}
    if isinstance(first, int) and not isinstance(first, bool) and all(v == first for v in values):
        return first
    if _number(first):
        return float(np.mean(values)) if all(_number(v) for v in values) else None
    return first


def _std_tree(values: list[Any]) -> Any:
    """The sample standard deviation (ddof 1) over replicas of each number; None for non-numbers."""
    first = values[0]
    if isinstance(first, dict):
        return {k: _std_tree([v[k] for v in values]) for k in first}
    return float(np.std(values, ddof=1)) if all(_number(v) for v in values) else None


def over_seeds(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """A several-seeds run's report: every key as the mean over the single-seed reports, with its deviation.

    A number is averaged (None when any report has None there); an integer all reports share (``knn_k``)
    stays that integer; other values are the first report's.

    Args:
        reports: the single-seed reports, at least two, of the same keys.

    Returns:
        The mean report, with ``<key>_std`` beside each numeric key: the sample standard deviation (ddof 1)
        over the seeds (for a dict of numbers, a dict of their deviations).
    """
    out = _mean_tree(reports)
    for key, value in list(out.items()):
        if _number(value) or isinstance(value, dict):
            out[f"{key}_std"] = _std_tree([r[key] for r in reports])
    return out


def write(workdir: str, report: dict[str, Any]) -> str:
    """WORKDIR/report.json: the report and the code version it was made with (:func:`code_version`).

    Args:
        workdir: the run directory.
        report: the report (JSON-serialisable after :func:`train.helpers.files.json_safe`).

    Returns:
        The path of the report.json written.
    """
    path = os.path.join(workdir, "report.json")
    files.write_json(path, {**report, "code_version": code_version()})
    return path
