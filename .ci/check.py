"""CI's checks of the library that run a tool over it and fail on any issue beyond a known list.

    python .ci/check.py types   # mypy over geojax/ (pyproject.toml's [tool.mypy]): public signatures included
    python .ci/check.py docs    # the API reference and docs/*.md pages, built by Sphinx into build/docs

Each known list (``.ci/known_types.txt``, ``.ci/known_docs.txt``) holds the issues geojax/search/ had when the
check came in, one a line, to be deleted as they are fixed; every other issue fails. mypy's errors are matched
by file and error code (counted), so that one worded differently by another mypy, jax or numpy stays known
while one more of a kind fails; Sphinx's warnings by their text, less paths and line numbers. The docs build
also checks that the docstrings' ``>>>`` examples are rendered as examples.
"""

from __future__ import annotations

import ast
import collections
import importlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MYPY_ERROR = re.compile(r"^(?P<path>[^:]+?)(?::\d+)?: (?:error: )?.*\[(?P<code>[a-z-]+)\]$")


def type_kinds(lines: list[str]) -> collections.Counter[str]:
    """mypy's error lines (or the known list's) → how many there are of each (file, error code)."""
    found: collections.Counter[str] = collections.Counter()
    for line in lines:
        match = MYPY_ERROR.match(line.strip())
        if match:
            found[f"{match['path']} [{match['code']}]"] += 1
    return found


def doc_kinds(lines: list[str]) -> collections.Counter[str]:
    """Sphinx's warning lines (or the known list's) → how many there are of each text, less the checkout's
    path and the line numbers."""
    found: collections.Counter[str] = collections.Counter()
    for line in lines:
        line = re.sub(r":\d+:", ":", line.strip().replace(f"{ROOT}/", ""))
        if "WARNING" in line or "ERROR" in line:
            found[line] += 1
    return found


def run_types() -> list[str]:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    errors = [line for line in done.stdout.splitlines() if ": error: " in line]
    if done.returncode not in (0, 1) or (done.returncode == 1 and not errors):
        raise SystemExit(f"{done.stdout}{done.stderr}mypy did not run (exit status {done.returncode})")
    return errors


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _reexported(path: Path) -> bool:
    """A private module whose package's ``__init__.py`` imports names from it (geojax.losses' family modules):
    the package's page documents them."""
    init = path.parent / "__init__.py"
    if not init.exists():
        return False
    body = ast.parse(init.read_text(encoding="utf-8")).body
    return any(isinstance(node, ast.ImportFrom) and node.module == _module_name(path) for node in body)


def examples_in_public_modules() -> int:
    """How many public docstrings of geojax's public modules, and of the private modules a package re-exports,
    hold ``>>>`` examples; a docstring a module assigns to ``f.__doc__`` (by reference) is read as Python
    reads it."""
    sys.path.insert(0, str(ROOT))  # this checkout's geojax, whichever is installed
    count = 0
    for path in sorted((ROOT / "geojax").rglob("*.py")):
        private = any(part.startswith("_") and part != "__init__.py" for part in path.relative_to(ROOT).parts)
        if private and not _reexported(path):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assigned = {
            target.value.id
            for stmt in tree.body
            if isinstance(stmt, ast.Assign)
            for target in stmt.targets
            if isinstance(target, ast.Attribute)
            and target.attr == "__doc__"
            and isinstance(target.value, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
                doc = ast.get_docstring(node) or ""
                if node in tree.body and node.name in assigned:
                    doc = getattr(importlib.import_module(_module_name(path)), node.name).__doc__ or ""
                count += ">>>" in doc
    return count


def run_docs() -> list[str]:
    out = ROOT / "build" / "docs"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "warnings.txt"
        command = ["-m", "sphinx", "-b", "html", "-q", "-E", "--keep-going", "-w", str(log), "docs", str(out)]
        done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True)
        warnings = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    if done.returncode and not warnings:
        raise SystemExit(f"{done.stdout}{done.stderr}sphinx-build failed (exit status {done.returncode})")
    pages = [page.read_text(encoding="utf-8") for page in out.glob("_api/*.html")]
    rendered, written = sum(page.count('class="doctest') for page in pages), examples_in_public_modules()
    if rendered < written:
        warnings.append(f"ERROR: {rendered} doctest blocks rendered, fewer than the {written} with examples")
    print(f"docs: built into {out.relative_to(ROOT)}; {rendered} examples rendered")
    return warnings


CHECKS: dict[str, tuple[Callable[[], list[str]], Callable[[list[str]], collections.Counter[str]]]] = {
    "types": (run_types, type_kinds),
    "docs": (run_docs, doc_kinds),
}


def main(name: str) -> int:
    run, kinds = CHECKS[name]
    issues = run()
    known_file = ROOT / ".ci" / f"known_{name}.txt"
    listed = known_file.read_text(encoding="utf-8").splitlines()
    known = kinds([line for line in listed if not line.startswith("#")])
    found = kinds(issues)
    new = found - known
    if new:
        print("\n".join(line for line in issues if kinds([line]).keys() & new.keys()))
        print(f"{name}: {sum(new.values())} issue(s) beyond {known_file.relative_to(ROOT)}")
        return 1
    fixed = known - found
    note = f"; {sum(fixed.values())} known issue(s) gone, delete their lines: {sorted(fixed)}" * bool(fixed)
    print(f"{name}: passes ({sum(found.values())} known issue(s) in {known_file.relative_to(ROOT)}){note}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        raise SystemExit(f"usage: python .ci/check.py {{{','.join(CHECKS)}}}")
    sys.exit(main(sys.argv[1]))
