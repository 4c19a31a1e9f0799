"""Reproduction tables for five papers at reduced scale, the papers' numbers beside ours.

    python -m train.reproduce <000|001|002|003|004|all> [--quick] [--data digits|npz:PATH|NAME] [--out DIR]

Each paper's claims are tested with the library and the training app as they are (``train.app.run``,
``train.evaluate.quantised_report``, ``train.binary_eval.evaluate``, ``geojax``); nothing is re-implemented.
Every verdict ("holds" / "does not hold at this scale") is computed from the numbers by the rule printed
beside it. Outputs in ``--out`` (default ``reproduction/``): ``reproduce_<selector>.json`` per paper,
``reproduction.md`` (rendered from every ``reproduce_*.json`` present, so papers can be run one at a time)
and plots; all written atomically.

Data: ``digits`` (scikit-learn's bundled 8×8 digits, offline; the default), ``npz:PATH`` (``images`` and
``labels``, as ``train.data``) or a tfds name (mnist, fashion_mnist, cifar10, cifar100; prepared offline).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from train import config, data, files
from train.reproduce import atlas, binary, render, similarities, simo, torus
from train.reproduce.common import PAPERS, SCALES, Context, Findings, Scale, clean

RUNNERS: dict[str, Callable[[Context], Findings]] = {
    m.PAPER.key: m.run for m in (torus, atlas, binary, similarities, simo)
}


def run_paper(key: str, *, scale: Scale, data_spec: str, out: str, command: str) -> dict[str, Any]:
    """Reproduce one paper (``key`` in PAPERS), write ``out/reproduce_<key>.json`` and return its content.

    The JSON holds claims (claim, ours, paper, source, rule, verdict), tables ([title, Markdown]), details,
    plots, notes, the selector (``seed``), title, command, scale, data, runs, training seeds, device, wall
    time and the finishing time.
    """
    if key not in RUNNERS:
        raise ValueError(f"paper must be one of {list(PAPERS)} or 'all', got {key!r}")
    paper = PAPERS[key]
    print(f"{key}: {paper.title} [{scale.name}, data {data_spec}]", flush=True)
    t0 = time.time()
    ds = data.load(data_spec)
    with tempfile.TemporaryDirectory(prefix=f"reproduce-{key}-") as tmp:
        ctx = Context(scale=scale, data=data_spec, dataset=ds, tmp=tmp, out=out)
        found = RUNNERS[key](ctx)
    result = {
        "claims": [c.to_json() for c in found.claims],
        "tables": [list(t) for t in found.tables],
        "details": found.details,
        "plots": found.plots,
        "notes": found.notes,
        "seed": key,
        "title": paper.title,
        "command": command,
        "scale": dataclasses.asdict(scale),
        "data": {
            "spec": data_spec,
            "name": ds.name,
            "train": len(ds.train_y),
            "test": len(ds.test_y),
            "image_shape": list(ds.image_shape),
            "classes": ds.num_classes,
        },
        "runs": [r.to_json() for r in ctx.runs],
        "training_seeds": sorted({r.seed for r in ctx.runs}),
        "device": str(jax.devices()[0].device_kind),
        "wall_s": round(time.time() - t0, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    result = clean(result)
    files.write_json(os.path.join(out, f"reproduce_{key}.json"), result)
    return result


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The command line; returns each reproduced paper's JSON content."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m train.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "paper",
        help="000 (Stowell 2026) | 001 (Korman 2021) | 002 (Hong, Meng & Yuan 2018) | "
        "003 (Feeney & Hughes 2024) | 004 (Bouhsine et al. 2024) | all",
    )
    ap.add_argument("--quick", action="store_true", help="reduced sizes: every paper in minutes on 2 cores")
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # tests only: a few steps
    ap.add_argument(
        "--data", default="digits", help="digits | npz:PATH | mnist | fashion_mnist | cifar10 | cifar100"
    )
    ap.add_argument("--out", default="reproduction", help="output folder (default reproduction/)")
    args = ap.parse_args(argv)
    keys = tuple(PAPERS) if args.paper == "all" else (args.paper,)
    if any(k not in PAPERS for k in keys):
        ap.error(f"paper must be one of {', '.join(PAPERS)} or all, got {args.paper!r}")
    scale = SCALES["tiny" if args.tiny else "quick" if args.quick else "full"]
    config.make(dataset=args.data)  # validate the data spec before any work
    command = "python -m train.reproduce " + " ".join(shlex.quote(a) for a in argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    results = []
    for key in keys:
        results.append(run_paper(key, scale=scale, data_spec=args.data, out=args.out, command=command))
        render.render(args.out)
        print(f"{key}: " + "; ".join(f"{c['claim']}: {c['verdict']}" for c in results[-1]["claims"]))
    print(f"wrote {os.path.join(args.out, 'reproduction.md')} ({time.time() - t0:.0f} s)")
    return results


if __name__ == "__main__":
    main()
