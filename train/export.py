"""Integer-only search export of a trained torus run: packed reference codes, labels and the encoder.

    python -m train.export RUNDIR --out DIR [--bits B] [--batch N]

Stowell 2026 (§4) points out that integers with overflow are a torus, "an extremely simple pathway to
efficient TinyML embedded implementation". This writes what such a device needs, and nothing of the
training code:

- DIR/codes.gjt: the training split's packed b-bit codes (``quantize.torus_codes`` of the flat angles of
  the run's embeddings) and their int32 labels, behind a small header (:func:`write_codes`; the format is
  read by ``train/csearch/reader.py`` with numpy alone and by ``train/csearch/geojax_torus.h`` in C99).
- DIR/encoder.jaxexport: the evaluation-mode encoder with its trained weights (the EMA weights when the run
  keeps them) serialised by ``jax.export``, images [n, H, W, C] float32 in [0, 1] → (embedding [n, D']
  float32, packed codes [n, D·b/8] uint8), n symbolic. :func:`load_encoder` gives it back as a jitted
  function; jax and jaxlib are all it needs.
- DIR/manifest.json: bits, angles, image shape, geometry, the run directory and which weights were used.

``bits`` defaults to the run's ``qat_bits`` when its config has one (a model trained through that grid),
else 8. In Python, :func:`run_encoder` gives the same jitted function straight from a run directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from geojax import geometries, manifolds, quantize
from train.app import config, loop
from train.app.errors import UsageError
from train.csearch import reader
from train.helpers import files

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

ENCODER_FILE = "encoder.jaxexport"
CODES_FILE = "codes.gjt"
MANIFEST_FILE = "manifest.json"


def write_codes(
    path: str,
    codes: np.ndarray,
    labels: np.ndarray,
    *,
    bits: int,
    dim: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write packed codes [N, D·b/8] uint8 and labels [N] (int32) to ``path`` atomically (the layout of
    :mod:`train.csearch.reader`); returns the JSON header."""
    blob, header = reader.pack_codes(codes, labels, bits=bits, dim=dim, extra=extra)
    files.write_bytes(path, blob)
    return header


# images [n, H, W, C] float32 in [0, 1] → (embedding [n, D'] float32, packed codes [n, D·b/8] uint8)
Encoder = Callable[[jax.Array], tuple[jax.Array, jax.Array]]


def load_run(rundir: str) -> loop.TrainResult:
    """(workdir, config, graphdef, state, dataset, timing) of a finished run, without training."""
    path = os.path.join(rundir, "config.json")
    if not os.path.exists(path):
        raise ValueError(f"RUNDIR must hold config.json, not found: {path}")
    with open(path) as f:
        saved = json.load(f)
    cfg = config.from_saved({**saved, "workdir": rundir, "progress": False})
    if cfg.seeds > 1:
        raise UsageError(f"{rundir} holds {cfg.seeds} seeds in one run; export takes a single-seed run")
    return loop.train(cfg)


def _encoder(run: loop.TrainResult, bits: int) -> Encoder:
    """images → (embedding, packed b-bit codes) with the run's evaluation-mode weights (EMA when kept)."""
    if not geometries.get(run.config.geometry).is_torus:
        raise ValueError(f"the run's geometry must be torus_c or torus_n, got {run.config.geometry!r}")
    # Host copies: the weights become constants of one computation, free of the training mesh's sharding.
    state = jax.tree.map(np.asarray, run.state)
    model = nnx.merge(run.graphdef, state.get("ema", state["params"]), state["rest"])
    model.eval()

    def encode(images: jax.Array) -> tuple[jax.Array, jax.Array]:
        z = model(images.astype(jnp.float32)).embedding.astype(jnp.float32)
        codes = quantize.torus_codes(manifolds.clifford_to_angles(z), bits)
        return z, codes

    return encode


def run_encoder(rundir: str, *, bits: int | None = None) -> Encoder:
    """Jitted images [n, H, W, C] float32 in [0, 1] → (embedding, packed codes) of a run directory."""
    run = load_run(rundir)
    return jax.jit(_encoder(run, _bits(run.config, bits)))


def _bits(cfg: RunConfig, bits: int | None) -> int:
    chosen = getattr(cfg, "qat_bits", None) if bits is None else bits
    return 8 if chosen is None else int(chosen)


def load_encoder(outdir: str) -> Encoder:
    """The exported encoder of ``outdir`` as a jitted function (``jax.export.deserialize``)."""
    with open(os.path.join(outdir, ENCODER_FILE), "rb") as f:
        exported = jax.export.deserialize(bytearray(f.read()))
    return jax.jit(exported.call)


def export(rundir: str, outdir: str, *, bits: int | None = None, batch: int = 1024) -> dict[str, Any]:
    """Write codes.gjt, encoder.jaxexport and manifest.json of ``rundir`` to ``outdir``; the manifest."""
    run = load_run(rundir)
    bits = _bits(run.config, bits)
    encode = _encoder(run, bits)
    ds = run.dataset
    n = jax.export.symbolic_shape("n")[0]
    spec = jax.ShapeDtypeStruct((n, *ds.image_shape), jnp.float32)
    exported = jax.export.export(jax.jit(encode))(spec)
    fn = jax.jit(encode)
    parts = []
    for start in range(0, len(ds.train_x), batch):
        x = np.asarray(ds.train_x[start : start + batch], np.float32)
        parts.append(np.asarray(fn(x)[1]))
    codes = np.concatenate(parts)
    dim = codes.shape[1] * 8 // bits
    os.makedirs(outdir, exist_ok=True)
    write_codes(
        os.path.join(outdir, CODES_FILE),
        codes,
        np.asarray(ds.train_y, np.int32),
        bits=bits,
        dim=dim,
        extra={"geometry": run.config.geometry, "split": "train"},
    )
    files.write_bytes(os.path.join(outdir, ENCODER_FILE), bytes(exported.serialize()))
    manifest = {
        "bits": bits,
        "angles": dim,
        "image_shape": list(ds.image_shape),
        "input": "float32 images [n, H, W, C] in [0, 1]",
        "outputs": ["embedding float32 [n, D']", f"codes uint8 [n, {codes.shape[1]}]"],
        "geometry": run.config.geometry,
        "weights": "ema" if "ema" in run.state else "params",
        "rundir": os.path.abspath(rundir),
        "count": int(len(codes)),
        "files": [CODES_FILE, ENCODER_FILE],
    }
    files.write_json(os.path.join(outdir, MANIFEST_FILE), manifest, indent=2)
    return manifest


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m train.export", description=__doc__.split("\n\n")[0])
    ap.add_argument("rundir", metavar="RUNDIR")
    ap.add_argument("--out", required=True, metavar="DIR")
    ap.add_argument("--bits", type=int, choices=quantize.TORUS_BITS, default=None)
    ap.add_argument("--batch", type=int, default=1024, help="images per forward pass when encoding")
    args = ap.parse_args(argv)
    manifest = export(args.rundir, args.out, bits=args.bits, batch=args.batch)
    print(json.dumps(manifest, indent=2))
    return manifest


if __name__ == "__main__":
    main(sys.argv[1:])
