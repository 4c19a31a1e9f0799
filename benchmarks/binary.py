"""TT encoding (seed 002 §3.3) vs a dense projection: packed sign bits of R x for a batch of vectors.

    python benchmarks/binary.py [--quick] [--repeats 20] [--batch 1000]

Full size (the issue's target): 4096-d → 4096 bits (6 cores of 4×4, rank 4) and 4096-d → 1024 bits
(output modes 2×4×4×4×4×2), batch 1,000. Peer: the same matrix dense, ``x @ R.T`` in jnp. Every variant
is jitted, timed as the median of ``--repeats`` calls after two warm-up calls, and computes the full
encode (projection, sign, little-endian packing). TT variants: core by core (``tt.matvec``), the same
in row blocks (cache blocking, ``block=``), with adjacent cores merged (``tt.merge_cores``), and on a
GPU the fused Pallas kernel (``tt.matvec_fused``).
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

from geojax import tt
from geojax.quantize import pack_bits
from train.tables import markdown_table
from train.timing import measure


@jax.jit
def dense_encode(r: jax.Array, x: jax.Array) -> jax.Array:
    """Peer: sign bits of x @ Rᵀ with the dense R [b, d]."""
    return pack_bits(x @ r.T >= 0)


def tt_encoder(block: int | None):
    """Jitted TT encode: sign bits of ``tt.matvec(m, x, block=block)``."""
    return jax.jit(lambda m, x: pack_bits(tt.matvec(m, x, block=block) >= 0))


@jax.jit
def fused_encode(m: tt.TTMatrix, x: jax.Array) -> jax.Array:
    """Sign bits of the fused Pallas TT product (GPU)."""
    return pack_bits(tt.matvec_fused(m, x) >= 0)


def run_case(out_modes, in_modes, *, rank: int, batch: int, repeats: int, blocks, group: int) -> list[dict]:
    key_m, key_x = jax.random.split(jax.random.key(0))
    m = tt.init(key_m, out_modes, in_modes, rank)
    r = tt.to_dense(m)
    x = jax.random.normal(key_x, (batch, m.shape[1]))
    reference = np.unpackbits(np.asarray(dense_encode(r, x)), axis=1)
    dense_s = measure(dense_encode, r, x, repeats=repeats, warmup=2).median
    rows = [{"variant": "dense x @ R.T", "seconds": dense_s, "params": int(r.size), "agree": 1.0}]
    merged = tt.merge_cores(m, group)
    variants = [(f"TT {len(m.cores)} cores", m, None)]
    variants += [(f"TT {len(m.cores)} cores, block {b}", m, b) for b in blocks]
    variants += [(f"TT merged to {len(merged.cores)} cores", merged, None)]
    variants += [(f"TT merged to {len(merged.cores)} cores, block {b}", merged, b) for b in blocks]
    if jax.default_backend() == "gpu":
        variants += [("TT fused kernel (tt.matvec_fused)", m, "fused")]
    for name, model, block in variants:
        encode = fused_encode if block == "fused" else tt_encoder(block)
        bits = np.unpackbits(np.asarray(encode(model, x)), axis=1)
        seconds = measure(encode, model, x, repeats=repeats, warmup=2).median
        rows.append(
            {
                "variant": name,
                "seconds": seconds,
                "params": tt.num_params(model),
                "agree": float(np.mean(bits == reference)),
            }
        )
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256-d, batch 100: a few seconds")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--blocks", default="16,64", help="row blocks to try, comma-separated ('' for none)")
    parser.add_argument("--group", type=int, default=3, help="cores merged per group")
    args = parser.parse_args(argv)
    batch = args.batch or (100 if args.quick else 1000)
    repeats = args.repeats or (5 if args.quick else 20)
    blocks = [int(b) for b in args.blocks.split(",") if b]
    if args.quick:
        cases = [((4, 4, 4, 4), (4, 4, 4, 4)), ((2, 4, 4, 2), (4, 4, 4, 4))]
    else:
        cases = [((4,) * 6, (4,) * 6), ((2, 4, 4, 4, 4, 2), (4,) * 6)]
    device = jax.devices()[0]
    print(f"device: {device.platform} {device.device_kind} × {jax.device_count()}, jax {jax.__version__}")
    for out_modes, in_modes in cases:
        rows = run_case(
            out_modes, in_modes, rank=args.rank, batch=batch, repeats=repeats, blocks=blocks, group=args.group
        )
        b, d = int(np.prod(out_modes)), int(np.prod(in_modes))
        print(
            f"\n{d}-d → {b} bits, batch {batch}, rank {args.rank}, output modes "
            f"{'×'.join(map(str, out_modes))}, input modes {'×'.join(map(str, in_modes))}, "
            f"median of {repeats}"
        )
        dense_s = rows[0]["seconds"]
        cells = [
            [
                row["variant"],
                f"{1e3 * row['seconds']:.3f}",
                f"{dense_s / row['seconds']:.2f}×",
                f"{row['params']:,}",
                f"{row['agree']:.5f}",
            ]
            for row in rows
        ]
        header = ["variant", "ms", "speed-up vs dense", "parameters", "bits equal to dense"]
        print(markdown_table(header, cells, align="lrrrr"))


if __name__ == "__main__":
    main()
