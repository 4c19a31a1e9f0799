"""The expected H100 time of a reproduction sweep, from measured step times plus compilation and evaluation.

A sweep's runs are the ``python -m train`` lines that ``python -m train.reproduce PAPER --print`` lists. Each
costs its training steps on the GPU, its evaluation, and work on the host: starting the process, tracing its
programs, compiling them (or reading them from the persistent compilation cache when a run of the same shapes
compiled them before), loading the data and writing its outputs. With ``--jobs J`` the runs go J at a time, so
the host's share overlaps while the GPU's adds up:

    expected = Σ gpu + Σ host / J + assembly

Step times come from two steps measured on one NVIDIA H100 80GB HBM3 by ``python benchmarks/train_step.py
--gpu`` (benchmarks/results/train_step_gpu.json, 2026-11-26, jax 0.11.2) and scale with the images a step
sees: ResNet-18 at 512 images × 2 views of 32×32×3 in bf16 took 12.5 ms (12.2 µs a view-image), Korman 2021's
MSimCLR step, ResNet-18 at 128 × 2 views of 28×28×1 in fp32, 7.3 ms (28.5 µs a 28×28 view-image, 37 µs at
32×32). A ResNet-50 costs about 2.4 times a ResNet-18 (0.95 against 0.40 billion multiply-adds per 28×28×1
image), and no step is taken as shorter than STEP_FLOOR_MS, the launch-bound floor of a small batch. The host
and evaluation constants are the estimates named below, to be replaced by what runs record
(``report.json``'s ``timing``: ``first_step_s``, ``eval_s``, ``total_s``).
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections.abc import Sequence

from train.app import config

# µs per view-image of 32×32 pixels on one H100, per precision (measured, see the module docstring).
VIEW_IMAGE_US = {"bf16": 12.5e3 / (512 * 2), "fp32": 7.3e3 / (128 * 2) / (28 * 28 / (32 * 32))}
NETWORK_COST = {"resnet18": 1.0, "resnet50": 2.4}  # relative to a ResNet-18 (multiply-adds per image)
STEP_FLOOR_MS = 3.0  # estimate: a step of a small batch is bound by its ~500 kernel launches, not its FLOPs
COMPILE_S = 60.0  # estimate: host time of a run whose programs compile (training step, evaluation)
CACHED_S = 20.0  # estimate: host time of a run whose programs a run of the same shapes compiled before
EVAL_GPU_S = 4.0  # estimate: GPU time of an evaluation (70,000 images embedded, the retrieval metrics, probe)
ASSEMBLY_S = 40.0  # estimate: the sweep's last pass (runs read back, baselines, tables, plots)
BUDGET_S = 540.0  # one command on the GPU machine: 9 minutes (a 10-minute limit, the start and copies aside)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """One run's expected cost: its command line, its steps, its GPU and host seconds."""

    line: str
    steps: int
    step_ms: float
    gpu_s: float
    host_s: float
    compiles: bool  # the first run of its shapes (the others read its programs from the cache)


def step_ms(cfg: config.Config, image_shape: Sequence[int]) -> float:
    """Expected milliseconds of one training step of ``cfg`` on one H100 for images of ``image_shape``
    (H, W, C)."""
    if cfg.encoder not in NETWORK_COST:
        raise ValueError(f"encoder must be one of {sorted(NETWORK_COST)} to estimate, got {cfg.encoder!r}")
    if cfg.precision not in VIEW_IMAGE_US:
        raise ValueError(f"precision must be one of {sorted(VIEW_IMAGE_US)}, got {cfg.precision!r}")
    height, width = image_shape[:2]
    views = cfg.batch_size * cfg.views * cfg.seeds
    work = views * VIEW_IMAGE_US[cfg.precision] * height * width / 1024 * NETWORK_COST[cfg.encoder] / 1e3
    return max(STEP_FLOOR_MS, work)


def shapes(cfg: config.Config) -> tuple[tuple[str, object], ...]:
    """What decides a run's compiled programs: its config less its seed, length, run directory and the
    run keys (runs equal in these share one compilation through the persistent cache)."""
    skip = {"seed", "workdir", *config.RUN_KEYS, *config.LENGTH_KEYS}
    return tuple(sorted((k, repr(v)) for k, v in dataclasses.asdict(cfg).items() if k not in skip))


def plan_runs(lines: Sequence[str], image_shape: Sequence[int]) -> list[RunPlan]:
    """The expected cost of each ``python -m train`` line, in order (the first of each shape compiles)."""
    seen: set[tuple[tuple[str, object], ...]] = set()
    out = []
    level = config.log.level  # the config's notes (a preset's key the run replaces) are for the run itself
    config.log.setLevel(logging.ERROR)
    try:
        configs = [config.from_args(shlex.split(line)[3:]) for line in lines]
    finally:
        config.log.setLevel(level)
    for line, cfg in zip(lines, configs, strict=True):
        key = shapes(cfg)
        compiles = key not in seen
        seen.add(key)
        ms = step_ms(cfg, image_shape)
        out.append(
            RunPlan(
                line=line,
                steps=cfg.steps,
                step_ms=ms,
                gpu_s=cfg.steps * ms / 1e3 + EVAL_GPU_S,
                host_s=COMPILE_S if compiles else CACHED_S,
                compiles=compiles,
            )
        )
    return out


def expected_s(plans: Sequence[RunPlan], jobs: int = 1) -> float:
    """Expected seconds of the whole sweep with ``jobs`` runs at a time (module docstring)."""
    if jobs < 1:
        raise ValueError(f"jobs must be ≥ 1, got {jobs}")
    return sum(p.gpu_s for p in plans) + sum(p.host_s for p in plans) / jobs + ASSEMBLY_S
