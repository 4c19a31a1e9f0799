"""Cross-batch memory (Wang et al. 2020, XBM) on two CPU cores: P@1 of the CPU recipe at a small batch with a
memory of 0, 1,024 and 8,192 rows against a large batch without one, and the step's cost beside
pytorch-metric-learning's CrossBatchMemory, measured in one run.

    python -m benchmarks.memory --data idx:data/fashion-mnist [--steps N] [--seeds 0 1 2]
    python -m benchmarks.memory --quick     # bundled digits, a few steps and small sizes: a smoke run

Training (P@1): every arm is ``python -m train preset=supcon_sphere_cpu dataset=DATA batch_size=B
memory=M steps=N seed=S`` in a fresh process (the app's own command line; memory arms add
``memory_warmup``), the same N steps for every arm, evaluated as the app evaluates every run
(Fashion-MNIST: the 10,000 test images as queries against the 60,000 training images). The arms: batch 64
with memory 0, 1,024 and 8,192, and batch 512 without a memory. Steps/s is the app's ``steps_per_s``
(training, compilation included), and the load average is read before and after each training.

Speed: the app's step (device feed, one step per call, the state donated) at batch 64 with each memory size
and at batch 512, next to the same step in PyTorch (benchmarks/train_step.py's twin: the same CNN with batch
norm, sphere head, SupCon × τ/τ_base + KoLeo, AdamW, clipping) with pytorch-metric-learning's SupConLoss,
plain and inside its CrossBatchMemory of 8,192 rows (filled before timing): the medians of interleaved
rounds. PML's memory holds the batch it just enqueued, so its 8,192 rows are geojax's 64 + 8,128; geojax's
keys are the batch's 64 and its memory's 8,192. Target: geojax's batch-64 step with 8,192 rows costs at most
1.3× the one without.

A full run writes ``benchmarks/results/memory.json`` (``--quick`` writes only with ``--out``). Its trainings
(hours) live under ``benchmarks/results/memory_runs/`` (:data:`RUNS`), one folder each, whose ``report.json``,
``config.json`` and ``load.json`` are committed as they finish: a run stopped part way goes on from any
checkout on any machine, the finished trainings read back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from typing import Any

import jax
import numpy as np

from benchmarks.cpu_recipe import trained
from benchmarks.train_step import Case, geojax_call, step_times, torch_block, torch_step
from train.app import config, data
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table

ARMS = ((64, 0), (64, 1024), (64, 8192), (512, 0))  # (batch, memory rows)
QUICK_ARMS = ((16, 0), (16, 64))
TARGET = 1.3
RUNS = os.path.join("benchmarks", "results", "memory_runs")  # a full run's trainings (module docstring)


def _counts(text: str) -> list[int]:
    return [int(t) for t in text.split(",")]


def train_arm(
    args: argparse.Namespace, batch: int, size: int, seed: int, extra: list[str], root: str
) -> dict:
    """One training of an arm (a fresh ``python -m train`` process in its own run directory under ``root``;
    a finished one there is read back, not trained again, with the load average measured when it trained);
    its figures."""
    line = [f"preset={args.preset}", f"dataset={args.data}", f"batch_size={batch}", f"memory={size}"]
    line += [f"steps={args.steps}", f"seed={seed}", "progress=false", *extra]
    if size:
        line.append(f"memory_warmup={args.warmup}")
    rep, measured = trained(line, os.path.join(root, f"b{batch}_m{size}_s{seed}"))
    t = rep["timing"]
    return {
        "seed": seed,
        "precision_at_1": rep["precision_at_1"],
        "knn_accuracy": rep["knn_accuracy"],
        "train_s": t["train_s"],
        "steps": t["steps_run"],
        "steps_per_s": t["steps_per_s"],
        "eval_s": t["eval_s"],
        "raw_pixel_1nn": rep["baseline_raw_1nn"]["precision_at_1"],
        **measured,
    }


def training(args: argparse.Namespace, arms, extra: list[str]) -> list[dict]:
    """Every arm's trainings, seed by seed; per arm its rows and P@1 mean and sample sd."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or tmp
        for batch, size in arms:
            rows = []
            for seed in args.seeds:
                rows.append(train_arm(args, batch, size, seed, extra, root))
                print(f"batch {batch} memory {size}: {rows[-1]}", flush=True)
            p1 = [r["precision_at_1"] for r in rows]
            results.append(
                {
                    "batch": batch,
                    "memory": size,
                    "rows": rows,
                    "precision_at_1_mean": statistics.mean(p1),
                    "precision_at_1_sd": statistics.stdev(p1) if len(p1) > 1 else None,
                    "steps_per_s_mean": statistics.mean(r["steps_per_s"] for r in rows),
                }
            )
    return results


def pml_supcon(cfg: config.Config, memory_size: int) -> Any:
    """pytorch-metric-learning's SupConLoss at the config's τ, inside its CrossBatchMemory of ``memory_size``
    rows when > 0."""
    from pytorch_metric_learning import losses as pml_losses

    supcon = pml_losses.SupConLoss(temperature=cfg.temperature)
    if not memory_size:
        return supcon
    return pml_losses.CrossBatchMemory(supcon, embedding_size=cfg.dim, memory_size=memory_size)


def speed(args: argparse.Namespace, arms, images: np.ndarray, labels: np.ndarray) -> dict:
    """The interleaved step timings (module docstring); every row's seconds per step, and the ratios."""
    small = arms[0][0]
    largest = max(size for _, size in arms)

    def cfg_of(batch: int, size: int) -> config.Config:
        return config.make(
            preset=args.preset,
            dataset="digits",  # not loaded: the images below
            batch_size=batch,
            memory=size,
            epochs=None,
            steps=10**6,
            feed="device",
            progress=False,
        )

    runners, meta = {}, {}
    for batch, size in arms:
        name = f"geojax, batch {batch}, memory {size:,}"
        call, _, _ = geojax_call(Case(name, cfg_of(batch, size), images, labels), 1)
        runners[name] = (call, 1, jax.block_until_ready)
        meta[name] = {"side": "geojax", "batch": batch, "memory": size}
    if args.torch:
        import torch

        def on_threads(step: Any, threads: int) -> Any:
            def call():
                torch.set_num_threads(threads)
                return step()

            return call

        for threads in args.torch_threads:
            for size in (0, largest):
                case = Case("pml", cfg_of(small, 0), images, labels)
                one = on_threads(torch_step(case, "cpu", contrastive=pml_supcon(case.cfg, size)), threads)
                for _ in range(-(-size // small) + 1):  # fill the memory before timing
                    one()
                kind = f"CrossBatchMemory {size:,}" if size else "no memory"
                name = f"PyTorch + PML ({threads} thread{'s' * (threads > 1)}), batch {small}, {kind}"
                runners[name] = (one, 1, torch_block("cpu"))
                meta[name] = {"side": "pml", "batch": small, "memory": size, "torch_threads": threads}
    times = step_times(runners, args.repeats, args.timing_steps)
    rows = [
        {
            **meta[name],
            "step": name,
            "ms_per_step": 1e3 * wall,
            "steps_per_s": 1 / wall,
            "cpu_s_per_step": cpu,
        }
        for name, (wall, cpu) in times.items()
    ]

    def ms(side: str, batch: int, size: int) -> float | None:
        """The row's ms per step (PML: its fastest thread count)."""
        found = [
            r["ms_per_step"] for r in rows if (r["side"], r["batch"], r["memory"]) == (side, batch, size)
        ]
        return min(found) if found else None

    ours = ms("geojax", small, largest) / ms("geojax", small, 0)
    pml_plain, pml_memory = ms("pml", small, 0), ms("pml", small, largest)
    return {
        "rounds": args.repeats,
        "steps_per_round": args.timing_steps,
        "torch_threads": args.torch_threads if args.torch else None,
        "rows": rows,
        "geojax_memory_over_none": ours,
        "pml_memory_over_none": pml_memory and pml_memory / pml_plain,
        "pml_memory_over_geojax_memory": pml_memory and pml_memory / ms("geojax", small, largest),
        "memory": largest,
        "batch": small,
        "target": TARGET,
        "target_met": ours <= TARGET,
    }


def print_speed(timing: dict) -> None:
    """The step-timing table and its ratios."""
    rounds = f"{timing['rounds']} interleaved rounds of {timing['steps_per_round']} steps"
    print(f"\nstep timing: medians of {rounds}")
    print(
        markdown_table(
            ["step", "steps/s", "ms/step", "CPU s/step"],
            [
                [
                    r["step"],
                    f"{r['steps_per_s']:.1f}",
                    f"{r['ms_per_step']:.2f}",
                    f"{r['cpu_s_per_step']:.4f}",
                ]
                for r in timing["rows"]
            ],
            align="lrrr",
        )
    )
    pml = timing["pml_memory_over_none"]
    print(
        f"geojax batch {timing['batch']}: memory {timing['memory']:,} / none "
        f"{timing['geojax_memory_over_none']:.2f}× "
        f"(target ≤ {TARGET}×: {'met' if timing['target_met'] else 'not met'}); PML: "
        + (
            "torch or pytorch-metric-learning not installed"
            if pml is None
            else f"{pml:.2f}×, its memory step {timing['pml_memory_over_geojax_memory']:.2f}× geojax's"
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="digits", help="the app's dataset= value (Fashion-MNIST: idx:DIR)")
    ap.add_argument("--preset", default="supcon_sphere_cpu")
    ap.add_argument("--steps", type=int, default=3000, help="training steps of every arm")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--warmup", type=int, default=100, help="memory_warmup of the memory arms (steps)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--timing-steps", type=int, default=20, help="steps per runner per timing round")
    # on a shared machine OpenMP's barriers can make 2 threads slower than 1: each PML row counts its fastest
    ap.add_argument("--torch-threads", type=_counts, default=[1, 2], help="PyTorch thread counts timed: 1,2")
    ap.add_argument(
        "--workdir",
        help=f"the trainings' run directories (from the repository), kept: a rerun reads finished ones back "
        f"(default: {RUNS}; --quick: a temporary folder)",
    )
    ap.add_argument("--skip-training", action="store_true", help="time the steps only (writes nothing)")
    ap.add_argument("--quick", action="store_true", help="digits, small sizes, few steps: a smoke run")
    add_out_argument(ap)
    args, extra = ap.parse_known_args()
    if any("=" not in a for a in extra):
        ap.error(f"extra arguments must be KEY=VALUE, got {extra}")
    arms = QUICK_ARMS if args.quick else ARMS
    if args.workdir is None and not args.quick:
        args.workdir = RUNS
    if args.quick:
        args.data, args.steps, args.seeds, args.warmup = "digits", 12, args.seeds[:1], 2
        args.repeats, args.timing_steps = min(args.repeats, 2), min(args.timing_steps, 4)
        args.torch_threads = args.torch_threads[:1]
        extra = [*extra, "augment=shift", "eval_batch=512"]  # digits are not mirror-symmetric
    try:
        import pytorch_metric_learning  # noqa: F401
        import torch  # noqa: F401

        args.torch = True
    except ImportError:
        args.torch = False
    machine = machine_info()
    ds = data.load(args.data)
    images, labels = data.compact(ds.train_x), ds.train_y

    timing = speed(args, arms, images, labels)  # first: minutes, where the trainings take hours
    print_speed(timing)
    results = [] if args.skip_training else training(args, arms, extra)
    if results:
        cols = ["batch", "memory", "P@1 per seed", "P@1 mean", "sd", "steps/s", "train s"]
        table = [
            [
                a["batch"],
                f"{a['memory']:,}",
                " ".join(f"{r['precision_at_1']:.4f}" for r in a["rows"]),
                f"{a['precision_at_1_mean']:.4f}",
                a["precision_at_1_sd"] and f"{a['precision_at_1_sd']:.4f}",
                f"{a['steps_per_s_mean']:.2f}",
                " ".join(f"{r['train_s']:.0f}" for r in a["rows"]),
            ]
            for a in results
        ]
        print(f"\nP@1 at {args.steps} steps, {args.data}, preset {args.preset}")
        print(markdown_table(cols, table, align="rrlrrrl"))

    out = destination(args.out, quick=args.quick)
    if out is not None and not args.skip_training:
        figures = {
            "preset": args.preset,
            "data": args.data,
            "steps": args.steps,
            "seeds": args.seeds,
            "memory_warmup": args.warmup,
            "extra": extra,
            "arms": results,
            "speed": timing,
        }
        print(
            write_result("memory", figures, argv=invocation("benchmarks.memory"), machine=machine, folder=out)
        )


if __name__ == "__main__":
    main()
