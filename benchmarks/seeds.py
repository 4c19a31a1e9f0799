"""Several seeds in one program (``seeds=S``, replicas stacked and vmapped in one jitted step) against S
sequential single-seed runs of the same recipe: training throughput and peak memory.

    python -m benchmarks.seeds [--quick] [--seeds 1 3 8] [--steps 60] [--encoder mlp|cnn]

Recipe: the app's default (``supcon_torus_n`` on the bundled digits, MLP of width 512, batch 256, two views;
``--encoder cnn``: the small CNN of width 32 on the same images), device feed, one step per dispatch,
no checkpoints during the timed steps. Each configuration trains in a fresh process (so that its peak resident
memory is its own): steady-state time = the training time less the first step (which compiles), over the other
steps. "sequential" is S single-seed runs, each timed the same way and summed. Ratio = sequential time / the
one-program time for the same replica-steps (> 1: the one program is faster).

A full run writes the table, the recipe's sizes and the machine to ``benchmarks/results/seeds.json``
(``seeds_cnn.json`` with ``--encoder cnn``); ``--quick`` writes only with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table
from train.helpers.version import ROOT


def child(seeds: int, steps: int, encoder: str, width: int, batch: int) -> dict[str, float]:
    """Train one configuration in this process; its steady-state seconds and peak resident memory."""
    from train.app import config, loop

    with tempfile.TemporaryDirectory() as workdir:
        cfg = config.make(
            seeds=seeds,
            steps=steps,
            encoder=encoder,
            width=width,
            batch_size=batch,
            feed="device",
            progress=False,
            checkpoint_every=steps,
            log_every=steps,
            workdir=workdir,
        )
        timing = loop.train(cfg).timing
    return {
        "steady_s": timing["train_s"] - timing["first_step_s"],
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure(seeds: int, args: argparse.Namespace) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.seeds",
        "--child",
        str(seeds),
        "--steps",
        str(args.steps),
        "--encoder",
        args.encoder,
    ]
    cmd += ["--width", str(args.width), "--batch", str(args.batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: S = 1, 2, 12 steps, width 32")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 3, 8])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--encoder", choices=("mlp", "cnn"), default="mlp")
    ap.add_argument("--width", type=int)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    add_out_argument(ap)
    args = ap.parse_args()
    if args.width is None:
        args.width = 512 if args.encoder == "mlp" else 32
    if args.quick:
        args.seeds, args.steps, args.width, args.batch = [1, 2], 12, 32, 64
    if args.child is not None:
        print(json.dumps(child(args.child, args.steps, args.encoder, args.width, args.batch)))
        return
    machine = machine_info()
    single = measure(1, args)
    rows = []
    for s in args.seeds:
        one = single if s == 1 else measure(s, args)
        replica_steps = s * (args.steps - 1)
        sequential_s = s * single["steady_s"]
        rows.append(
            [
                s,
                replica_steps / one["steady_s"],
                replica_steps / sequential_s,
                sequential_s / one["steady_s"],
                one["rss_mib"],
                single["rss_mib"],
            ]
        )
    load_after = os.getloadavg()[0]
    print(
        f"{args.encoder} width {args.width}, batch {args.batch} (two views), {args.steps} steps; "
        f"load {load_after:.1f}"
    )
    header = [
        "S",
        "one program replica-steps/s",
        "sequential replica-steps/s",
        "ratio",
        "one program MiB",
        "one run MiB",
    ]
    print(markdown_table(header, rows, digits=3))
    folder = destination(args.out, quick=args.quick)
    if folder is not None:
        keys = ["S", "one_program_rate", "sequential_rate", "ratio", "one_program_mib", "one_run_mib"]
        figures = {
            "encoder": args.encoder,
            "width": args.width,
            "batch": args.batch,
            "steps": args.steps,
            "load_after": load_after,
            "rows": [dict(zip(keys, row, strict=True)) for row in rows],
        }
        name = "seeds" if args.encoder == "mlp" else f"seeds_{args.encoder}"
        command = invocation("benchmarks.seeds")
        print(f"wrote {write_result(name, figures, argv=command, machine=machine, folder=folder)}")


if __name__ == "__main__":
    main()
