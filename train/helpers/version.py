"""The code version a result was made with, one record for runs and benchmarks alike.

Standard library only, so that ``train.helpers.results`` (the benchmarks' results folder) and
``train.app.report`` (every run's report.json) share it without importing each other.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: geojax/ and train/
# The code a run's numbers depend on: the library and the training app (the reproduction's analyses, which
# read runs back and re-judge them, are left out).
CODE_DIRS = ("geojax", "train")
ANALYSIS_DIRS = ("train/reproduce",)


def code_hash(root: Path = ROOT) -> str:
    """SHA-256 over the relative paths and bytes of every .py file of CODE_DIRS under ``root`` (sorted, those
    under ANALYSIS_DIRS left out): the same for the same code, with or without git."""
    h = hashlib.sha256()
    for path in sorted(p for d in CODE_DIRS for p in (root / d).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(rel.startswith(a + "/") for a in ANALYSIS_DIRS):
            continue
        h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


@functools.cache
def code_version() -> dict[str, Any]:
    """The code a result is made with: ``code_hash`` (:func:`code_hash`, what decides whether a run read back
    later predates the code), the git ``commit`` (None without git) and ``dirty`` (CODE_DIRS differ from the
    commit). Computed once per process."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--", *CODE_DIRS) if commit else None
    return {
        "code_hash": code_hash(),
        "commit": commit.strip() if commit else None,
        "dirty": bool(status and status.strip()),
    }
