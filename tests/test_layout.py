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


def _module_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of each import of a module, relative imports resolved; those a type checker alone
    reads (under ``if TYPE_CHECKING``) count too: a circle of types is a circle of the design."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    if path.name == "__init__.py":
        package = ".".join(path.relative_to(ROOT).parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.append((module, [alias.name for alias in node.names]))
    return found


def _own_modules() -> dict[str, Path]:
    """Every module of geojax and train by its dotted name."""
    out = {}
    for folder in ("geojax", "train"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def test_no_module_imports_another_modules_private_name():
    """A name another module uses is public in its own (a private module of a package, ``_softmax``, may be
    imported: the names taken from it may not start with an underscore)."""
    modules = _own_modules()
    bad = []
    for name, path in modules.items():
        for module, names in _module_imports(path):
            if module in modules and module != name:
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                bad += [f"{name} imports {module}.{n}" for n in private if f"{module}.{n}" not in modules]
    assert not bad, "\n".join(bad)


def test_no_import_circle():
    """The modules of geojax and train import each other without a circle (a package imports its own
    modules, which do not import it back)."""
    modules = _own_modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for module, names in _module_imports(path):
            submodules = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            for target in submodules or [module]:
                ancestor = name.startswith(target + ".")  # its own package, loaded before it anyway
                if target in modules and target != name and not ancestor:
                    targets.add(target)
        graph[name] = targets
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):  # a package's own module
                continue
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (circle := visit(start, [])):
            pytest.fail("import circle: " + " → ".join(circle[circle.index(circle[-1]) :]))


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of a function's body, its docstring aside."""
    body = node.body
    documented = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
    first = body[1] if documented and len(body) > 1 else body[0]
    return node.end_lineno - first.lineno + 1


def test_no_function_of_the_application_is_over_60_lines():
    """The training application reads in functions of a page or less: the loop (``prepare``, ``run``) and all
    it calls, each at most 60 lines of code besides its docstring."""
    long = []
    for path in sorted((ROOT / "train" / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({_code_lines(node)} lines)")
    assert not long, "\n".join(long)
    assert _code_lines(ast.parse("def f():\n    '''doc'''\n    a = 1\n    return a\n").body[0]) == 2
