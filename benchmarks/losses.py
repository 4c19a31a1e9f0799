"""Forward + backward time of geojax losses vs pytorch-metric-learning and vs a plain jnp form of the same
formula, and memory of the blocked form.

    python -m benchmarks.losses            # N = 1024 and 4096, D = 128; blocked memory at N = 16384
    python -m benchmarks.losses --quick    # small sizes, seconds
    python -m benchmarks.losses --full     # also run PML where it needs GBs (NTXent, triplets at N=4096)
    python -m benchmarks.losses --check    # rerun losses.json's command; exit 1 if a ratio fell below 0.7×
    python -m benchmarks.losses --gpu      # on an accelerator: N = 4096 and 16384, PML on CUDA
    python -m benchmarks.losses --malloc keep  # both sides with glibc keeping freed memory (no page faults)

A full run writes its figures (the two tables, sizes and repeats, the machine) to
``benchmarks/results/losses.json`` (``losses_gpu.json`` with ``--gpu``; ``_malloc_keep`` added to the name
with ``--malloc keep``); ``--quick`` writes only where ``--out FOLDER`` says. ``--gpu`` times the same rows
where the GPU earns its keep (N = 4096 and 16384, the blocked memory at N = 65536), PML on torch's CUDA
device; where torch sees no GPU it runs the same on the CPU, as a dry run that says so. ``--malloc keep``
sets glibc's malloc, for both sides, to serve every allocation below 1 GiB from one heap for all threads
and never to trim it (:mod:`train.helpers.allocator`): by default each temporary above glibc's mmap
threshold is mapped anew and faulted in page by page at every call.

Both sides compute the same loss on the same inputs: cosine similarity, SupCon (τ = 0.1, 8 samples per class),
InfoNCE / NT-Xent (τ = 0.1, two views per image: SimCLR labels), the triplet margin loss (m = 0.2, all
triplets, mean over non-zero terms), MultiSimilarity (α = 2, β = 50, λ = 0.5) and Circle (m = 0.4, γ = 80), 8
samples per class; ProxyAnchor (δ = 0.1, α = 32) against C = 100 and 1,000 proxies and ArcFace (PML's default
margin 28.6° and scale 64) against 1,000 class weights, gradients w.r.t. the embeddings and the proxies; the
SigLIP sigmoid loss (t = 10, b = −10), which PML does not have. The floor of a loss is a plain jnp form of its
formula on the same cosine matrix (no checks, no masks beyond the labels', no stop-gradient maxima, no NaN
guard, no device axis): geojax/floor says what geojax's generality costs. The similarity column times the
cosine matrix's forward and backward alone (a fixed random cotangent, no loss): no loss on that similarity can
run faster in JAX here, so PML/similarity is the largest PML/geojax ratio within reach of any implementation.
The values are checked against each other before timing. Times are medians of --repeats rounds that time
geojax, its floor, the similarity alone and PML in turn (after a warm-up call each), so that load from other
processes falls on all alike; each sample follows SETTLE_S seconds of untimed calls of the same contender, so
that none is timed in the wake of another (torch's OpenMP workers spin on after each call, and on a 2-core
machine that takes a core from the next JAX call). geojax is jitted (jax picks the device), torch runs on CPU
with as many threads as there are cores (on its CUDA device with ``--gpu``).
"""

from __future__ import annotations

import argparse
import math
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from geojax import losses
from geojax.similarity import cosine
from train.helpers import allocator, results
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.timing import Call, interleaved

D = 128
PER_CLASS = 8
# The proxy losses' rows: the number of class proxies (the similarity is [N, C] to them).
CLASSES = {"proxy_anchor C=100": 100, "proxy_anchor C=1000": 1000, "arcface C=1000": 1000}
ARC_MARGIN_DEGREES = 28.6  # pytorch-metric-learning's default ArcFace margin
ARC_MARGIN = math.radians(ARC_MARGIN_DEGREES)
NO_PML = ("sigmoid",)  # PML has no such loss: its row compares with the floor alone
SETTLE_S = 0.05  # untimed calls of a contender before each of its samples (timing.interleaved)
# (N of the timed rows, N of the memory table) by (--gpu, --quick)
SIZES = {
    (False, False): ((1024, 4096), 16384),
    (False, True): ((128, 256), 4096),
    (True, False): ((4096, 16384), 65536),
    (True, True): ((128, 256), 16384),
}


def labels_for(name: str, n: int) -> np.ndarray:
    """SimCLR labels (two views per image) for InfoNCE, every class once before any twice for the proxy
    losses, 8 samples per class otherwise."""
    if name == "info_nce":
        return (np.arange(n) // 2).astype(np.int32)
    return (np.arange(n) % CLASSES.get(name, n // PER_CLASS)).astype(np.int32)


# ----------------------------------------------------------------------------------------------------------
# geojax side, and the floors: the same formulas in plain jnp


GEOJAX = {
    "supcon": partial(losses.supcon, temperature=0.1),
    "info_nce": partial(losses.info_nce, temperature=0.1),
    "triplet": partial(losses.triplet, margin=0.2, mining="all"),
    "proxy_anchor C=100": partial(losses.proxy_anchor, margin=0.1, alpha=32.0),
    "proxy_anchor C=1000": partial(losses.proxy_anchor, margin=0.1, alpha=32.0),
    "multi_similarity": partial(losses.multi_similarity, alpha=2.0, beta=50.0, base=0.5),
    "circle": partial(losses.circle, margin=0.4, gamma=80.0),
    "arcface C=1000": partial(losses.arcface, margin=ARC_MARGIN, scale=64.0),
    "sigmoid": partial(losses.sigmoid, scale=10.0, bias=-10.0),
}


def _pairs(sim, y):
    """(positive, negative) masks of a square batch: same label but not the diagonal, other label."""
    same = y[:, None] == y[None, :]
    return same & ~jnp.eye(sim.shape[0], dtype=bool), ~same


def plain_supcon(sim, y, temperature=0.1):
    x = sim / temperature
    pos, _ = _pairs(sim, y)
    lse = jax.nn.logsumexp(jnp.where(jnp.eye(sim.shape[0], dtype=bool), -jnp.inf, x), axis=1)
    return jnp.mean(jnp.sum(jnp.where(pos, lse[:, None] - x, 0.0), axis=1) / jnp.sum(pos, axis=1))


def plain_proxy_anchor(sim, y, margin=0.1, alpha=32.0):
    own = y[:, None] == jnp.arange(sim.shape[1])
    pos = jnp.log1p(jnp.sum(jnp.where(own, jnp.exp(-alpha * (sim - margin)), 0.0), axis=0))
    neg = jnp.log1p(jnp.sum(jnp.where(own, 0.0, jnp.exp(alpha * (sim + margin))), axis=0))
    return jnp.sum(pos) / jnp.sum(jnp.any(own, axis=0)) + jnp.mean(neg)


def plain_multi_similarity(sim, y, alpha=2.0, beta=50.0, base=0.5):
    pos, neg = _pairs(sim, y)
    pos_term = jnp.log1p(jnp.sum(jnp.where(pos, jnp.exp(-alpha * (sim - base)), 0.0), axis=1)) / alpha
    neg_term = jnp.log1p(jnp.sum(jnp.where(neg, jnp.exp(beta * (sim - base)), 0.0), axis=1)) / beta
    return jnp.mean(pos_term + neg_term)


def plain_circle(sim, y, m=0.4, gamma=80.0):
    pos, neg = _pairs(sim, y)
    alpha_p = jax.lax.stop_gradient(jax.nn.relu(1 + m - sim))
    alpha_n = jax.lax.stop_gradient(jax.nn.relu(sim + m))
    lp = jax.nn.logsumexp(jnp.where(pos, -gamma * alpha_p * (sim - 1 + m), -jnp.inf), axis=1)
    ln = jax.nn.logsumexp(jnp.where(neg, gamma * alpha_n * (sim - m), -jnp.inf), axis=1)
    return jnp.mean(jax.nn.softplus(lp + ln))  # every anchor has a positive and a negative here


def plain_arcface(sim, y, margin=ARC_MARGIN, scale=64.0):
    rows = jnp.arange(sim.shape[0])
    theta = jnp.arccos(jnp.clip(sim[rows, y], -1 + 1e-7, 1 - 1e-7))
    target = jnp.where(
        theta <= math.pi - margin, jnp.cos(theta + margin), jnp.cos(theta) - margin * math.sin(margin)
    )
    logits = scale * sim.at[rows, y].set(target)
    return -jnp.mean(jax.nn.log_softmax(logits)[rows, y])


def plain_sigmoid(sim, y, scale=10.0, bias=-10.0):
    z = jnp.where(y[:, None] == y[None, :], 1.0, -1.0)
    terms = jax.nn.softplus(-z * (scale * sim + bias))
    return jnp.sum(jnp.where(jnp.eye(sim.shape[0], dtype=bool), 0.0, terms)) / sim.shape[0]


FLOORS = {
    "supcon": plain_supcon,
    "proxy_anchor C=100": plain_proxy_anchor,
    "proxy_anchor C=1000": plain_proxy_anchor,
    "multi_similarity": plain_multi_similarity,
    "circle": plain_circle,
    "arcface C=1000": plain_arcface,
    "sigmoid": plain_sigmoid,
}


def jax_step(loss, labels: np.ndarray, proxies: bool):
    """Jitted value and gradients of ``loss(cosine(x, keys), labels)``; the keys are the proxies (a second
    argument, which gets its gradient too) or the embeddings themselves."""
    y = jnp.asarray(labels)
    if proxies:
        return jax.jit(jax.value_and_grad(lambda x, p: loss(cosine(x, p), y), argnums=(0, 1)))
    return jax.jit(jax.value_and_grad(lambda x: loss(cosine(x, x), y)))


def similarity_step(n: int, keys: int, proxies: bool):
    """Jitted value and gradients of Σ cosine(x, keys) ⊙ W, for a fixed random W [n, keys] (its third
    argument): the similarity's forward and backward alone, the time below which no loss on that similarity
    can go; and W."""
    w = jnp.asarray(np.random.default_rng(0).normal(size=(n, keys)), jnp.float32)
    if proxies:
        return jax.jit(jax.value_and_grad(lambda x, p, w: jnp.sum(cosine(x, p) * w), argnums=(0, 1))), w
    return jax.jit(jax.value_and_grad(lambda x, w: jnp.sum(cosine(x, x) * w))), w


# ----------------------------------------------------------------------------------------------------------
# pytorch-metric-learning side


def pml_loss(name: str):
    """PML's module for the row, with the same values."""
    from pytorch_metric_learning import distances
    from pytorch_metric_learning import losses as pml

    cos = distances.CosineSimilarity()
    modules = {
        "supcon": lambda: pml.SupConLoss(temperature=0.1, distance=cos),
        "info_nce": lambda: pml.NTXentLoss(temperature=0.1, distance=cos),
        "triplet": lambda: pml.TripletMarginLoss(margin=0.2, distance=cos, triplets_per_anchor="all"),
        "multi_similarity": lambda: pml.MultiSimilarityLoss(alpha=2.0, beta=50.0, base=0.5),
        "circle": lambda: pml.CircleLoss(m=0.4, gamma=80.0),
        "arcface C=1000": lambda: pml.ArcFaceLoss(1000, D, margin=ARC_MARGIN_DEGREES, scale=64.0),
    }
    if name.startswith("proxy_anchor"):
        return pml.ProxyAnchorLoss(CLASSES[name], D, margin=0.1, alpha=32.0)
    return modules[name]()


def pml_bytes(name: str, labels: np.ndarray) -> float:
    """Rough peak memory of PML's implementation (what it materialises), to skip runs that cannot fit."""
    n = len(labels)
    counts = np.bincount(labels)
    pos_pairs = float(np.sum(counts * (counts - 1)))
    neg_pairs = float(n) * n - np.sum(counts.astype(float) ** 2)
    if name in CLASSES:
        return 8.0 * 4 * n * CLASSES[name]  # a handful of [N, C] fp32 matrices
    if name in ("supcon", "multi_similarity", "circle", "sigmoid"):
        return 8.0 * 4 * n * n  # a handful of [N, N] fp32 matrices
    if name == "info_nce":
        return 4.0 * 4 * pos_pairs * neg_pairs  # [pos pairs, neg pairs] fp32 tensors (17 GB RSS at N=1024)
    triplets = float(np.sum(counts * (counts - 1) * (n - counts)))
    return 6.0 * 8 * triplets  # int64 index triples and per-triplet values


def available_bytes(device: str = "cpu") -> float:
    """Free memory where PML runs: the CUDA device's, or the host's (8 GB where neither can be read)."""
    if device == "cuda":
        import torch

        return float(torch.cuda.mem_get_info()[0])
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return float(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError):
        return 8e9


def pml_step(name: str, x: np.ndarray, labels: np.ndarray, proxies: np.ndarray | None, device: str = "cpu"):
    """PML's fwd+bwd on the same embeddings (and the same proxies, in its module's parameter), on torch's
    ``device``; each call returns the loss as a float, which waits for the device."""
    import torch

    loss_fn = pml_loss(name).to(device)
    if proxies is not None:
        param = loss_fn.proxies if name.startswith("proxy_anchor") else loss_fn.W  # W is [D, C]
        with torch.no_grad():
            param.copy_(torch.tensor(proxies if name.startswith("proxy_anchor") else proxies.T))
    xt = torch.tensor(x, requires_grad=True, device=device)
    yt = torch.tensor(labels.astype(np.int64), device=device)

    def step():
        xt.grad = None
        loss_fn.zero_grad()
        loss = loss_fn(xt, yt)
        loss.backward()
        return float(loss.detach())

    return step


# ----------------------------------------------------------------------------------------------------------


def _agreement(value: float, other: float) -> float:
    return abs(value - other) / max(abs(other), 1e-12)


def time_losses(sizes, args) -> list[dict]:
    """One row per (N, loss): geojax's, its floor's, PML's and the similarity's alone
    (:func:`similarity_step`) fwd+bwd :class:`Timing` (None when the floor or PML did not run), timed in
    alternating rounds after one warm-up call each, each sample settled (:data:`SETTLE_S`), and a note (the
    values' agreement, or why PML did not run; ``pml_need_gb`` its estimated memory then)."""
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        x = rng.normal(size=(n, D)).astype(np.float32)
        for name in GEOJAX:
            labels = labels_for(name, n)
            proxies = rng.normal(size=(CLASSES[name], D)).astype(np.float32) if name in CLASSES else None
            args_j = (jnp.asarray(x),) if proxies is None else (jnp.asarray(x), jnp.asarray(proxies))
            step = jax_step(GEOJAX[name], labels, proxies is not None)
            value = float(step(*args_j)[0])  # also the warm-up
            calls = {"geojax": Call(step, args_j)}
            bound, w = similarity_step(n, n if proxies is None else len(proxies), proxies is not None)
            jax.block_until_ready(bound(*args_j, w))  # the warm-up
            calls["similarity"] = Call(bound, (*args_j, w))
            row = {"loss": name, "N": n, "pml": None, "floor": None, "pml_need_gb": None}
            rows.append(row)
            floor_value = None
            if name in FLOORS:
                calls["floor"] = Call(jax_step(FLOORS[name], labels, proxies is not None), args_j)
                floor_value = float(calls["floor"].fn(*args_j)[0])  # also the warm-up
            peer = pml_value = None
            need = pml_bytes(name, labels)
            heavy = name in ("info_nce", "triplet") and n >= 4096
            if not args.peer:
                row["note"] = "PML not installed"
            elif name in NO_PML:
                row["note"] = "PML has no such loss"
            elif need > 0.7 * available_bytes(args.torch_device):
                row.update(pml_need_gb=need / 1e9, note=f"PML skipped: needs ~{need / 1e9:.0f} GB")
            elif heavy and not args.full:
                row.update(pml_need_gb=need / 1e9, note=f"PML skipped (~{need / 1e9:.1f} GB, slow): --full")
            else:
                try:
                    peer = pml_step(name, x, labels, proxies, args.torch_device)
                    pml_value = peer()  # also the warm-up
                except (RuntimeError, MemoryError) as err:  # torch reports OOM as RuntimeError
                    row["note"] = f"PML failed: {str(err).splitlines()[0][:60]}"
                    peer = None
            if peer is not None:
                calls["pml"] = Call(peer)
            times = interleaved(calls, rounds=args.repeats, warmup=0, settle_s=SETTLE_S)
            row.update(geojax=times["geojax"], floor=times.get("floor"), similarity=times["similarity"])
            if peer is not None:
                row.update(pml=times["pml"], note=f"geojax {value:.6f} vs PML {pml_value:.6f} "
                           f"(rel {_agreement(value, pml_value):.1e})")  # fmt: skip
            if floor_value is not None:
                versus = "vs floor" if peer is not None else f"geojax {value:.6f} vs floor"
                row["note"] += f"; {versus} {floor_value:.6f} (rel {_agreement(value, floor_value):.1e})"
            if peer is not None or floor_value is not None:
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
    geojax's, and geojax's over its floor's."""
    figures = []
    for r in rows:
        geo, pml, floor = r["geojax"], r["pml"], r["floor"]
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
                "floor_ms": None if floor is None else 1e3 * floor.median,
                "geojax_over_floor": None if floor is None else geo.median / floor.median,
                "similarity_ms": 1e3 * r["similarity"].median,
                "pml_over_similarity": None if pml is None else pml.median / r["similarity"].median,
                "pml_need_gb": r["pml_need_gb"],
                "note": r["note"],
            }
        )
    return figures


def ratios(figures: dict) -> dict[str, float | None]:
    """Each timing row's PML / geojax time ratio (None where PML did not run), by loss and N."""
    return {f"{r['loss']} N={r['N']}": r["pml_over_geojax"] for r in figures["timing"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    parser.add_argument("--full", action="store_true", help="run PML even where it needs many GB / minutes")
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="accelerator sizes (N = 4096, 16384; memory at 65536), PML on CUDA; writes losses_gpu.json "
        "(without a GPU: the same on the CPU, a dry run)",
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--check",
        action="store_true",
        help="rerun the command losses.json records and exit 1 naming each row whose PML/geojax ratio fell "
        "below 0.7× the stored one; writes nothing (--out: where the stored file is)",
    )
    parser.add_argument(
        "--malloc",
        choices=("default", "keep"),
        default="default",
        help="keep: glibc serves allocations below 1 GiB from one heap for all threads and never trims it "
        "(train.helpers.allocator), for both sides: no temporary is mapped and faulted in anew at each call",
    )
    add_out_argument(parser)
    args = parser.parse_args(argv)
    name = ("losses_gpu" if args.gpu else "losses") + ("_malloc_keep" if args.malloc == "keep" else "")
    stored = None
    if args.check:
        args, stored = results.check_args(parser, name, args.out)
    if args.malloc == "keep" and not allocator.keep_freed_memory():  # before JAX and torch start threads
        parser.error("--malloc keep needs glibc's malloc (Linux)")
    machine = machine_info()
    folder = None if stored is not None else destination(args.out, quick=args.quick)

    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()})")
    args.peer, args.torch_device = _peer(args.gpu)
    if args.gpu and (jax.default_backend() == "cpu" or args.torch_device == "cpu"):
        print("--gpu: no GPU for JAX and torch both here: the accelerator's sizes run on the CPU (a dry run)")
    sizes, mem_n = SIZES[args.gpu, args.quick]
    if args.quick:
        args.repeats = min(args.repeats, 3)

    timing = timing_figures(time_losses(sizes, args))
    print(f"\nfwd+bwd, D={D}, medians of {args.repeats} alternating rounds (ms; CPU ms: all threads)")
    cells = [
        [r["loss"], r["N"], f"{r['geojax_ms']:.2f}", f"{r['geojax_cpu_ms']:.2f}"]
        + [r[k] and f"{r[k]:.1f}" for k in ("pml_ms", "pml_cpu_ms")]
        + [r[k] and f"{r[k]:.1f}×" for k in ("pml_over_geojax", "pml_over_geojax_cpu")]
        + [
            r["floor_ms"] and f"{r['floor_ms']:.2f}",
            r["geojax_over_floor"] and f"{r['geojax_over_floor']:.2f}×",
            f"{r['similarity_ms']:.2f}",
            r["pml_over_similarity"] and f"{r['pml_over_similarity']:.1f}×",
        ]
        + [r["note"]]
        for r in timing
    ]
    header = ["loss", "N", "geojax ms", "geojax CPU ms", "PML ms", "PML CPU ms", "PML/geojax", "CPU ratio"]
    header += ["floor ms", "geojax/floor", "similarity ms", "PML/similarity"]
    print(markdown_table([*header, "note"], cells, align="lrrrrrrrrrrrl"))

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
        figures |= {"jax_backend": jax.default_backend(), "torch_device": args.torch_device}
        figures["malloc"] = args.malloc
        command = invocation("benchmarks.losses", argv)
        print(f"wrote {write_result(name, figures, argv=command, machine=machine, folder=folder)}")


def _peer(gpu: bool) -> tuple[bool, str]:
    """Whether PML can run here, and torch's device for it (``cuda`` with ``gpu`` where torch sees one)."""
    try:
        import pytorch_metric_learning
        import torch
    except ImportError as err:
        print(f"peer not available ({err}): timing geojax only")
        return False, "cpu"
    device = "cuda" if gpu and torch.cuda.is_available() else "cpu"
    torch.set_num_threads(os.cpu_count() or 1)
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(
        f"torch {torch.__version__} on {where}; pytorch-metric-learning {pytorch_metric_learning.__version__}"
    )
    return True, device


if __name__ == "__main__":
    main()
