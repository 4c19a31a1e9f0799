"""The expected GPU-machine time of a reproduction sweep, from measured runs.

A sweep's runs are the ``python -m train`` lines that ``python -m train.reproduce PAPER --print`` lists, less
those finished in their run directories (read back, not trained). Run alone, each costs a fixed part
(starting, tracing and compiling its programs, or reading them from JAX's persistent compilation cache when a
run of the same shapes compiled them before; loading the data; the evaluation) and its training steps. With
``--jobs J`` the runs go J at a time as processes sharing the GPU, so the training takes each run's time alone
divided by the speed-up measured for J and for its kind of step (above the machine's shortest step, or at
it: launch-bound steps share the GPU worse), and the sweep ends with its judging pass:

    expected = Σ (fixed + steps × step) / SPEEDUP[J] + ASSEMBLY_S

Calibrated on one NVIDIA H200 (the H100's chip with faster memory), jax 0.11.2, by Korman 2021's gpu-scale
sweeps (``benchmarks/gpu_sweep.sh 001``) and three runs alone, one after the other:

- 2026-11-27: 21 runs, 4 at a time, 447 s, then 26.5 s to read them back and judge.
  - MSimCLR (ResNet-18, 128 images × 2 views of 28×28×1, fp32, 624 steps): 75.9 s alone with its programs
    compiled (first step 16.7 s, evaluation 31.4 s), 40.3 s with them read from the cache (11.2 s, 9.7 s):
    the cache pays 36 % of a run. Training took 23.7 ms a step, 3.25 times the 7.3 ms that ``python -m
    benchmarks.train_step --gpu`` measured for the same step without the app's loop
    (benchmarks/results/train_step_gpu.json).
- 2026-12-04 (code 7fee584c): the 9 MTriplet-sized runs (ResNet-18, 32 images, fp32, 3,748 steps), 4 at a
  time, 327 s, then 138.8 s to judge (their disjoint-class analyses).
  - Alone, the last of them took 8.3 ms a step (the 2026-11-27 code: 3.85 ms); 4 at a time each took about
    26 ms a step. The model's 612 s alone for the 9 against 327 s gives the speed-up at the floor, 1.87.

Other recipes' steps are scaled from the benchmark's two measured steps by the images a step sees (ResNet-18
at 512 × 2 views of 32×32×3 in bf16: 12.5 ms; the MSimCLR step above: 7.3 ms) and by 2.4 for a ResNet-50
(0.95 against 0.40 billion multiply-adds per 28×28×1 image), times APP_FACTOR, and never below STEP_FLOOR_MS.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import shlex
import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from train.app import config

if TYPE_CHECKING:
    from train.app.config_types import RunConfig

# µs per view-image of 32×32 pixels on one H100 in benchmarks.train_step's step, per precision.
VIEW_IMAGE_US = {"bf16": 12.5e3 / (512 * 2), "fp32": 7.3e3 / (128 * 2) / (28 * 28 / (32 * 32))}
NETWORK_COST = {"resnet18": 1.0, "resnet50": 2.4}  # relative to a ResNet-18 (multiply-adds per image)
APP_FACTOR = 23.7 / 7.3  # the app's training step over the benchmark's (MSimCLR, measured)
STEP_FLOOR_MS = 8.3  # MTriplet's step of 32 images (measured alone): no GPU step is shorter
# Two CPU cores (this project's CI and development machine), the small CNN in fp32, as python -m
# train.reproduce runs it: ms per 28×28 view-image of a training step, from Korman 2021's MSimCLR at the cpu
# scale on Fashion-MNIST (128 × 2 views: 9.92 and 10.58 steps/s over 300 steps on a quiet 2-core AMD EPYC with
# the freed memory kept, 2026-12-06; 8.5 steps/s under glibc's default malloc), the most per image of the
# recipes: 0.40 ms each. MTriplet's 32 images took 9.5–11.7 ms a step there (85–105 steps/s; 115–145 under
# glibc's default and 118–124 with huge pages, the app's choice since): the floor. On the 2-core Xeon with
# huge pages the CPU recipe's 512 view-images ran at 9.06 steps/s (0.22 ms each) and MTriplet at 67.15
# (14.9 ms; benchmarks/results/malloc.json): the constants are the EPYC's; small steps take longer here.
CPU_VIEW_IMAGE_MS = 0.40
CPU_FLOOR_MS = 12.0


def _gpu_step_ms(cfg: RunConfig, image_shape: Sequence[int]) -> float:
    """Expected milliseconds of one training step of ``cfg`` in the app on one H100-class GPU, for images of
    ``image_shape`` (H, W, C)."""
    if cfg.encoder not in NETWORK_COST:
        raise ValueError(f"encoder must be one of {sorted(NETWORK_COST)} to estimate, got {cfg.encoder!r}")
    if cfg.precision not in VIEW_IMAGE_US:
        raise ValueError(f"precision must be one of {sorted(VIEW_IMAGE_US)}, got {cfg.precision!r}")
    height, width = image_shape[:2]
    views = cfg.batch_size * cfg.views * cfg.seeds
    work = views * VIEW_IMAGE_US[cfg.precision] * height * width / 1024 * NETWORK_COST[cfg.encoder] / 1e3
    return max(STEP_FLOOR_MS, work * APP_FACTOR)


def _cpu_step_ms(cfg: RunConfig, image_shape: Sequence[int]) -> float:
    """Expected milliseconds of one training step of ``cfg`` on two CPU cores (the small CNN in fp32)."""
    if cfg.encoder != "cnn" or cfg.precision != "fp32":
        raise ValueError(
            f"a CPU estimate needs encoder='cnn' in fp32, got {cfg.encoder!r} in {cfg.precision!r}"
        )
    height, width = image_shape[:2]
    views = cfg.batch_size * cfg.views * cfg.seeds
    return max(CPU_FLOOR_MS, views * CPU_VIEW_IMAGE_MS * height * width / 784)


@dataclasses.dataclass(frozen=True)
class Machine:
    """Where a sweep runs, as measured: its step times, each run's fixed part (compiling its programs, or
    reading them from the persistent cache; the evaluation), the speed-up of runs at a time, the sweep's last
    pass, and the time one command may take."""

    name: str
    step_ms: Callable[[RunConfig, Sequence[int]], float]
    compile_s: float
    cached_s: float
    speedup: dict[int, float]  # runs at a time → speed-up over the runs one by one
    floor_speedup: dict[int, float]  # … for runs whose step is the floor (launch-bound: they share worse)
    floor_ms: float  # the shortest step of the machine
    assembly_s: float
    budget_s: float


GPU = Machine(
    name="one H100-class GPU",
    step_ms=_gpu_step_ms,
    compile_s=61.0,  # MSimCLR alone: 75.9 s less 14.6 s of steps
    cached_s=25.0,  # … with its programs from the cache: 40.3 s less 15.2 s of steps
    speedup={1: 1.0, 4: 2.62},  # Korman 2021's 21 runs: 1,172 s one by one (the model), 447 s 4 at a time
    floor_speedup={1: 1.0, 4: 1.87},  # its 9 MTriplet-sized runs: 612 s alone (the model), 327 s 4 at a time
    floor_ms=STEP_FLOOR_MS,
    assembly_s=139.0,  # measured: 138.8 s, 9 of Korman 2021's runs analysed (26.5 s the week before)
    budget_s=540.0,  # one command on the GPU machine: 9 minutes (its 10-minute limit less the start, copies)
)
CPU = Machine(
    name="two CPU cores",
    step_ms=_cpu_step_ms,
    compile_s=50.0,  # the evaluation (36–56 s for the CPU recipe's runs, 45 s for MTriplet's) and compiling
    cached_s=50.0,  # XLA:CPU compiles the small CNN in seconds: the cache changes little
    speedup={1: 1.0},  # the two cores are one run's
    floor_speedup={1: 1.0},
    floor_ms=CPU_FLOOR_MS,
    assembly_s=60.0,
    budget_s=6 * 3600.0,  # the whole Fashion-MNIST cpu sweep: at most 6 hours of training
)
MACHINES = {"gpu": GPU, "paper": GPU, "cpu": CPU}  # the machine each scale is sized for


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One run's expected cost alone: its command line, its steps and their time, its fixed part."""

    line: str
    steps: int
    step_ms: float
    fixed_s: float
    compiles: bool  # the first run of its shapes (the others read its programs from the cache)
    at_floor: bool  # its step is the machine's shortest (launch-bound)

    @property
    def alone_s(self) -> float:
        """Expected seconds of the run alone on its machine."""
        return self.fixed_s + self.steps * self.step_ms / 1e3


def shapes(cfg: RunConfig) -> tuple[tuple[str, object], ...]:
    """What decides a run's compiled programs: its config less its seed, length, run directory and the
    run keys (runs equal in these share one compilation through the persistent cache)."""
    skip = {"seed", "workdir", *config.RUN_KEYS, *config.LENGTH_KEYS}
    return tuple(sorted((k, repr(v)) for k, v in dataclasses.asdict(cfg).items() if k not in skip))


def configs(lines: Sequence[str]) -> list[RunConfig]:
    """The config of each ``python -m train`` line, quietly (the config's notes, such as a preset's key the
    run replaces, are for the run itself)."""
    level = config.log.level
    config.log.setLevel(logging.ERROR)
    try:
        return [config.from_args(shlex.split(line)[3:]) for line in lines]
    finally:
        config.log.setLevel(level)


def plan_runs(lines: Sequence[str], image_shape: Sequence[int], machine: Machine = GPU) -> list[RunPlan]:
    """The expected cost of each ``python -m train`` line on ``machine``, in order (the first run of each
    shape compiles)."""
    seen: set[tuple[tuple[str, object], ...]] = set()
    out = []
    for line, cfg in zip(lines, configs(lines), strict=True):
        key = shapes(cfg)
        compiles = key not in seen
        seen.add(key)
        fixed = machine.compile_s if compiles else machine.cached_s
        step_ms = machine.step_ms(cfg, image_shape)
        out.append(RunPlan(line, cfg.steps, step_ms, fixed, compiles, step_ms <= machine.floor_ms))
    return out


def expected_s(
    plans: Sequence[RunPlan], jobs: int = 1, machine: Machine = GPU, *, judge: bool = True
) -> float:
    """Expected seconds of the whole sweep on ``machine`` with ``jobs`` runs at a time (module docstring),
    its judging pass left out where not ``judge`` (a command that trains some of a paper's runs only)."""
    if jobs not in machine.speedup:
        raise ValueError(
            f"jobs must be one whose speed-up was measured on {machine.name}, {sorted(machine.speedup)}, "
            f"got {jobs}"
        )
    return jobs_s(plans, jobs, machine) + (machine.assembly_s if judge else 0.0)


def jobs_s(plans: Sequence[RunPlan], jobs: int, machine: Machine = GPU) -> float:
    """Expected seconds of training ``plans`` with ``jobs`` runs at a time: each run's time alone over the
    speed-up measured for its kind (at the machine's floor step, or above it)."""
    return sum(p.alone_s / (machine.floor_speedup if p.at_floor else machine.speedup)[jobs] for p in plans)


_PLANNED = re.compile(r"^# expected (\d+) s alone: ([\d,]+) steps × ([\d.]+) ms \+ (\d+) s")
_WORKDIR = re.compile(r"(?:^| )workdir=(\S+)")
_RAN = re.compile(r"^\s*run (\S+): done in ([\d.]+) s$")
_JOBS = re.compile(r"^\S+: \d+ of \d+ runs to train, (\d+) at a time$")
_TOTAL = re.compile(r"^# \S+: .*expected on .* with --jobs (\d+): (\d+) s ")
_WALL = re.compile(r"^gpu_sweep: sweep exit status \d+ after (\d+) s$")


def compare(plan_text: str, sweep_log: str) -> dict:
    """A sweep's plan (``--print``'s lines) against what its log measured, to correct the constants above.

    Args:
        plan_text: ``plan.txt``: each run's ``python -m train`` line (whose ``workdir`` names it), after its
            ``# expected … s alone: S steps × M ms + F s`` comment where its scale is sized for a machine,
            and the paper's total.
        sweep_log: ``sweep.log``: ``run NAME: done in X s`` per run trained (``jobs`` at a time, each one's
            own process), and the sweep's wall-clock seconds (``gpu_sweep: … after N s``) where it ended.

    Returns:
        ``runs``: per run of the plan {name, expected_s (alone), steps, step_ms, fixed_s (these None where
        the plan has no estimate), measured_s (None: not trained in this sweep), ratio (measured over
        expected)}; ``jobs``; ``expected_total_s``;
        ``wall_s`` (None: not in the log); ``median_ratio`` over the runs trained.

    Raises:
        ValueError: the plan lists no run, or a run's line has no ``workdir``.
    """
    runs, planned = [], None
    for line in plan_text.splitlines():
        if m := _PLANNED.match(line):
            planned = m
        elif line.startswith("python -m train "):
            where = _WORKDIR.search(line)
            if where is None:
                raise ValueError(f"plan_text: a run line without workdir=: {line!r}")
            expected, steps, step_ms, fixed = planned.groups() if planned else (None,) * 4
            runs.append(
                {
                    "name": os.path.basename(where.group(1).rstrip("/")),
                    "expected_s": expected and float(expected),
                    "steps": steps and int(steps.replace(",", "")),
                    "step_ms": step_ms and float(step_ms),
                    "fixed_s": fixed and float(fixed),
                }
            )
            planned = None
    if not runs:
        raise ValueError("plan_text: no 'python -m train' line")
    found = {m.group(1): float(m.group(2)) for m in map(_RAN.match, sweep_log.splitlines()) if m}
    for run in runs:
        run["measured_s"] = found.get(run["name"])
        known = run["measured_s"] is not None and run["expected_s"] is not None
        run["ratio"] = run["measured_s"] / run["expected_s"] if known else None
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    return {
        "runs": runs,
        "jobs": _first(_JOBS, sweep_log, int),
        "expected_total_s": _first(_TOTAL, plan_text, float, group=2),
        "wall_s": _first(_WALL, sweep_log, float),
        "median_ratio": statistics.median(ratios) if ratios else None,
    }


def _first(pattern: re.Pattern, text: str, kind: Callable, group: int = 1):
    for line in text.splitlines():
        if m := pattern.match(line):
            return kind(m.group(group))
    return None


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m train.reproduce.plan OUT``: the plan against the measured times of a gpu_sweep.sh run
    whose ``$OUT`` (plan.txt, sweep.log) came back to folder OUT."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out", help="the folder holding plan.txt and sweep.log")
    args = ap.parse_args(argv)
    with open(os.path.join(args.out, "plan.txt"), encoding="utf-8") as f:
        plan_text = f.read()
    with open(os.path.join(args.out, "sweep.log"), encoding="utf-8") as f:
        found = compare(plan_text, f.read())
    jobs = found["jobs"]
    print(f"run: expected alone → measured ({jobs} at a time), measured / expected")
    for r in found["runs"]:
        measured = "not trained here" if r["measured_s"] is None else f"{r['measured_s']:.0f} s"
        if r["expected_s"] is None:
            print(f"  {r['name']}: no estimate → {measured}")
            continue
        ratio = "" if r["ratio"] is None else f", ×{r['ratio']:.2f}"
        model = f"{r['steps']:,} × {r['step_ms']:.1f} ms + {r['fixed_s']:.0f} s"
        print(f"  {r['name']}: {r['expected_s']:.0f} s ({model}) → {measured}{ratio}")
    if found["median_ratio"] is not None:
        print(f"median measured / expected per run: ×{found['median_ratio']:.2f}")
    total, wall = found["expected_total_s"], found["wall_s"]
    if total is not None and wall is not None:
        print(f"the sweep: expected {total:.0f} s, took {wall:.0f} s (×{wall / total:.2f})")


if __name__ == "__main__":
    main()
