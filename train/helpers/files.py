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
    """Write UTF-8 text atomically.

    Args:
        path: the file to write (replaced when it exists; its folder is created).
        text: the text, written as it is (no newline added).
    """

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)

    atomic_write(path, write)


def write_bytes(path: str, blob: bytes | bytearray) -> None:
    """Write bytes atomically.

    Args:
        path: the file to write (replaced when it exists; its folder is created).
        blob: the bytes.
    """

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(blob)

    atomic_write(path, write)


def json_safe(value: Any) -> Any:
    """A strict-JSON copy: NaN / ±inf → None, NumPy values → Python, tuples → lists, keys → str.

    Args:
        value: a value made of dicts, lists, tuples, NumPy arrays and scalars, and Python scalars; other
            objects are returned as they are.

    Returns:
        The copy, which ``json.dumps(..., allow_nan=False)`` accepts when its leaves are JSON types.

    Example:
        >>> json_safe({1: (np.float32(0.5), float("nan")), "a": np.arange(2)})
        {'1': [0.5, None], 'a': [0, 1]}
    """
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
    """Write ``obj`` as strict JSON (non-finite numbers as null, a final newline) atomically.

    Args:
        path: the file to write (replaced when it exists; its folder is created).
        obj: the value to write, made JSON-safe by :func:`json_safe`.
        indent: JSON indentation, in spaces.
    """
    write_text(path, json.dumps(json_safe(obj), indent=indent, allow_nan=False) + "\n")


def write_npz(path: str, **arrays: np.ndarray) -> None:
    """Write a NumPy .npz archive atomically (``path`` should end in .npz).

    Args:
        path: the file to write, ending in .npz (``np.savez`` would otherwise add it to the temporary file).
        **arrays: the arrays, by the names they get in the archive.
    """
    atomic_write(path, lambda tmp: np.savez(tmp, **arrays))


def write_figure(fig, path: str, *, dpi: int = 100) -> None:
    """Save a matplotlib figure as PNG atomically.

    Args:
        fig: the ``matplotlib.figure.Figure``.
        path: the PNG file to write (replaced when it exists; its folder is created).
        dpi: the resolution in dots per inch.
    """
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
