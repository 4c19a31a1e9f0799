"""The code version a result was made with, one record for runs and benchmarks alike.

Standard library only, so that ``train.helpers.results`` (the benchmarks' results folder) and
``train.app.report`` (every run's report.json) share it without importing each other.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import subprocess
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: geojax/ and train/
# The code a run's numbers depend on: the library and the training app's training and evaluation path. Left
# out: the reproduction's analyses (which read runs back and re-judge them), the search package (no run's
# report depends on it), the app's helpers (files, plots, tables, timers), the export of trained models and
# the C search kernels' build glue.
CODE_DIRS = ("geojax", "train")
LEFT_OUT = ("geojax/search", "train/reproduce", "train/helpers", "train/csearch", "train/export.py")


def code_text(source: str) -> str:
    """What a module computes: its source less docstrings, comments and blank lines (a documentation edit is
    not a change of the code), each line's trailing spaces stripped.

    >>> code_text("x = 1  # one\\n\\n\\ndef f():\\n    'Doc.'\\n    return x\\n")
    'x = 1\\ndef f():\\n    return x'
    """
    tree = ast.parse(source)
    dropped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                dropped.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    comments = {
        tok.start[0]: tok.start[1]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    kept = []
    for number, line in enumerate(source.splitlines(), 1):
        if number in dropped:
            continue
        line = line[: comments.get(number, len(line))].rstrip()
        if line.strip():
            kept.append(line)
    return "\n".join(kept)


def code_hash(root: Path = ROOT) -> str:
    """SHA-256 over the relative paths and the code (:func:`code_text`) of every .py file of CODE_DIRS under
    ``root`` (sorted, those under LEFT_OUT left out): the same for the same code, with or without git, and
    for code whose docstrings and comments alone changed."""
    h = hashlib.sha256()
    for path in sorted(p for d in CODE_DIRS for p in (root / d).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(rel == a or rel.startswith(a + "/") for a in LEFT_OUT):
            continue
        h.update(rel.encode() + b"\0" + code_text(path.read_text(encoding="utf-8")).encode() + b"\0")
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
