"""The results folder: every benchmark's figures in one JSON file with the machine that measured them.

A benchmark ends with ::

    path = write_result("losses", {"rows": rows, "ratios": ratios}, argv=sys.argv)

which writes ``benchmarks/results/losses.json`` atomically (``name`` may carry a suffix for a variant, e.g.
``"search_gpu"``) holding ``figures`` beside ``machine``: the CPU model, core count, accelerator model,
memory, the versions of Python, jax, jaxlib, torch, faiss and pytorch-metric-learning (those importable), the
code version (``train.helpers.version.code_version``, the record every run's report.json carries: a hash of
the package files, the git commit and whether the checkout differs from it), the date (UTC) and the 1-, 5- and
15-minute load averages read *before* the run (:func:`machine_info` is called when the benchmark starts, so
its own threads are not counted). README quotes figures from these files only; a test checks that every figure
it quotes is in the file it names.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from geojax.search._kernels import cpu_flags
from train.helpers.files import json_safe, write_text
from train.helpers.version import ROOT, code_version

RESULTS_DIR = ROOT / "benchmarks" / "results"
CHECK_FLOOR = 0.7  # --check fails when a ratio falls below this fraction of the stored one
PACKAGES = ("jax", "jaxlib", "flax", "optax", "numpy", "torch", "faiss-cpu", "pytorch-metric-learning")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa(flags: Iterable[str]) -> list[str]:
    """The vector instruction sets among a CPU's feature flags, sorted.

    x86's AVX and AMX families, Arm's ASIMD and SVE: what decides which form of a kernel XLA and faiss run.

    Args:
        flags: the flag names as Linux's /proc/cpuinfo lists them (none when unknown).

    Returns:
        The matching flag names.

    Example:
        >>> from train.helpers.results import cpu_isa
        >>> cpu_isa("fpu sse4_2 avx2 fma avx512f avx512_vpopcntdq".split())
        ['avx2', 'avx512_vpopcntdq', 'avx512f']
    """
    return sorted(f for f in flags if f.startswith(("avx", "amx", "asimd", "sve")))


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def machine_info() -> dict[str, Any]:
    """The machine, software and load at this moment: call it before the benchmark starts its work.

    Returns:
        ``cpu`` (model), ``cpu_isa`` (:func:`cpu_isa`), ``cores``, ``memory_gib`` (None where unknown), JAX's
        ``platform``, ``device`` and ``device_count``, the ``python`` version, the ``versions`` of the
        importable packages of ``PACKAGES``, the ``code_version``
        (:func:`train.helpers.version.code_version`), the ``date`` (UTC, ISO 8601) and ``load_before``, the
        1-, 5- and 15-minute load averages.
    """
    import jax

    devices = jax.devices()
    try:
        memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory_gib = None
    return {
        "cpu": _cpu_model(),
        "cpu_isa": cpu_isa(cpu_flags()),
        "cores": os.cpu_count(),
        "memory_gib": None if memory_gib is None else round(memory_gib, 1),
        "platform": devices[0].platform,
        "device": devices[0].device_kind,
        "device_count": len(devices),
        "python": platform.python_version(),
        "versions": _versions(),
        "code_version": code_version(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """The benchmarks' one ``--out FOLDER`` option (see :func:`destination`).

    Args:
        parser: the benchmark's argument parser, which gets ``--out`` (a ``Path``, default None).
    """
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the result's JSON (default: benchmarks/results/; --quick writes only with --out)",
    )


def destination(out: Path | None, *, quick: bool) -> Path | None:
    """Where a benchmark writes its result, so that smoke runs never replace the measured files.

    Args:
        out: the ``--out`` folder, or None.
        quick: whether the run is a ``--quick`` smoke run.

    Returns:
        ``out`` when given, else the results folder for a full run and None (write nothing) for a quick one.
    """
    if out is not None:
        return out
    return None if quick else RESULTS_DIR


def write_result(
    name: str,
    figures: dict[str, Any],
    *,
    argv: list[str],
    machine: dict[str, Any] | None = None,
    folder: Path | None = None,
) -> Path:
    """Write a benchmark's figures with the machine and the command line to ``<folder>/<name>.json``.

    The file is strict JSON (NaN / inf become null), written atomically, holding ``command``, ``machine``,
    ``load_after`` (the load averages now) and ``figures``.

    Args:
        name: the file's stem, e.g. ``"losses"`` or ``"search_gpu"`` (no ``/``, not starting with ``.``).
        figures: the benchmark's figures, a JSON-able dict.
        argv: the command line that measured them (:func:`invocation`).
        machine: :func:`machine_info` read when the benchmark started (None: read now).
        folder: the folder to write in (None: the results folder, created when missing).

    Returns:
        The path written.

    Raises:
        ValueError: ``name`` is not a plain file stem.
    """
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"name must be a plain file stem, got {name!r}")
    path = (folder or RESULTS_DIR) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(argv),
        "machine": machine or machine_info(),
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "figures": figures,
    }
    write_text(str(path), json.dumps(json_safe(record), indent=1, allow_nan=False) + "\n")
    return path


def read_result(name: str, *, folder: Path | None = None) -> dict[str, Any]:
    """The record :func:`write_result` wrote under ``name``.

    Args:
        name: the file's stem.
        folder: the folder to read from (None: the results folder).

    Returns:
        The record: ``command``, ``machine``, ``load_after`` and ``figures``.

    Raises:
        FileNotFoundError: there is no ``<name>.json`` in the folder.
    """
    path = (folder or RESULTS_DIR) / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def invocation(module: str, args: Sequence[str] | None = None) -> list[str]:
    """A benchmark's command line as a user types it, ``python -m MODULE ARGS``, for :func:`write_result`.

    Args:
        module: the benchmark's module, e.g. ``"benchmarks.losses"``.
        args: its arguments (None: this process's, ``sys.argv[1:]``).

    Returns:
        The words of the command line.
    """
    return ["python", "-m", module, *(sys.argv[1:] if args is None else args)]


def recorded_args(record: dict[str, Any]) -> list[str]:
    """The arguments of the command a results file records.

    Args:
        record: a record of :func:`read_result`.

    Returns:
        The words after ``python -m MODULE`` (or after the script's path, in files written before the
        benchmarks ran as modules).
    """
    words = shlex.split(record["command"])
    return words[3:] if words[:2] == ["python", "-m"] else words[1:]


def check_args(
    parser: argparse.ArgumentParser, name: str, folder: Path | None
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """For ``--check``: the stored record and the arguments of its recorded command, to measure it again.

    Prints the command it reruns and the commit it was stored at.

    Args:
        parser: the benchmark's argument parser, which parses the recorded arguments.
        name: the stored file's stem.
        folder: the folder of the stored file (None: the results folder).

    Returns:
        (the parsed arguments with ``check`` set to True, the stored record).
    """
    stored = read_result(name, folder=folder)
    args = parser.parse_args(recorded_args(stored))
    args.check = True
    print(f"--check: rerunning {stored['command']!r} (stored at commit {_commit(stored)})")
    other = other_machine(stored.get("machine", {}), _cpu_model(), cpu_isa(cpu_flags()), os.cpu_count())
    if other:
        print(
            f"NOTE: {other}; a ratio measured on another CPU is no reference: run the stored commit here "
            "with --out FOLDER, then --check --out FOLDER"
        )
    return args, stored


def other_machine(stored: dict[str, Any], cpu: str, isa: list[str], cores: int | None) -> str:
    """How the machine of a stored record differs from this one in what moves a speed ratio.

    The CPU model, its vector instruction sets and the cores; "" when none differs (or the record does not
    say).

    Args:
        stored: the record's ``machine``.
        cpu: this CPU's model.
        isa: this CPU's :func:`cpu_isa`.
        cores: this machine's cores.

    Returns:
        A phrase naming each difference, or "".

    Example:
        >>> from train.helpers.results import other_machine
        >>> stored = {"cpu": "AMD EPYC", "cpu_isa": ["avx2"], "cores": 2}
        >>> other_machine(stored, "AMD EPYC", ["avx2", "avx512f"], 2)
        'stored on a CPU with avx2, this one has avx2, avx512f'
    """
    differences = []
    if stored.get("cpu", cpu) != cpu:
        differences.append(f"stored on {stored['cpu']}, this CPU is {cpu}")
    if stored.get("cpu_isa", isa) != isa:
        differences.append(
            f"stored on a CPU with {', '.join(stored['cpu_isa'])}, this one has {', '.join(isa)}"
        )
    if stored.get("cores", cores) != cores:
        differences.append(f"stored with {stored['cores']} cores, this machine has {cores}")
    return "; ".join(differences)


def _commit(record: dict[str, Any]) -> str:
    version = record.get("machine", {}).get("code_version") or {}
    return str(version.get("commit", "unknown"))[:10]


def check_ratios(stored: dict[str, float | None], now: dict[str, float | None]) -> list[str]:
    """Print each row's speed ratio as stored and as measured now; return the rows that fell.

    A ratio is geojax's speed over its peer's; a row falls below :data:`CHECK_FLOOR` × the stored ratio, or
    could not be measured again.

    Rows whose stored ratio is None (no peer then) are left out; a row the stored file lacks is printed
    without a verdict.

    Args:
        stored: row → the stored ratio (None: no peer then).
        now: row → the ratio measured now (None: not measured).

    Returns:
        The rows that fell or could not be measured again, in the order printed.
    """
    failed = []
    for row in dict.fromkeys([*stored, *now]):
        before, after = stored.get(row), now.get(row)
        if before is None:
            print(f"  {row}: now {_ratio(after)} (not in the stored file)")
            continue
        if after is None or not math.isfinite(after) or after < CHECK_FLOOR * before:
            failed.append(row)
            verdict = "FELL" if after is not None else "NOT MEASURED"
        else:
            verdict = "ok"
        change = "" if after is None else f" ({after / before:.2f}× the stored)"
        print(f"  {row}: stored {_ratio(before)}, now {_ratio(after)}{change} {verdict}")
    return failed


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def exit_on_check(name: str, stored: dict[str, float | None], now: dict[str, float | None]) -> None:
    """End a ``--check`` run: print the rows (:func:`check_ratios`), then fail if any ratio fell.

    Args:
        name: the stored file's stem, named in the verdict.
        stored: row → the stored ratio.
        now: row → the ratio measured now.

    Raises:
        SystemExit: a ratio fell below :data:`CHECK_FLOOR` × the stored one or could not be measured (exit
            status 1, naming the rows); otherwise it prints that every ratio held.
    """
    failed = check_ratios(stored, now)
    if failed:
        raise SystemExit(
            f"--check against {name}.json: {len(failed)} ratio(s) below {CHECK_FLOOR}× the stored: "
            + "; ".join(failed)
        )
    print(f"--check against {name}.json: every ratio at or above {CHECK_FLOOR}× the stored one")
