"""Sphinx configuration of geojax's documentation: the API reference made from the docstrings (autodoc,
Google-style sections through napoleon, every public module through autosummary) and the Markdown pages of
docs/ (MyST). ``sphinx-build -W -b html docs build/docs`` builds it with any warning an error, a broken
cross-reference (nitpicky) or a malformed docstring among them; CI builds it with
``python .ci/check.py docs``, which fails on every warning but those .ci/known_docs.txt lists."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.inspect import TypeAliasForwardRef

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

project = "geojax"
author = "the geojax authors"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}  # autosummary writes .rst
myst_heading_anchors = 3  # `page.md#a-heading` links reach headings down to ###, as on GitHub
root_doc = "index"
exclude_patterns = ["runs", "_templates"]
html_theme = "alabaster"

autosummary_generate = True
# Every public member (_templates/autosummary/module.rst: a package's page documents its __all__'s
# re-exports, a module's page every public member it defines, also those its __all__ leaves out).
autodoc_default_options = {"members": True, "show-inheritance": True}
templates_path = ["_templates"]
autodoc_typehints = "description"
# jax.typing's unions read as their names, not spelled out (Array | ndarray | bool | number | ...)
autodoc_type_aliases = {"ArrayLike": "ArrayLike", "DTypeLike": "DTypeLike"}
# Sphinx 9 writes such an alias inside a union (``ArrayLike | None``) by its repr; make that its name.
TypeAliasForwardRef.__repr__ = lambda self: self.name  # type: ignore[method-assign]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a class's Attributes: as fields of its own entry (its members are documented too)
napoleon_use_rtype = False  # a Returns: section reads as written
# Every cross-reference to geojax must resolve; those to other projects cannot here (no intersphinx
# inventories offline) and are left as text.
nitpicky = True
nitpick_ignore_regex = [(r"py:.*", r"(jax|numpy|flax|collections|abc)\..*|ArrayLike|DTypeLike")]
# docs/search.md is a page of its own (geojax.search), so Sphinx's built-in search page, also search.html,
# is left out: it would replace that page.
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html"]}


def _no_search_page(app: Sphinx) -> None:
    if hasattr(app.builder, "search"):  # the HTML builders' switch for their search page
        app.builder.search = False


def _reexported_doc_comments(app: Sphinx) -> None:
    """Give a package the ``#:`` doc comments of the data its ``__init__.py`` re-exports from its private
    modules (``geojax.models.OWN_WIDTHS``, written in ``geojax/models/_encoders.py``): autodoc reads a
    module's attribute comments from that module's own source only, and would leave them off its page."""
    for init in sorted(Path(ROOT, "geojax").rglob("__init__.py")):
        package = ".".join(init.relative_to(ROOT).parent.parts)
        docs = ModuleAnalyzer.for_module(package).find_attr_docs()
        for node in ast.parse(init.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{package}._"):
                found = ModuleAnalyzer.for_module(node.module).find_attr_docs()
                for alias in node.names:
                    if alias.asname in (None, alias.name) and ("", alias.name) in found:
                        docs.setdefault(("", alias.name), found["", alias.name])


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", _no_search_page)
    app.connect("builder-inited", _reexported_doc_comments)
