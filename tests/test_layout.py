"""The rooms of ``train/``: the library imports nothing of the training code, the application
(``train.app``) imports none of the experiments that use it, and the shared helpers (``train.helpers``) import
nothing of the application, so benchmarks and notebooks can use them without it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = (
    "train.reproduce",
    "train.qat",
    "train.evaluate",
    "train.binary_eval",
    "train.export",
    "train.csearch",
)


def _imports(folder: str) -> dict[str, list[str]]:
    """Every module each .py file under ``folder`` imports (absolute names; relative ones with their dots)."""
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        names = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "." * node.level + (node.module or "")
                names += [base] + [f"{base}.{alias.name}" for alias in node.names]
        found[path.relative_to(ROOT).as_posix()] = names
    assert found, f"no Python files under {folder}: the checks below would prove nothing"
    return found


def _reaches(name: str, prefixes: tuple[str, ...]) -> bool:
    return name.startswith(".") or any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        ("geojax", ("train",)),
        ("train/app", EXPERIMENTS),
        ("train/helpers", ("train.app", *EXPERIMENTS)),
    ],
)
def test_no_upward_imports(folder, forbidden):
    for path, names in _imports(folder).items():
        bad = [n for n in names if _reaches(n, forbidden)]
        assert not bad, f"{path} imports {bad}"


def test_helpers_load_without_the_application():
    """Imported in a fresh interpreter, the helpers leave ``train.app`` and the training stack unloaded."""
    helpers = sorted(p.stem for p in (ROOT / "train" / "helpers").glob("*.py") if p.stem != "__init__")
    assert {"files", "plots", "results", "tables", "timing", "version"} <= set(helpers)
    code = (
        "import sys\n"
        + "".join(f"import train.helpers.{h}\n" for h in helpers)
        + "print(sorted(m for m in sys.modules if m.startswith(('train.app', 'flax', 'optax', 'orbax'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
