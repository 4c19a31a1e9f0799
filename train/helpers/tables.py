"""Markdown tables: the one writer behind every table the app, the reproduction and the benchmarks print.

>>> print(markdown_table(["method", "P@1"], [["float32", 0.99125], ["1-bit", None]], align="lr"))
| method | P@1 |
|:---|---:|
| float32 | 0.9912 |
| 1-bit | – |
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MISSING = "–"  # what an absent value (None, NaN) prints as
_RULES = {"l": ":---", "r": "---:", "c": ":---:", "-": "---"}


def fmt(value: Any, digits: int = 4) -> str:
    """One cell: None / NaN → '–', floats with ``digits`` decimals, everything else ``str``.

    Args:
        value: the cell's value.
        digits: decimals of a float, ≥ 0.

    Returns:
        The cell's text.

    Example:
        >>> fmt(0.99125), fmt(None), fmt(3), fmt(True)
        ('0.9912', '–', '3', 'True')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], *, align: str | None = None, digits: int = 4
) -> str:
    """A GitHub-flavoured Markdown table (no trailing newline).

    Args:
        header: the column names.
        rows: one sequence of cells per row, one cell per column (cells pass through :func:`fmt`, so strings
            are kept as they are).
        align: one letter per column, ``l`` / ``r`` / ``c`` or ``-`` (None: ``-`` for every column).
        digits: decimals of a float cell.

    Returns:
        The table: a header line, a rule line and one line per row, joined by newlines.

    Raises:
        ValueError: a row or ``align`` does not have one entry per column, or ``align`` holds another
            letter.
    """
    width = len(header)
    align = align if align is not None else "-" * width
    if len(align) != width or set(align) - set(_RULES):
        raise ValueError(f"align must have one of 'l', 'r', 'c', '-' per column ({width}), got {align!r}")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(_RULES[a] for a in align) + "|"]
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"rows[{i}] must have {width} cells (one per column), got {len(row)}")
        lines.append("| " + " | ".join(fmt(cell, digits) for cell in row) + " |")
    return "\n".join(lines)
