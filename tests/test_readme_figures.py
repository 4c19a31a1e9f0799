"""README and the pages that quote measurements hold only figures that their files hold.

The pages: README.md and docs/training.md, docs/performance.md, docs/losses.md. The convention:
a page's unit of text is a paragraph (consecutive lines outside code blocks and tables) or
one table row. A unit that quotes measured figures links the JSON file(s) that hold them
(``[losses.json](benchmarks/results/losses.json)``, ``docs/reproduce_*.json``), and then every number in
it — outside inline code and link targets, and not glued to a word as in ``ResNet-18`` or ``fp32`` — must be
held by one of those files: a number in the file (a JSON number, or a number written inside one of its
strings, its ``command`` line left out) equal to README's once rounded to README's decimals (``≈`` or
``about`` before a round number: to its last non-zero digit). Dates (``2026-11-25``) must be a file's date
and versions (``0.10.2``) one of its versions. A unit that quotes a speed, time, memory or ratio without
linking a file fails too. Files listed in :data:`PENDING` (not yet written, or written by a run whose figures
README does not quote yet) are skipped, and listed, until they are dropped from it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = (README, *(ROOT / "docs" / f"{name}.md" for name in ("training", "performance", "losses")))
# Files whose figures README does not quote yet (not written, or from a newer run): skipped while listed.
PENDING: set[str] = set()

_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
_CODE = re.compile(r"`[^`]*`")
_DATE = re.compile(r"(?<!\d)(\d{4}-\d{2}-\d{2})(?!\d)")
_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+\.\d+)(?:\.\d+)?")
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_PAIR = re.compile(rf"(?<![\w.,])({_NUM}) ?± ?({_NUM})(?![\w])")  # mean ± sd: held only as a pair
_NUMBER = re.compile(
    r"(?<![\w.,])(?<![A-Za-z]-)(?P<approx>(?:≈|~|about |around )?)"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?![\w])"
)
_PERFORMANCE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s|CPU-s|CPU-ms|µs|MiB|GiB|GB|MB|×(?!\s?\d)|%|GFLOP/s|TFLOP/s|"
    r"images/s|queries/s|G/s|GB/s)(?![\w/])"
)


@dataclasses.dataclass(frozen=True)
class Unit:
    """A paragraph or table row of a page: its first line number, its text, the JSON files it links and the
    page."""

    line: int
    text: str
    files: tuple[str, ...]
    page: str = "README.md"


@dataclasses.dataclass(frozen=True)
class Figures:
    """What a file holds: its numbers (absolute values), ``mean ± sd`` pairs, dates and versions."""

    numbers: tuple[float, ...]
    pairs: tuple[tuple[str, str], ...]
    dates: frozenset[str]
    versions: frozenset[str]


def units(markdown: str) -> list[Unit]:
    """README's paragraphs and table rows (table header rows and code blocks left out), in order."""
    out, block, start, fenced = [], [], 0, False
    lines = markdown.splitlines()

    def flush():
        if block:
            text = " ".join(block)
            files = tuple(t for _, t in _LINK.findall(text) if t.endswith(".json"))
            out.append(Unit(start, text, files))
            block.clear()

    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("|"):
            flush()
            is_header = i < len(lines) and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i].strip())
            is_rule = re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip())
            if not (is_header or is_rule):
                block.append(line)
                start = i
                flush()
            continue
        if not line.strip() or line.startswith("#"):
            flush()
            continue
        if not block:
            start = i
        block.append(line.strip())
    flush()
    return out


def _plain(text: str) -> str:
    """``text`` without inline code and link targets (a link to a JSON file loses its text as well)."""
    text = _CODE.sub(" ", text)
    return _LINK.sub(lambda m: " " if m.group(2).endswith(".json") else m.group(1), text)


def tokens(text: str) -> tuple[list[tuple[str, bool]], list[tuple[str, str]], list[str], list[str]]:
    """The numbers (as written, and whether ``≈`` / ``about`` precedes them), ``mean ± sd`` pairs, dates and
    versions in ``text`` (a pair's, a date's or a version's digits are not read as numbers)."""
    pairs = _PAIR.findall(text)
    text = _PAIR.sub(" ", text)
    dates = _DATE.findall(text)
    text = _DATE.sub(" ", text)
    versions = _VERSION.findall(text)
    text = _VERSION.sub(" ", text)
    numbers = [(m.group("num"), bool(m.group("approx"))) for m in _NUMBER.finditer(text)]
    return numbers, pairs, dates, versions


def held(record: object) -> Figures:
    """Every number, date and version in a results or reproduction file (its ``command`` left out)."""
    numbers, pairs, dates, versions = [], [], set(), set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key != "command":
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, (int, float)):
            numbers.append(abs(float(value)))
        elif isinstance(value, str):
            found, found_pairs, found_dates, found_versions = tokens(value)
            numbers.extend(abs(float(n.replace(",", ""))) for n, _ in found)
            pairs.extend(found_pairs)
            dates.update(found_dates)
            versions.update(found_versions)

    walk(record)
    return Figures(tuple(numbers), tuple(pairs), frozenset(dates), frozenset(versions))


def tolerance(written: str, approx: bool) -> float:
    """Half a unit of the last digit README wrote (of its last non-zero digit after ``≈`` / ``about``)."""
    digits = written.replace(",", "")
    if "e" in digits:
        mantissa, exponent = digits.split("e")
        return tolerance(mantissa, False) * 10 ** int(exponent)
    if "." in digits:
        return 0.5 * 10 ** -len(digits.split(".")[1])
    zeros = len(digits) - len(digits.rstrip("0")) if approx and digits.strip("0") else 0
    return 0.5 * 10**zeros


def _rounds_to(written: str, value: float | str, approx: bool) -> bool:
    """Whether ``value`` (a number, or one written in a file) rounds to README's ``written``."""
    value = abs(float(value.replace(",", ""))) if isinstance(value, str) else value
    return abs(value - float(written.replace(",", ""))) <= tolerance(written, approx) * (1 + 1e-9)


def problems(unit: Unit, records: dict[str, Figures]) -> list[str]:
    """What ``unit`` quotes that none of its files holds (empty: every figure is held)."""
    got = [records[f] for f in unit.files if f in records]  # a pending file holds nothing yet
    numbers, pairs, dates, versions = tokens(_plain(unit.text))
    out = []
    for written, approx in numbers:
        if not any(_rounds_to(written, v, approx) for r in got for v in r.numbers):
            out.append(f"{unit.page} line {unit.line}: {written} is in none of {', '.join(unit.files)}")
    for mean, sd in pairs:
        if not any(_rounds_to(mean, m, False) and _rounds_to(sd, s, False) for r in got for m, s in r.pairs):
            out.append(f"{unit.page} line {unit.line}: {mean} ± {sd} is in none of {', '.join(unit.files)}")
    out += [
        f"{unit.page} line {unit.line}: date {d} is no date of {unit.files}"
        for d in dates
        if not any(d in r.dates for r in got)
    ]
    out += [
        f"{unit.page} line {unit.line}: version {v} is no version in {unit.files}"
        for v in versions
        if not any(v in r.versions for r in got)
    ]
    return out


def _readme_units() -> list[Unit]:
    """Every page's units, each linked file named from the repository's root (a page in docs/ links
    ``../benchmarks/results/...``), each unit's line prefixed with its page."""
    out = []
    for page in PAGES:
        for unit in units(page.read_text(encoding="utf-8")):
            files = tuple((page.parent / f).resolve().relative_to(ROOT).as_posix() for f in unit.files)
            out.append(Unit(unit.line, unit.text, files, page.relative_to(ROOT).as_posix()))
    return out


def _records(files) -> dict[str, Figures]:
    return {f: held(json.loads((ROOT / f).read_text(encoding="utf-8"))) for f in files}


def _linked() -> list[str]:
    return sorted({f for u in _readme_units() for f in u.files})


# ----------------------------------------------------------------------------------------------------------


def test_readme_links_results_files():
    linked = _linked()
    assert any(f.startswith("benchmarks/results/") for f in linked)
    missing = [f for f in linked if not (ROOT / f).exists() and f not in PENDING]
    assert not missing, f"README links files that do not exist: {missing}"


@pytest.mark.parametrize("path", _linked())
def test_every_quoted_figure_is_in_its_file(path):
    checked = [u for u in _readme_units() if path in u.files]
    if path in PENDING or not (ROOT / path).exists():
        pending = "\n".join(f"{u.page} line {u.line}: {u.text[:100]}" for u in checked)
        pytest.skip(f"{path} pending; its figures are checked once it leaves PENDING:\n{pending}")
    records = _records({f for u in checked for f in u.files if (ROOT / f).exists() or f == path})
    found = [p for u in checked for p in problems(u, records)]
    assert not found, "\n".join(found)


def test_every_performance_figure_names_its_file():
    unlinked = [u for u in _readme_units() if not u.files and _PERFORMANCE.search(_plain(u.text))]
    assert not unlinked, "\n".join(
        f"{u.page} line {u.line}: {_PERFORMANCE.search(_plain(u.text)).group(0)!r} in {u.text[:90]!r}"
        for u in unlinked
    )


def test_the_checker_catches_a_figure_its_file_does_not_hold():
    losses = [u for u in _readme_units() if u.files == ("benchmarks/results/losses.json",)]  # its table rows
    assert losses
    records = _records({f for u in losses for f in u.files})
    unit = losses[0]
    assert problems(unit, records) == []
    planted = dataclasses.replace(unit, text=unit.text + " and 123.456 ms on Tuesday")
    assert problems(planted, records) == [
        f"{unit.page} line {unit.line}: 123.456 is in none of {', '.join(unit.files)}"
    ]
    # A figure with its last digit changed is caught (unless the file happens to hold the changed value
    # elsewhere: then the next change is tried; most of the nine must be caught). The figure with the most
    # digits is changed: a two-digit ratio's neighbours are often other rows' ratios.
    written, _ = max(tokens(_plain(unit.text))[0], key=lambda t: sum(c.isdigit() for c in t[0]))
    head, _, tail = unit.text.rpartition(written)
    bumped = [head + written[:-1] + str((int(written[-1]) + d) % 10) + tail for d in range(1, 10)]
    caught = [bool(problems(dataclasses.replace(unit, text=b), records)) for b in bumped]
    assert sum(caught) >= 6, (written, caught)
    assert problems(dataclasses.replace(unit, text=unit.text + " on 1999-01-01 with jax 9.9.9"), records) == [
        f"{unit.page} line {unit.line}: date 1999-01-01 is no date of {unit.files}",
        f"{unit.page} line {unit.line}: version 9.9.9 is no version in {unit.files}",
    ]


def test_tokens_and_rounding():
    numbers, pairs, dates, versions = tokens(
        "ResNet-18 on x86 fp32: 1,024 × 7.0 ms ≈2,700× (jax 0.10.2, 2026-11-25), 68.4 ± 2.2 %"
    )
    assert numbers == [("1,024", False), ("7.0", False), ("2,700", True)]
    assert (pairs, dates, versions) == ([("68.4", "2.2")], ["2026-11-25"], ["0.10.2"])
    assert tolerance("7.0", False) == pytest.approx(0.05)
    assert tolerance("2,700", True) == 50 and tolerance("2,700", False) == 0.5
    figures = held({"command": "x.py --n 5", "ms": 7.04, "note": "N=1024, 61.5 ± 3.0 (1.8)", "gap": -3.7})
    assert sorted(figures.numbers) == [1.8, 3.7, 7.04, 1024] and figures.pairs == (("61.5", "3.0"),)
    unit = Unit(1, "7.0 ms, Δ 3.7, N = 1,024, 61.5 ± 3.0 [f](r.json)", ("r.json",))
    assert problems(unit, {"r.json": figures}) == []
    # an sd is held only beside its mean: 1.8 is in the file, but not as 61.5's sd
    assert problems(dataclasses.replace(unit, text="61.5 ± 1.8"), {"r.json": figures})
    assert problems(dataclasses.replace(unit, text="7.1 ms"), {"r.json": figures})
    assert problems(dataclasses.replace(unit, text="5 runs"), {"r.json": figures})  # the command is no figure


def test_units_split_paragraphs_and_table_rows():
    text = "a 1 [x](a.json)\nb 2\n\n| h | v |\n|---|---:|\n| r | 3 [y](b.json) |\n\n```\n4 ms\n```\nc 5 ms\n"
    assert units(text) == [
        Unit(1, "a 1 [x](a.json) b 2", ("a.json",)),
        Unit(6, "| r | 3 [y](b.json) |", ("b.json",)),
        Unit(11, "c 5 ms", ()),
    ]
