"""Where a training step's time goes, on one CPU core: matrix products (dots and convolutions) against
everything else, in geojax's step and in the same step in PyTorch (the cases of ``train_step.py``).

Both run pinned to one core (XLA's pools and torch's intra-op threads), where per-operation timings are
exact: XLA's multi-threaded kernels report only their launch to the profiler. geojax's operations are
traced with ``jax.profiler`` (``--xla_cpu_enable_xprof_traceme``) and each is classed by its compiled HLO: a
product is a ``dot`` or ``convolution``, or a fusion or library call containing one; loops are left out
(their bodies are counted). PyTorch's are ``torch.profiler`` self times, a product being a matrix-product or
convolution operator. The table prints each framework's products and the rest in ms per step, their sum,
and the unprofiled step (PyTorch's Python and autograd glue is in no operator's self time, so its sum falls
short of its step), then the ratio of the unprofiled steps and what it would be were geojax's products as
fast as PyTorch's (geojax's step less its products plus PyTorch's).

A full run writes each model's rows and ratios, the steps and the machine to
``benchmarks/results/step_profile.json``; ``--quick`` writes only with ``--out``."""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
from collections.abc import Callable
from typing import Any

_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%([\w.\-]+) = .*? ([\w\-]+)\((.*)$")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%([\w.\-]+) .*\{\s*$")
_CALLS = re.compile(r"(?:calls|to_apply|body|condition)=%([\w.\-]+)")
_PRODUCT_OPCODES = {"dot", "convolution"}
_LOOP_OPCODES = {"while", "conditional", "call"}
_TORCH_PRODUCT = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|conv[123]d|.*convolution.*)$")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')


def classify_hlo(hlo: str) -> dict[str, str]:
    """Instruction name → ``"product"``, ``"loop"`` or ``"other"`` for a compiled HLO module's text; a
    fusion or custom call is a product when its called computations (transitively) hold a dot or a
    convolution, a custom call also when its target names a matmul or convolution (metadata such as
    ``op_name`` is not read: an element-wise fusion traced under a function named ``..._conv`` stays
    "other")."""
    opcodes: dict[str, set[str]] = collections.defaultdict(set)  # computation → opcodes in it
    callees: dict[str, set[str]] = collections.defaultdict(set)  # computation → computations it calls
    instructions: dict[str, tuple[str, list[str], str]] = {}  # name → (opcode, callees, rest of line)
    current = ""
    for line in hlo.splitlines():
        head = _COMPUTATION.match(line)
        if head:
            current = head.group(1)
            continue
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, opcode, rest = m.groups()
        called = _CALLS.findall(rest)
        opcodes[current].add(opcode)
        callees[current].update(called)
        instructions[name] = (opcode, called, rest)

    def holds_product(comp: str, seen: set[str]) -> bool:
        if comp in seen:
            return False
        seen.add(comp)
        return bool(opcodes[comp] & _PRODUCT_OPCODES) or any(holds_product(c, seen) for c in callees[comp])

    kinds = {}
    for name, (opcode, called, rest) in instructions.items():
        if opcode in _LOOP_OPCODES:
            kinds[name] = "loop"
        elif (
            opcode in _PRODUCT_OPCODES
            or (opcode in ("fusion", "custom-call") and any(holds_product(c, set()) for c in called))
            or (opcode == "custom-call" and re.search(r"matmul|conv", "".join(_TARGET.findall(rest))))
        ):
            kinds[name] = "product"
        else:
            kinds[name] = "other"
    return kinds


def split_events(events: list[dict], kinds: dict[str, str], steps: int) -> dict[str, float]:
    """Milliseconds per step of complete trace events (``ph == "X"``, durations in µs) named after HLO
    instructions, summed by kind (loops and events that name no instruction left out)."""
    total: dict[str, float] = {"product": 0.0, "other": 0.0}
    for e in events:
        kind = kinds.get(e.get("name", "")) if e.get("ph") == "X" else None
        if kind in total:
            total[kind] += e["dur"] / 1e3 / steps
    return total


def geojax_split(hlo: str, call: Callable[[], Any], calls: int, per_call: int) -> dict[str, float]:
    """Trace ``calls`` calls of ``per_call`` steps each (after two untraced ones) and split their kernels'
    time (ms per step) by :func:`classify_hlo`."""
    from benchmarks import train_step

    events = train_step.trace_events(call, calls, None, warmup=2)
    return split_events(events, classify_hlo(hlo), calls * per_call)


def torch_split(one: Callable[[], Any], steps: int) -> dict[str, float]:
    """Self CPU time (ms per step) of ``steps`` PyTorch steps (after two unprofiled ones): products against
    the rest."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        one().item()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            one().item()
    total = {"product": 0.0, "other": 0.0}
    for event in prof.key_averages():
        kind = "product" if _TORCH_PRODUCT.match(event.key) else "other"
        total[kind] += event.self_cpu_time_total / 1e3 / steps
    return total


def unprofiled_ms(call: Callable[[], Any], block: Callable[[Any], Any], calls: int, per_call: int) -> float:
    """Wall time (ms) per step: median over 3 rounds of ``calls`` calls of ``per_call`` steps each."""
    from train.helpers.timing import measure

    t = measure(call, repeats=3, warmup=2, number=calls, block=block)
    return 1e3 * statistics.median(t.seconds) / per_call


def main() -> None:
    from train.helpers.results import (  # no backend yet
        add_out_argument,
        destination,
        invocation,
        machine_info,
        write_result,
    )

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    ap.add_argument("--models", default="mlp,cnn", help="CPU models (mlp, cnn)")
    ap.add_argument("--steps", type=int, default=0, help="profiled and timed steps (default 20, quick 4)")
    ap.add_argument(
        "--steps-per-call", type=int, default=10, help="geojax steps per dispatch (divides --steps)"
    )
    add_out_argument(ap)
    args = ap.parse_args()
    steps, k = args.steps or (4 if args.quick else 20), args.steps_per_call
    if k < 1 or steps % k:
        ap.error(f"--steps-per-call must be a positive divisor of the {steps} steps, got {k}")
    folder = destination(args.out, quick=args.quick)
    # One core for both, before JAX starts its backend: XLA's Eigen pool off, YNNPACK held by the affinity.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    flags = "--xla_cpu_multi_thread_eigen=false --xla_cpu_enable_xprof_traceme=true"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()
    import jax

    from benchmarks import train_step
    from train.helpers.tables import markdown_table

    try:
        import torch
    except ImportError:
        torch = None
        print("torch not installed: geojax only")
    else:
        torch.set_num_threads(1)
    print(f"jax {jax.__version__}" + (f", torch {torch.__version__}" if torch else "") + ", one core")
    machine = machine_info()  # after the affinity and flags are set, before any work
    header = ["model", "step", "products ms", "rest ms", "sum ms", "unprofiled ms"]
    models = []
    for case in [c for c in train_step.cpu_cases(args.quick) if c.name in args.models.split(",")]:
        call, _, hlo = train_step.geojax_call(case, k)
        ours = geojax_split(hlo(), call, steps // k, k)
        ours_ms = unprofiled_ms(call, jax.block_until_ready, steps // k, k)
        rows = [[case.name, "geojax", ours["product"], ours["other"], sum(ours.values()), ours_ms]]
        if torch is not None:
            one = train_step.torch_step(case, "cpu")
            theirs = torch_split(one, steps)
            theirs_ms = unprofiled_ms(one, train_step.torch_block("cpu"), steps, 1)
            rows.append([case.name, "PyTorch eager", theirs["product"], theirs["other"]])
            rows[-1] += [sum(theirs.values()), theirs_ms]
        print(f"\n{case.name}: ms per step on one core, {steps} steps (geojax {k} per call)")
        cells = [[r[0], r[1], *(f"{v:.2f}" for v in r[2:])] for r in rows]
        print(markdown_table(header, cells, align="llrrrr"))
        keys = ["model", "step", "products_ms", "rest_ms", "sum_ms", "unprofiled_ms"]
        model = {"model": case.name, "rows": [dict(zip(keys, r, strict=True)) for r in rows]}
        if torch is not None:
            # geojax's unprofiled step with its products' time replaced by PyTorch's.
            bound = theirs_ms / (ours_ms - ours["product"] + theirs["product"])
            model.update(torch_over_geojax=theirs_ms / ours_ms, with_torch_products=bound)
            print(
                f"ratio PyTorch/geojax ({case.name}, unprofiled steps): {theirs_ms / ours_ms:.2f}×; with "
                f"geojax's products as fast as PyTorch's: {bound:.2f}×"
            )
        models.append(model)
    if folder is not None:
        figures = {"steps": steps, "steps_per_call": k, "cores": 1, "models": models}
        command = invocation("benchmarks.step_profile")
        print(f"wrote {write_result('step_profile', figures, argv=command, machine=machine, folder=folder)}")


if __name__ == "__main__":
    main()
