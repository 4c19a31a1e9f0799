"""The front door and the pages: README stays short, its Python example runs as written, and every relative
link of README, docs/*.md and colab/README.md reaches a file that exists and, for ``#anchor``, a heading
there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "colab" / "README.md", *(ROOT / "docs").glob("*.md")])
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """The anchor MyST and GitHub give a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def test_readme_is_a_front_door():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


def test_readme_example_runs_as_written():
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102  (README's own example)
    assert scope["loss"].shape == () and bool(scope["loss"] == scope["loss"])  # finite
    assert scope["dist"].shape == (8, 5) and 0.0 <= scope["p1"] <= 1.0


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_its_target(page):
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor} in {where.name}")
    assert not broken, "\n".join(broken)


def test_the_link_check_catches_a_missing_file_and_a_missing_anchor(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Some `code` heading\n")
    page.write_text("[a](other.md#some-code-heading) [b](missing.md) [c](other.md#nowhere)\n")
    with pytest.raises(AssertionError) as caught:
        test_every_relative_link_reaches_its_target(page)
    assert "missing.md: no such file" in str(caught.value)
    assert "other.md#nowhere: no heading #nowhere" in str(caught.value)
    assert "some-code-heading" not in str(caught.value)
