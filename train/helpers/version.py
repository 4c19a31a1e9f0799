"""The code version a result was made with, one record for runs and benchmarks alike.

Standard library only, so that ``train.helpers.results`` (the benchmarks' results folder) and
``train.app.report`` (every run's report.json) share it without importing each other.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: geojax/ and train/
# The code a run's numbers depend on: the library and the training app's training and evaluation path. Left
# out: the reproduction's analyses (which read runs back and re-judge them), the search package (no run's
# report depends on it), the app's helpers (files, plots, tables, timers), the export of trained models and
# the C search kernels' build glue.
CODE_DIRS = ("geojax", "train")
LEFT_OUT = ("geojax/search", "train/reproduce", "train/helpers", "train/csearch", "train/export.py")


def code_statements(source: str) -> list[str]:
    """What a module computes, one text per top-level statement less its imports.

    The syntax tree less docstrings and type annotations, written field by field with empty fields left out
    (so the same on Python 3.11 and 3.12, whose trees differ only by fields that are empty here). Comments,
    blank lines, formatting, docstrings (also those a module assigns to ``f.__doc__``), annotations and which
    module imports what (also under ``if TYPE_CHECKING:``, for the type checker alone) change nothing a run
    computes, and nothing here.

    Args:
        source: a module's Python source.

    Returns:
        One text per top-level statement that is not an import (nor a block of them under ``if
        TYPE_CHECKING:``) or a ``__doc__`` assignment, in order.

    Raises:
        SyntaxError: ``source`` is not valid Python.

    Example:
        >>> documented = "x: int = 1  # one\\n\\n\\ndef f(a: float) -> float:\\n    'Doc.'\\n    return a + x"
        >>> plain = "import os\\nx: float = 1\\ndef f(a):\\n    return a + x"
        >>> code_statements(documented) == code_statements(plain)
        True
        >>> checked = "import typing\\nif typing.TYPE_CHECKING:\\n    from os import PathLike\\ny = 1"
        >>> code_statements(checked) == code_statements("y = 1")
        True
        >>> code_statements("y = 1") == code_statements("y = 2")
        False
    """
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        elif isinstance(node, ast.arg):
            node.annotation = None
    return [_fields(stmt) for stmt in tree.body if not _imports_or_documents(stmt)]


def _imports_or_documents(stmt: ast.stmt) -> bool:
    """An import, a block of imports for the type checker alone (``if TYPE_CHECKING:`` with no ``else``), or a
    module-level assignment of a definition's ``__doc__`` (documentation by reference)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(stmt, ast.If) and not stmt.orelse and _type_checking(stmt.test):
        return all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body)
    targets = stmt.targets if isinstance(stmt, ast.Assign) else []
    return bool(targets) and all(isinstance(t, ast.Attribute) and t.attr == "__doc__" for t in targets)


def _type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING" and isinstance(test.value, ast.Name) and test.value.id == "typing"
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _fields(node: Any) -> str:
    """A syntax tree as text: each node's non-empty fields by name (an assignment's annotation left out)."""
    if isinstance(node, ast.AST):
        skip = ("annotation",) if isinstance(node, ast.AnnAssign) else ()
        fields = [
            f"{name}={_fields(value)}"
            for name, value in ast.iter_fields(node)
            if value not in (None, []) and name not in skip
        ]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_fields(item) for item in node) + "]"
    return repr(node)


def code_hash(root: Path = ROOT) -> str:
    """SHA-256 over the sorted top-level statements (:func:`code_statements`) of the code a run depends on.

    Every .py file of CODE_DIRS under ``root`` counts, those under LEFT_OUT left out. The hash is the same for
    the same code, with or without git, and for code whose docstrings, comments, formatting, type annotations
    or imports alone changed, or whose definitions moved between files.

    Args:
        root: the checkout holding ``geojax/`` and ``train/`` (default: this one).

    Returns:
        The hash as 64 hexadecimal digits.
    """
    statements = []
    for path in (p for d in CODE_DIRS for p in (root / d).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not any(rel == a or rel.startswith(a + "/") for a in LEFT_OUT):
            statements += code_statements(path.read_text(encoding="utf-8"))
    h = hashlib.sha256()
    for statement in sorted(statements):
        h.update(statement.encode() + b"\0")
    return h.hexdigest()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


@functools.cache
def code_version() -> dict[str, Any]:
    """The code a result is made with, computed once per process.

    Returns:
        ``code_hash`` (:func:`code_hash`, what decides whether a run read back later predates the code), the
        git ``commit`` (None without git) and ``dirty`` (whether CODE_DIRS differ from the commit).
    """
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--", *CODE_DIRS) if commit else None
    return {
        "code_hash": code_hash(),
        "commit": commit.strip() if commit else None,
        "dirty": bool(status and status.strip()),
    }
