"""Training speed of ``python -m train`` under each setting of glibc's malloc, on large steps and small ones.

    python -m benchmarks.malloc --data idx:DIR [--repeats 3]
    python -m benchmarks.malloc --quick      # bundled digits, a few steps: a smoke run, writes nothing

XLA allocates a step's temporaries anew at every call; under glibc's default malloc each large one is mapped
anew and faulted in page by page (:mod:`train.helpers.allocator`). ``python -m train`` picks a remedy before
JAX starts (:func:`train.helpers.allocator.start`), and this benchmark measures the choice against the others
and against glibc's default, each training in a fresh process:

- **glibc**: glibc's default (``MALLOC_PERTURB_=0`` in the environment, its own default value, so the app
  leaves malloc alone);
- **kept**: the freed memory kept in one heap for all threads
  (:func:`train.helpers.allocator.keep_freed_memory` before the app's entry code, which then leaves it);
- **huge pages**: ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, 2 MiB pages behind malloc's large blocks (where
  glibc ≥ 2.35 and the kernel grants transparent huge pages; skipped elsewhere).

Two training lines: **large steps**, the CPU recipe (``preset=supcon_sphere_cpu``, 256 images × 2 views a
step) for 300 steps, and **small steps**, Korman 2021's MTriplet at the reproduction's cpu scale (32 images a
step) for 2,000 steps. Every repeat runs every line under every setting in turn, so that load from other
processes falls on all alike. Each run records the app's own times: ``train_s`` (first step and its
compilation included), ``steps_per_s`` over it, the steady rate after the first step, and ``eval_s``
(embedding the test and training images and the search). The table gives each setting's medians and its
steady rate over glibc's.
A full run writes ``benchmarks/results/malloc.json`` with the machine, the load before and after, and the
setting ``python -m train`` picks on it; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

from benchmarks.cpu_recipe import GLIBC_DEFAULT, load_average, train_once
from train.helpers import allocator
from train.helpers.results import add_out_argument, destination, invocation, machine_info, write_result
from train.helpers.tables import markdown_table

LINES = {
    "large steps": ["preset=supcon_sphere_cpu"],
    "small steps": [
        "preset=mtriplet",
        "dim=2",
        "charts=1",
        "classes=disjoint",
        "encoder=cnn",
        "norm=batch",
        "views=1",
        "augment=crop_flip",
        "precision=fp32",
    ],
}
STEPS = {"large steps": 300, "small steps": 2000}
QUICK_STEPS = {"large steps": 20, "small steps": 40}
# the app's entry code run after keep_freed_memory, in the environment above (so that the app leaves it)
KEPT = (
    "import runpy, sys\n"
    "from train.helpers import allocator\n"
    "assert allocator.keep_freed_memory()\n"
    "sys.argv = ['train', *sys.argv[1:]]\n"
    "runpy.run_module('train', run_name='__main__', alter_sys=True)\n"
)
SETTINGS = {
    "glibc": (["-m", "train"], GLIBC_DEFAULT),
    "kept": (["-c", KEPT], GLIBC_DEFAULT),
    "huge pages": (["-m", "train"], {"GLIBC_TUNABLES": allocator.HUGETLB}),
}


def settings_here() -> list[str]:
    """The settings this machine can run: huge pages only where the app would take them."""
    huge = allocator.setting({}) == "huge pages"  # in an environment that sets no malloc
    return [name for name in SETTINGS if name != "huge pages" or huge]


def run(line: str, setting: str, args: list[str], workdir: str) -> dict:
    """One training of ``line`` under ``setting`` in a fresh process: the app's times, the load before."""
    entry, env = SETTINGS[setting]
    load = load_average()
    t = train_once([*args, f"workdir={workdir}"], env, entry=entry)["timing"]
    steady = (t["steps_run"] - 1) / (t["train_s"] - t["first_step_s"])
    return {
        "line": line,
        "setting": setting,
        "train_s": t["train_s"],
        "first_step_s": t["first_step_s"],
        "steps": t["steps_run"],
        "steps_per_s": t["steps_per_s"],
        "steady_steps_per_s": round(steady, 2),
        "eval_s": t["eval_s"],
        "load_before": load,
    }


def summarise(runs: list[dict], settings: list[str]) -> list[dict]:
    """Each (line, setting)'s medians, and its median steady rate over glibc's on the same line."""
    out = []
    for line in LINES:
        base = statistics.median(
            r["steady_steps_per_s"] for r in runs if r["line"] == line and r["setting"] == "glibc"
        )
        for setting in settings:
            mine = [r for r in runs if r["line"] == line and r["setting"] == setting]
            keys = ("train_s", "steady_steps_per_s", "eval_s")
            med = {k: statistics.median(r[k] for r in mine) for k in keys}
            out.append(
                {
                    "line": line,
                    "setting": setting,
                    "runs": len(mine),
                    **med,
                    "over_glibc": round(med["steady_steps_per_s"] / base, 3),
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="digits", help="the app's dataset=... (default: digits)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds of every line under every setting")
    ap.add_argument("--quick", action="store_true", help="digits, one round of a few steps: a smoke run")
    add_out_argument(ap)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if allocator.setting() in ("environment", "not glibc"):
        ap.error("needs glibc (Linux) and an environment that sets no MALLOC_* variable or malloc tunable")
    settings, repeats = settings_here(), 1 if args.quick else args.repeats
    machine, runs = machine_info(), []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            for line, words in LINES.items():
                steps = (QUICK_STEPS if args.quick else STEPS)[line]
                line_args = [*words, f"steps={steps}", f"dataset={args.data}", "seed=0", "progress=false"]
                for setting in settings:
                    workdir = f"{tmp}/{line.replace(' ', '-')}-{setting.replace(' ', '-')}-{rep}"
                    runs.append(run(line, setting, line_args, workdir))
                    print(runs[-1], flush=True)
    table = summarise(runs, settings)
    cols = ["line", "setting", "runs", "train_s", "steady_steps_per_s", "over_glibc", "eval_s"]
    print(markdown_table(cols, [[r[c] for c in cols] for r in table]))
    app = allocator.setting({})  # what python -m train picks here, in an environment that sets no malloc
    print(f"python -m train picks: {app}")
    out = destination(args.out, quick=args.quick)
    if out is not None:
        lines = {line: [*words, f"steps={STEPS[line]}"] for line, words in LINES.items()}
        figures = {"data": args.data, "lines": lines, "app_setting": app, "runs": runs, "summary": table}
        command = invocation("benchmarks.malloc")
        print(write_result("malloc", figures, argv=command, machine=machine, folder=out))


if __name__ == "__main__":
    sys.exit(main())
