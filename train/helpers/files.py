"""Atomic file writers for everything the training application writes.

Each writer renders through :func:`geojax._files.atomic_write` (a temporary file in the destination folder,
renamed over the destination), so a reader — or a resumed run — never sees a half-written report, embedding
file, table or plot. Folders are created as needed; files get ordinary 0644 permissions.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from geojax._files import atomic_write


def write_text(path: str, text: str) -> None:
    """Write UTF-8 text atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def write_bytes(path: str, blob: bytes | bytearray) -> None:
    """Write bytes atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(blob)

    atomic_write(path, write)


def json_safe(value: Any) -> Any:
    """A strict-JSON copy: NaN / ±inf → None, NumPy values → Python, tuples → lists, keys → str."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str, obj: Any, *, indent: int = 1) -> None:
    """Write ``obj`` as strict JSON (non-finite numbers as null, a final newline) atomically."""
    write_text(path, json.dumps(json_safe(obj), indent=indent, allow_nan=False) + "\n")


def write_npz(path: str, **arrays: np.ndarray) -> None:
    """Write a NumPy .npz archive atomically (``path`` should end in .npz)."""
    atomic_write(path, lambda tmp: np.savez(tmp, **arrays))


def figure(*, figsize: tuple[float, float]):
    """A matplotlib Figure outside pyplot: no backend switch, no global figure list (safe in notebooks)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def write_figure(fig, path: str, *, dpi: int = 100) -> None:
    """Save a matplotlib figure as PNG atomically."""
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
