"""Code versions that give the same results: a change that alters no number keeps its runs current.

A run records the hash of the code that trained it (:func:`train.helpers.version.code_hash`), and a run
read back under other code is stale. A refactor changes the hash without changing one number. This module
checks that claim and keeps the record of it::

    python -m train.reproduce.same_code --since COMMIT [--runs docs/runs]

For every distinct configuration among the committed runs trained by the code of ``COMMIT`` (their
``config.json``, the seed, length and data left aside), it trains 2 steps on the bundled digits and
evaluates, once with the code of ``COMMIT`` (a temporary git worktree) and once with the code of this
checkout, each in a fresh process, and compares the logged metrics, the report and the embeddings bit for
bit. Only when every configuration agrees is the pair of hashes appended to :data:`RECORD`, with the
configurations, commits, date, machine and JAX version; :func:`same_results` then counts runs of either
hash as current. One difference, and nothing is recorded: the runs stay stale until retrained.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from train.helpers import files
from train.helpers.version import ROOT, code_hash, code_version

RECORD = Path(__file__).with_name("same_results.json")  # the checked pairs of code hashes
# Keys that choose nothing about the code a run executes, set for the check's short runs.
CHECK_RUN = {
    "steps": 2,
    "epochs": None,
    "dataset": "digits",
    "data_dir": None,
    "test_fraction": 0.25,
    "checkpoint_every": 2,
    "log_every": 1,
    "progress": False,
    "probe_epochs": 1,
    "val_every": None,
}
IGNORED = {*CHECK_RUN, "seed", "workdir", "checkpoint_minutes"}  # what does not make a configuration distinct
UNTIMED = ("time", "timing", "code_version", "workdir", "device", "wall_s")  # recorded, never compared
RUNNER = (  # one run of a saved config, as the code under the working directory trains it
    "import json, sys; from train.app import cli, config; "
    "cli.run(config.from_saved(json.load(open(sys.argv[1]))))"
)


def same_results(a: str, b: str, record: Sequence[dict[str, Any]] | None = None) -> bool:
    """Whether code hashes ``a`` and ``b`` give the same results: equal, or linked by checked pairs.

    Args:
        a: a code hash.
        b: another.
        record: the checked pairs (None: those of :data:`RECORD`).

    Returns:
        True when ``a == b`` or a chain of recorded pairs joins them.
    """
    pairs = _read() if record is None else record
    linked, grew = {a}, True
    while grew:
        grew = False
        for p in pairs:
            if (p["from"] in linked) != (p["to"] in linked):
                linked |= {p["from"], p["to"]}
                grew = True
    return b in linked


def _read() -> list[dict[str, Any]]:
    if not RECORD.is_file():
        return []
    with open(RECORD, encoding="utf-8") as f:
        return json.load(f)


def configurations(runs: str, trained_by: str) -> dict[str, dict[str, Any]]:
    """The distinct configurations of the runs under ``runs`` trained by code ``trained_by``.

    Args:
        runs: a folder of run directories (each its config.json and report.json), searched recursively.
        trained_by: a code hash.

    Returns:
        The first run directory of each distinct configuration (keys of :data:`IGNORED` aside) → its config.
    """
    found: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for path in sorted(glob.glob(os.path.join(runs, "**", "report.json"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            version = json.load(f).get("code_version") or {}
        folder = os.path.dirname(path)
        if version.get("code_hash") != trained_by or not os.path.isfile(os.path.join(folder, "config.json")):
            continue
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        key = json.dumps({k: v for k, v in cfg.items() if k not in IGNORED}, sort_keys=True)
        if key not in seen:
            seen.add(key)
            found[folder] = cfg
    return found


def _outputs(workdir: str) -> dict[str, Any]:
    """What a run computed: its metrics lines and report without times, and its embeddings' bytes."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [{k: v for k, v in json.loads(line).items() if k not in UNTIMED} for line in f]
    with open(os.path.join(workdir, "report.json"), encoding="utf-8") as f:
        report = {k: v for k, v in json.load(f).items() if k not in UNTIMED}
    with np.load(os.path.join(workdir, "embeddings.npz")) as z:
        arrays = {k: (z[k].dtype.str, z[k].shape, z[k].tobytes()) for k in z.files}
    return {"metrics": lines, "report": report, "embeddings": arrays}


def _train(root: Path, cfg: dict[str, Any], workdir: str) -> dict[str, Any]:
    """Train ``cfg`` with the code under ``root``, in a fresh process; its outputs (RuntimeError with the last
    lines of the process's errors when it fails)."""
    path = os.path.join(os.path.dirname(workdir), os.path.basename(workdir) + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**cfg, **CHECK_RUN, "workdir": workdir}, f)
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, path], cwd=root, env=env, capture_output=True, text=True
    )
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"training {workdir} with the code under {root} failed:\n{tail}")
    return _outputs(workdir)


def check(since: str, runs: str) -> dict[str, Any]:
    """Compare the code of commit ``since`` with this checkout's on the configurations of its runs.

    Args:
        since: a git commit whose code trained runs under ``runs``.
        runs: the folder of run directories.

    Returns:
        The record: ``from`` / ``to`` hashes and commits, ``configurations`` (run directories checked),
        ``differ`` (those whose outputs differ), date, machine and JAX version.

    Raises:
        ValueError: no committed run was trained by the code of ``since``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), since], cwd=ROOT, check=True, capture_output=True
        )
        try:
            before = code_hash(old)
            found = configurations(runs, before)
            if not found:
                raise ValueError(f"no run under {runs} was trained by the code of {since} ({before[:12]})")
            differ = []
            for i, (folder, cfg) in enumerate(found.items()):
                outs = [
                    _train(root, cfg, os.path.join(tmp, f"{side}-{i}"))
                    for side, root in (("old", old), ("new", ROOT))
                ]
                same = outs[0] == outs[1]
                print(f"  {folder}: {'same' if same else 'DIFFERENT'}", flush=True)
                if not same:
                    differ.append(folder)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=True)
    now = code_version()
    return {
        "from": before,
        "to": now["code_hash"],
        "from_commit": subprocess.run(
            ["git", "rev-parse", since], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "to_commit": now["commit"],
        "to_dirty": now["dirty"],
        "configurations": list(found),
        "differ": differ,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "jax": jax.__version__,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m train.reproduce.same_code --since COMMIT [--runs DIR]``: check, and record when the same.

    Args:
        argv: the arguments (None: the command line's).

    Returns:
        0 when every configuration gives the same outputs (the pair recorded), 1 otherwise.
    """
    ap = argparse.ArgumentParser(
        prog="python -m train.reproduce.same_code", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--since", required=True, help="the commit whose code trained the runs")
    ap.add_argument("--runs", default="docs/runs", help="the folder of run directories (default docs/runs)")
    args = ap.parse_args(argv)
    result = check(args.since, args.runs)
    n, bad = len(result["configurations"]), result["differ"]
    if bad:
        print(f"{len(bad)} of {n} configurations differ: nothing recorded; their runs stay stale")
        return 1
    if result["from"] != result["to"] and not same_results(result["from"], result["to"]):
        files.write_json(str(RECORD), [*_read(), result])
    print(f"all {n} configurations give the same outputs: code {result['from'][:12]} = {result['to'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
