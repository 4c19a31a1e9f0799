"""Forward + backward time of geojax losses vs pytorch-metric-learning, and memory of the blocked form.

    python -m benchmarks.losses            # N = 1024 and 4096, D = 128; blocked memory at N = 16384
    python -m benchmarks.losses --quick    # small sizes, seconds
    python -m benchmarks.losses --full     # also run PML where it needs GBs (NTXent, triplets at N=4096)
    python -m benchmarks.losses --check    # rerun losses.json's command; exit 1 if a ratio fell below 0.7×

A full run writes its figures (the two tables, sizes and repeats, the machine) to
``benchmarks/results/losses.json``; ``--quick`` writes only where ``--out FOLDER`` says.

Both sides compute the same loss on the same inputs: cosine similarity, SupCon (τ = 0.1, 8 samples per
class), InfoNCE / NT-Xent (τ = 0.1, two views per image: SimCLR labels) and the triplet margin loss (m = 0.2,
all triplets, mean over non-zero terms). The values are checked against each other before timing. Times
are medians of --repeats rounds that time geojax and PML in turn (after a warm-up call each), so that load
from other processes falls on both alike; geojax is jitted (jax picks the device), torch runs on CPU with as
many threads as there are cores.
"""

from __future__ import annotations

import argparse
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from geojax import losses
from geojax.similarity import cosine
from train.helpers import results
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.timing import Call, interleaved

D = 128
PER_CLASS = 8


def labels_for(name: str, n: int) -> np.ndarray:
    """SimCLR labels (two views per image) for InfoNCE, 8 samples per class otherwise."""
    return (np.arange(n) // 2 if name == "info_nce" else np.arange(n) % (n // PER_CLASS)).astype(np.int32)


# ----------------------------------------------------------------------------------------------------------
# geojax side


GEOJAX = {
    "supcon": partial(losses.supcon, temperature=0.1),
    "info_nce": partial(losses.info_nce, temperature=0.1),
    "triplet": partial(losses.triplet, margin=0.2, mining="all"),
}


def geojax_step(name: str, labels: np.ndarray):
    loss = GEOJAX[name]
    y = jnp.asarray(labels)
    return jax.jit(jax.value_and_grad(lambda x: loss(cosine(x, x), y)))


# ----------------------------------------------------------------------------------------------------------
# pytorch-metric-learning side


def pml_loss(name: str):
    from pytorch_metric_learning import distances
    from pytorch_metric_learning import losses as pml

    cos = distances.CosineSimilarity()
    if name == "supcon":
        return pml.SupConLoss(temperature=0.1, distance=cos)
    if name == "info_nce":
        return pml.NTXentLoss(temperature=0.1, distance=cos)
    return pml.TripletMarginLoss(margin=0.2, distance=cos, triplets_per_anchor="all")


def pml_bytes(name: str, labels: np.ndarray) -> float:
    """Rough peak memory of PML's implementation (what it materialises), to skip runs that cannot fit."""
    n = len(labels)
    counts = np.bincount(labels)
    pos_pairs = float(np.sum(counts * (counts - 1)))
    neg_pairs = float(n) * n - np.sum(counts.astype(float) ** 2)
    if name == "supcon":
        return 8.0 * 4 * n * n  # a handful of [N, N] fp32 matrices
    if name == "info_nce":
        return 4.0 * 4 * pos_pairs * neg_pairs  # [pos pairs, neg pairs] fp32 tensors (17 GB RSS at N=1024)
    triplets = float(np.sum(counts * (counts - 1) * (n - counts)))
    return 6.0 * 8 * triplets  # int64 index triples and per-triplet values


def available_bytes() -> float:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return float(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError):
        return 8e9


def pml_step(name: str, x: np.ndarray, labels: np.ndarray):
    import torch

    loss_fn = pml_loss(name)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.tensor(labels.astype(np.int64))

    def step():
        xt.grad = None
        loss = loss_fn(xt, yt)
        loss.backward()
        return float(loss.detach())

    return step


# ----------------------------------------------------------------------------------------------------------


def time_losses(sizes, args) -> list[dict]:
    """One row per (N, loss): geojax's and PML's fwd+bwd :class:`Timing` (None when PML did not run), timed
    in alternating rounds after one warm-up call each, and a note (the values' agreement, or why PML did not
    run; ``pml_need_gb`` its estimated memory then)."""
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        x = rng.normal(size=(n, D)).astype(np.float32)
        xj = jnp.asarray(x)
        for name in GEOJAX:
            labels = labels_for(name, n)
            step = geojax_step(name, labels)
            value = float(step(xj)[0])  # also the warm-up
            row = {"loss": name, "N": n, "pml": None, "pml_need_gb": None}
            rows.append(row)
            peer = pml_value = None
            need = pml_bytes(name, labels)
            heavy = name != "supcon" and n >= 4096
            if not args.peer:
                row["note"] = "PML not installed"
            elif need > 0.7 * available_bytes():
                row.update(pml_need_gb=need / 1e9, note=f"PML skipped: needs ~{need / 1e9:.0f} GB")
            elif heavy and not args.full:
                row.update(pml_need_gb=need / 1e9, note=f"PML skipped (~{need / 1e9:.1f} GB, slow): --full")
            else:
                try:
                    peer = pml_step(name, x, labels)
                    pml_value = peer()  # also the warm-up
                except (RuntimeError, MemoryError) as err:  # torch reports OOM as RuntimeError
                    row["note"] = f"PML failed: {str(err).splitlines()[0][:60]}"
                    peer = None
            calls = {"geojax": Call(step, (xj,))}
            if peer is not None:
                calls["pml"] = Call(peer)
            times = interleaved(calls, rounds=args.repeats, warmup=0)
            row["geojax"] = times["geojax"]
            if peer is not None:
                rel = abs(value - pml_value) / max(abs(pml_value), 1e-12)
                row.update(
                    pml=times["pml"], note=f"geojax {value:.6f} vs PML {pml_value:.6f} (rel {rel:.1e})"
                )
                print(f"  checked {name} N={n}: {row['note']}", flush=True)
    return rows


def blocked_memory(n: int, block: int) -> list[tuple]:
    """Compiled temporary bytes of fwd+bwd: blocked SupCon vs the plain form (nothing is run)."""
    x = jax.ShapeDtypeStruct((n, D), jnp.float32)
    y = jnp.asarray(labels_for("supcon", n))
    out = []
    for name, fn in (
        ("supcon (plain)", lambda e: losses.supcon(cosine(e, e), y)),
        (f"supcon_blocked (block {block})", lambda e: losses.supcon_blocked(e, y, block_size=block)),
    ):
        stats = jax.jit(jax.value_and_grad(fn)).lower(x).compile().memory_analysis()
        out.append((name, None if stats is None else stats.temp_size_in_bytes))
    return out


def timing_figures(rows: list[dict]) -> list[dict]:
    """The timing rows as printed and stored: median wall and CPU (all threads) milliseconds, PML's over
    geojax's."""
    figures = []
    for r in rows:
        geo, pml = r["geojax"], r["pml"]
        figures.append(
            {
                "loss": r["loss"],
                "N": r["N"],
                "geojax_ms": 1e3 * geo.median,
                "geojax_cpu_ms": 1e3 * geo.cpu_median,
                "pml_ms": None if pml is None else 1e3 * pml.median,
                "pml_cpu_ms": None if pml is None else 1e3 * pml.cpu_median,
                "pml_over_geojax": None if pml is None else pml.median / geo.median,
                "pml_over_geojax_cpu": None if pml is None else pml.cpu_median / geo.cpu_median,
                "pml_need_gb": r["pml_need_gb"],
                "note": r["note"],
            }
        )
    return figures


def ratios(figures: dict) -> dict[str, float | None]:
    """Each timing row's PML / geojax time ratio (None where PML did not run), by loss and N."""
    return {f"{r['loss']} N={r['N']}": r["pml_over_geojax"] for r in figures["timing"]}


def main(argv: list[str] | None = None) -> None:
    machine = machine_info()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--full", action="store_true", help="run PML even where it needs many GB / minutes")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--check",
        action="store_true",
        help="rerun the command losses.json records and exit 1 naming each row whose PML/geojax ratio fell "
        "below 0.7× the stored one; writes nothing (--out: where the stored file is)",
    )
    add_out_argument(parser)
    args = parser.parse_args(argv)
    stored = None
    if args.check:
        args, stored = results.check_args(parser, "losses", args.out)
    folder = None if stored is not None else destination(args.out, quick=args.quick)

    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()})")
    try:
        import pytorch_metric_learning
        import torch
    except ImportError as err:
        args.peer = False
        print(f"peer not available ({err}): timing geojax only")
    else:
        args.peer = True
        torch.set_num_threads(os.cpu_count() or 1)
        print(f"torch {torch.__version__} on CPU, {torch.get_num_threads()} threads; "
              f"pytorch-metric-learning {pytorch_metric_learning.__version__}")  # fmt: skip
    sizes = (128, 256) if args.quick else (1024, 4096)
    mem_n = 4096 if args.quick else 16384
    if args.quick:
        args.repeats = min(args.repeats, 3)

    timing = timing_figures(time_losses(sizes, args))
    print(f"\nfwd+bwd, D={D}, medians of {args.repeats} alternating rounds (ms; CPU ms: all threads)")
    cells = [
        [r["loss"], r["N"], f"{r['geojax_ms']:.2f}", f"{r['geojax_cpu_ms']:.2f}"]
        + [r[k] and f"{r[k]:.1f}" for k in ("pml_ms", "pml_cpu_ms")]
        + [r[k] and f"{r[k]:.1f}×" for k in ("pml_over_geojax", "pml_over_geojax_cpu")]
        + [r["note"]]
        for r in timing
    ]
    header = ["loss", "N", "geojax ms", "geojax CPU ms", "PML ms", "PML CPU ms", "PML/geojax", "CPU ratio"]
    print(markdown_table([*header, "note"], cells, align="lrrrrrrrl"))

    block = 512
    print(f"\npeak temporary memory of jitted fwd+bwd, N={mem_n}, D={D} (compiled memory_analysis)")
    memory = [
        {"form": name, "temporary_mib": None if temp is None else temp / 2**20}
        for name, temp in blocked_memory(mem_n, block)
    ]
    cells = [[m["form"], m["temporary_mib"] and f"{m['temporary_mib']:,.1f}"] for m in memory]
    print(markdown_table(["fwd+bwd", "temporary MiB"], cells, align="lr"))
    matrix_mib = mem_n * mem_n * 4 / 2**20
    print(f"(one [N, N] fp32 matrix = {matrix_mib:,.0f} MiB)")
    if stored is not None:
        results.exit_on_check("losses", ratios(stored["figures"]), ratios({"timing": timing}))
    if folder is not None:
        figures = {
            "D": D,
            "per_class": PER_CLASS,
            "repeats": args.repeats,
            "timing": timing,
            "memory": {"N": mem_n, "block": block, "forms": memory, "nn_matrix_mib": matrix_mib},
        }
        command = invocation("benchmarks.losses", argv)
        print(f"wrote {write_result('losses', figures, argv=command, machine=machine, folder=folder)}")


if __name__ == "__main__":
    main()
