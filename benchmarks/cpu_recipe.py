"""geojax's CPU recipe for 28×28 images: P@1 and training time of SupCon on the sphere at D = 16 on two cores.

    python -m benchmarks.cpu_recipe --data idx:DIR [--seeds 0 1 2] [--preset NAME] [KEY=VALUE ...]
    python -m benchmarks.cpu_recipe --quick     # bundled digits, 30 steps: a smoke run, writes nothing
    python -m benchmarks.cpu_recipe --data idx:DIR --malloc glibc   # the app under glibc's default malloc

Each seed is one ``python -m train preset=supcon_sphere_cpu dataset=DATA seed=S`` in a fresh process
(the app's own command line; extra ``KEY=VALUE`` arguments are passed on), evaluated as the app evaluates
every run: the test images as queries against the training images (Fashion-MNIST: 10,000 against 60,000),
P@1 and kNN@5 on the embeddings, beside the raw-pixel 1-NN of the same split. Training time is the app's
``train_s`` (from the first step, compilation included, to the last; evaluation apart). The target
(Fashion-MNIST): every seed P@1 ≥ 0.90 in ≤ 600 s of training. A full run writes
``benchmarks/results/cpu_recipe.json`` with the machine and the load before and after; run it on a
quiet machine.

``python -m train`` sets glibc's malloc up first (huge pages where available, else the freed memory kept:
:func:`train.helpers.allocator.start`; the file records which as ``malloc``); ``--malloc glibc`` starts each
training with ``MALLOC_PERTURB_=0`` in its environment (glibc's own default value), so the app leaves glibc's
default allocator, and writes ``cpu_recipe_malloc_glibc.json``: the same
trainings' time without the setting, as its baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from train.helpers import allocator
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table

TARGET_P1, TARGET_S = 0.90, 600.0
REPOSITORY = str(Path(__file__).resolve().parents[1])


GLIBC_DEFAULT = {"MALLOC_PERTURB_": "0"}  # glibc's default value: python -m train then leaves malloc alone


def train_once(
    args: list[str], env: dict[str, str] | None = None, entry: Sequence[str] = ("-m", "train")
) -> dict:
    """Run ``python -m train ARGS`` in a fresh process; its report.json.

    ``env`` is added to this process's environment for it; ``entry`` is what follows the interpreter
    before ARGS (``-c CODE`` runs code that ends in the app's entry)."""
    proc = subprocess.run(
        [sys.executable, *entry, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPOSITORY,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode:
        raise RuntimeError(f"python -m train {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    workdir = next(a.split("=", 1)[1] for a in args if a.startswith("workdir="))
    with open(os.path.join(workdir, "report.json")) as f:
        return json.load(f)


LOADS = "load.json"  # the load average before and after a training, kept in its run directory


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def check_trained_as(here: str, line: list[str]) -> None:
    """Refuse a finished training read back from ``here`` that is not ``line``'s: another recipe (the app's
    own check, ``train.app.rundir.check_workdir``, names the keys) or another length.

    Args:
        here: the run directory holding the training.
        line: the ``python -m train`` arguments it must have been trained with (without ``workdir``).

    Raises:
        SystemExit: a one-line message naming what differs.
    """
    from train.app import config, rundir
    from train.app.errors import UsageError

    cfg = config.from_args([*line, f"workdir={here}"])
    try:
        saved = rundir.check_workdir(cfg)
    except UsageError as err:
        raise SystemExit(f"{err} (the run: {' '.join(line)})") from None
    length = "steps" if cfg.epochs is None else "epochs"  # an epochs run saves both, steps resolved
    asked = getattr(cfg, length)
    if saved is None or saved.get(length) != asked:
        got = "no config.json" if saved is None else f"{length}={saved.get(length)}"
        raise SystemExit(f"{here} holds a training of {got}, the run asks {length}={asked}")


def trained(line: list[str], workdir: str) -> tuple[dict, dict]:
    """``python -m train LINE workdir=WORKDIR``'s report, trained in a fresh process, or read back when the
    run directory holds that training finished (a run stopped part way resumes); and the load averages
    measured before and after it trained (None where it trained elsewhere and they were not kept).

    Args:
        line: the app's arguments, without ``workdir``.
        workdir: the run directory, relative to the repository (as the app is given it) or absolute.

    Returns:
        (report, {"load_before", "load_after"}); the loads are kept in the run directory's load.json.
    """
    here = os.path.join(REPOSITORY, workdir)
    loads = os.path.join(here, LOADS)
    if os.path.exists(os.path.join(here, "report.json")):
        check_trained_as(here, line)
        with open(os.path.join(here, "report.json")) as f:
            rep = json.load(f)
    else:
        before = load_average()
        rep = train_once([*line, f"workdir={workdir}"])
        with open(loads + ".tmp", "w") as f:
            json.dump({"load_before": before, "load_after": load_average()}, f)
        os.replace(loads + ".tmp", loads)
    measured = {"load_before": None, "load_after": None}
    if os.path.exists(loads):
        with open(loads) as f:
            measured = json.load(f)
    return rep, measured


def row(seed: int, rep: dict) -> dict:
    t = rep["timing"]
    return {
        "seed": seed,
        "precision_at_1": rep["precision_at_1"],
        "knn_accuracy": rep["knn_accuracy"],
        "raw_pixel_1nn": rep["baseline_raw_1nn"]["precision_at_1"],
        "train_s": t["train_s"],
        "steps": t.get("steps_run"),
        "steps_per_s": t["steps_per_s"],
        "eval_s": t["eval_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="digits", help="the app's dataset= value (Fashion-MNIST: idx:DIR)")
    ap.add_argument("--preset", default="supcon_sphere_cpu")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--quick", action="store_true", help="one seed, 30 steps, digits: a smoke run")
    ap.add_argument(
        "--malloc",
        choices=("app", "glibc"),
        default="app",
        help="app: as python -m train sets the allocator (benchmarks.malloc); glibc: glibc's default malloc",
    )
    add_out_argument(ap)
    args, extra = ap.parse_known_args()
    if any("=" not in a for a in extra):
        ap.error(f"extra arguments must be KEY=VALUE, got {extra}")
    seeds = args.seeds[:1] if args.quick else args.seeds
    if args.quick:
        extra = [*extra, "steps=30", "augment=shift"]  # digits are not mirror-symmetric
    # what the trainings ran under: glibc's default, or what python -m train picks here (huge pages, freed
    # memory kept, what this process's environment already set, or nothing: another C library's malloc)
    malloc = allocator.setting()
    if args.malloc == "glibc" and malloc in ("environment", "not glibc"):
        ap.error(
            "--malloc glibc needs glibc (Linux) and an environment that sets no MALLOC_* or malloc tunable"
        )
    malloc = "glibc" if args.malloc == "glibc" else malloc
    machine = machine_info()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            line = [f"preset={args.preset}", f"dataset={args.data}", f"seed={seed}", "progress=false", *extra]
            rep = train_once(
                [*line, f"workdir={tmp}/seed{seed}"], GLIBC_DEFAULT if args.malloc == "glibc" else None
            )
            rows.append(row(seed, rep))
            print(json.dumps(rows[-1]), flush=True)
    p1 = [r["precision_at_1"] for r in rows]
    summary = {
        "precision_at_1_mean": statistics.mean(p1),
        "precision_at_1_sd": statistics.stdev(p1) if len(p1) > 1 else None,  # sample sd (ddof 1)
        "precision_at_1_min": min(p1),
        "raw_pixel_1nn": rows[0]["raw_pixel_1nn"],
        "train_s_max": max(r["train_s"] for r in rows),
        "target_met": all(r["precision_at_1"] >= TARGET_P1 and r["train_s"] <= TARGET_S for r in rows),
    }
    cols = ["seed", "precision_at_1", "knn_accuracy", "raw_pixel_1nn", "train_s", "steps", "steps_per_s"]
    print(markdown_table(cols, [[r[c] for c in cols] for r in rows]))
    print(
        f"P@1 {summary['precision_at_1_mean']:.4f} (min {summary['precision_at_1_min']:.4f}; raw pixels "
        f"{summary['raw_pixel_1nn']:.4f}); training ≤ {summary['train_s_max']:.0f} s; target (every seed "
        f"P@1 ≥ {TARGET_P1} in ≤ {TARGET_S:.0f} s): {'met' if summary['target_met'] else 'not met'}"
    )
    out = destination(args.out, quick=args.quick)
    if out is not None:
        figures = {"preset": args.preset, "data": args.data, "extra": extra, "rows": rows, "summary": summary}
        figures["malloc"] = malloc
        command = invocation("benchmarks.cpu_recipe")
        name = "cpu_recipe" + ("_malloc_glibc" if args.malloc == "glibc" else "")
        print(write_result(name, figures, argv=command, machine=machine, folder=out))


if __name__ == "__main__":
    main()
