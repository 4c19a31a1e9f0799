"""TT encoding (Hong, Meng & Yuan 2018, §3, eq. 4) vs a dense projection: packed sign bits of R x for a batch.

    python -m benchmarks.binary [--quick] [--rounds 15] [--batch 1000] [--rank 4] [--block B]

Full size: 4096-d → 4096 bits (6 cores of 4×4) and 4096-d → 1024 bits (output
modes 2×4×4×4×4×2, the paper's Table 1 shape), TT-rank 4 (the rank of the paper's Table 2), batch
1,000, float32. Peer: the same matrix dense, ``x @ R.T`` in jnp. Every variant is jitted and computes
the full encode (projection, sign, little-endian packing); after two warm-up calls each, the variants
are timed in interleaved rounds (one call of each per round, so load on a shared machine falls on all
alike) and the medians over rounds are reported, wall clock and process CPU seconds (on a loaded machine
the longer dense call is preempted more, so its wall-clock ratio overstates the speed-up; the CPU-seconds
ratio does not). TT variants, all exact regroupings of the same matrix: core by core (``tt.matvec``),
the same in slabs of rows (``block=``, ``tt.map_rows``), cores merged into two halves (the Kronecker-sum
form), into pairs, and as ``tt.plan`` chooses; ``binary.encode`` (``tt.plan``'s grouping, each slab
centred, projected, signed and packed before the next); on a GPU the fused Pallas kernel
(``tt.matvec_fused``).

A full run writes both tables (per variant: ms, CPU ms, speed-ups, parameters, agreement), the sizes and
the rounds with the machine to ``benchmarks/results/binary.json``; ``--quick`` writes only with ``--out``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from geojax import binary, tt
from geojax.quantize import pack_bits
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.timing import Call, interleaved


@jax.jit
def dense_encode(r: jax.Array, x: jax.Array) -> jax.Array:
    """Peer: sign bits of x @ Rᵀ with the dense R [b, d]."""
    return pack_bits(x @ r.T >= 0)


def tt_encoder(groups, block: int | None):
    """Jitted TT encode: sign bits of ``tt.matvec`` on ``tt.merge_cores(m, groups)`` (None: as stored)."""

    def encode(m: tt.TTMatrix, x: jax.Array) -> jax.Array:
        merged = m if groups is None else tt.merge_cores(m, groups)
        return pack_bits(tt.matvec(merged, x, block=block) >= 0)

    return jax.jit(encode)


@jax.jit
def model_encode(model: binary.TP, x: jax.Array) -> jax.Array:
    """``binary.encode`` of a TP model (zero mean, so its codes are those of R x)."""
    return binary.encode(model, x)


@jax.jit
def fused_encode(m: tt.TTMatrix, x: jax.Array) -> jax.Array:
    """Sign bits of the fused Pallas TT product (GPU)."""
    return pack_bits(tt.matvec_fused(m, x) >= 0)


def run_case(out_modes, in_modes, *, rank: int, batch: int, rounds: int, block: int | None) -> list[dict]:
    key_m, key_x = jax.random.split(jax.random.key(0))
    m = tt.init(key_m, out_modes, in_modes, rank)
    r = tt.to_dense(m)
    x = jax.random.normal(key_x, (batch, m.shape[1]))
    plan = tt.plan(m)
    block = block or plan.block
    t = len(m.cores)
    halves = (t // 2, t - t // 2)
    pairs = (2,) * (t // 2) + (1,) * (t % 2)
    model = binary.TP(jnp.zeros(m.shape[1]), m, jnp.zeros(0))
    merged_params = tt.num_params(tt.merge_cores(m, plan.groups))
    variants = {
        "dense x @ R.T": (dense_encode, (r, x), int(r.size)),
        f"TT {t} cores, whole batch": (tt_encoder(None, None), (m, x), tt.num_params(m)),
        f"TT {t} cores, block {block}": (tt_encoder(None, block), (m, x), tt.num_params(m)),
    }
    for name, groups in [("halves", halves), ("pairs", pairs), ("tt.plan", plan.groups)]:
        params = tt.num_params(tt.merge_cores(m, groups))
        variants[f"TT {name} {groups}, block {block}"] = (tt_encoder(groups, block), (m, x), params)
    variants[f"binary.encode (tt.plan {plan.groups}, block {plan.block})"] = (
        model_encode,
        (model, x),
        merged_params,
    )
    reference = np.unpackbits(np.asarray(dense_encode(r, x)), axis=1)
    times = interleaved({name: Call(*v[:2]) for name, v in variants.items()}, rounds=rounds, warmup=2)
    rows = []
    for name, (fn, args, params) in variants.items():
        bits = np.unpackbits(np.asarray(fn(*args)), axis=1)
        wall, cpu = times[name].median, times[name].cpu_median
        rows.append(
            {
                "variant": name,
                "seconds": wall,
                "cpu": cpu,
                "params": params,
                "agree": np.mean(bits == reference),
            }
        )
    return rows


def main(argv=None) -> None:
    machine = machine_info()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="256-d, batch 100: a few seconds")
    parser.add_argument("--rounds", "--repeats", type=int, default=None, help="interleaved timing rounds")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--block", type=int, default=None, help="rows per slab (default: tt.plan's)")
    add_out_argument(parser)
    args = parser.parse_args(argv)
    folder = destination(args.out, quick=args.quick)
    batch = args.batch or (100 if args.quick else 1000)
    rounds = args.rounds or (5 if args.quick else 15)
    if args.quick:
        cases = [((4, 4, 4, 4), (4, 4, 4, 4)), ((2, 4, 4, 2), (4, 4, 4, 4))]
    else:
        cases = [((4,) * 6, (4,) * 6), ((2, 4, 4, 4, 4, 2), (4,) * 6)]
    device = jax.devices()[0]
    print(f"device: {device.platform} {device.device_kind} × {jax.device_count()}, jax {jax.__version__}")
    results = []
    for out_modes, in_modes in cases:
        rows = run_case(out_modes, in_modes, rank=args.rank, batch=batch, rounds=rounds, block=args.block)
        b, d = int(np.prod(out_modes)), int(np.prod(in_modes))
        dense_s, dense_cpu = rows[0]["seconds"], rows[0]["cpu"]
        variants = [
            {
                "variant": row["variant"],
                "ms": 1e3 * row["seconds"],
                "speedup": dense_s / row["seconds"],
                "cpu_ms": 1e3 * row["cpu"],
                "cpu_speedup": dense_cpu / row["cpu"],
                "params": row["params"],
                "bits_equal": row["agree"],
            }
            for row in rows
        ]
        shape = {"d": d, "bits": b, "out_modes": out_modes, "in_modes": in_modes}
        results.append({**shape, "batch": batch, "rank": args.rank, "variants": variants})
        print(
            f"\n{d}-d → {b} bits, batch {batch}, TT-rank {args.rank}, output modes "
            f"{'×'.join(map(str, out_modes))}, input modes {'×'.join(map(str, in_modes))}, "
            f"medians of {rounds} interleaved rounds"
        )
        cells = [
            [
                v["variant"],
                f"{v['ms']:.2f}",
                f"{v['speedup']:.2f}×",
                f"{v['cpu_ms']:.2f}",
                f"{v['cpu_speedup']:.2f}×",
                f"{v['params']:,}",
                f"{v['bits_equal']:.5f}",
            ]
            for v in variants
        ]
        header = [
            "variant",
            "ms",
            "speed-up vs dense",
            "CPU ms",
            "CPU speed-up",
            "parameters",
            "bits equal to dense",
        ]
        print(markdown_table(header, cells, align="lrrrrrr"))
    if folder is not None:
        figures = {"rounds": rounds, "cases": results}
        command = invocation("benchmarks.binary", argv)
        print(f"wrote {write_result('binary', figures, argv=command, machine=machine, folder=folder)}")


if __name__ == "__main__":
    main()
