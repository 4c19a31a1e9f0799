"""Read and pack ``codes.gjt``, the packed torus codes of ``python -m train.export``, with numpy alone.

This file imports only numpy and the standard library, so it can be copied beside a deployment. Layout
(little-endian; ``geojax_torus.h`` reads the same fixed fields):

====== ======= =====================================================================
offset type    field
====== ======= =====================================================================
0      8 bytes magic ``GJTORUS\\0``
8      uint32  format version (1)
12     uint32  bits per angle b ∈ {1, 2, 4, 8}
16     uint32  angles per vector D
20     uint32  bytes per code, D·b/8
24     uint64  number of codes N
32     uint32  length L of the JSON header that follows (UTF-8)
36     L bytes JSON header: the fields above, codes_offset, labels_offset, labels dtype, extras
…      N·D·b/8 codes, from codes_offset (a multiple of 8); 8/b codes per byte, little-endian lanes
…      N·4     int32 labels, from labels_offset (a multiple of 8)
====== ======= =====================================================================

A code is round(2^b·t) mod 2^b of the angle t in turns (Stowell 2026, §4); the distance of two codes is
Σ_k min(d_k, 2^b − d_k) with d_k = (a_k − c_k) mod 2^b.
"""

from __future__ import annotations

import json
import struct
from typing import Any, NamedTuple

import numpy as np

MAGIC = b"GJTORUS\0"
VERSION = 1
_FIXED = struct.Struct("<8sIIIIQI")  # magic, version, bits, dim, row_bytes, count, json length
BITS = (1, 2, 4, 8)


class Codes(NamedTuple):
    """A read ``codes.gjt``: packed codes [N, D·b/8] uint8, labels [N] int32, b, D and the JSON header."""

    codes: np.ndarray
    labels: np.ndarray
    bits: int
    dim: int
    header: dict[str, Any]


def _align8(n: int) -> int:
    return -(-n // 8) * 8


def pack_codes(
    codes: np.ndarray,
    labels: np.ndarray,
    *,
    bits: int,
    dim: int,
    extra: dict[str, Any] | None = None,
) -> tuple[bytes, dict[str, Any]]:
    """The file's bytes for packed codes [N, D·b/8] uint8 and labels [N] (int32), and its JSON header
    (``train.export.write_codes`` writes them atomically)."""
    codes = np.ascontiguousarray(codes)
    labels = np.ascontiguousarray(labels, dtype="<i4")
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] * 8 != dim * bits:
        raise ValueError(
            f"codes must be uint8 [N, {dim * bits / 8:g}] for {dim} angles of {bits} bits, got "
            f"{codes.dtype} {codes.shape}"
        )
    if labels.shape != (codes.shape[0],):
        raise ValueError(f"labels must have shape ({codes.shape[0]},), got {labels.shape}")
    n, row = codes.shape
    header = {
        "version": VERSION,
        "bits": bits,
        "dim": dim,
        "row_bytes": row,
        "count": n,
        "labels_dtype": "<i4",
        "distance": "wraparound L1 on b-bit codes",
        **(extra or {}),
    }
    # The offsets depend on the header's own length: settle them by fixed point (they only grow).
    header.update(codes_offset=0, labels_offset=0)
    while True:
        text = json.dumps(header, sort_keys=True).encode()
        codes_offset = _align8(_FIXED.size + len(text))
        labels_offset = _align8(codes_offset + n * row)
        if (header["codes_offset"], header["labels_offset"]) == (codes_offset, labels_offset):
            break
        header.update(codes_offset=codes_offset, labels_offset=labels_offset)
    blob = bytearray(labels_offset + 4 * n)
    blob[: _FIXED.size] = _FIXED.pack(MAGIC, VERSION, bits, dim, row, n, len(text))
    blob[_FIXED.size : _FIXED.size + len(text)] = text
    blob[codes_offset : codes_offset + n * row] = codes.tobytes()
    blob[labels_offset:] = labels.tobytes()
    return bytes(blob), header


def read_codes(path: str) -> Codes:
    """Read a ``codes.gjt`` file (memory-mapped: the codes are not copied)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    if raw.size < _FIXED.size:
        raise ValueError(f"{path}: too short for a codes.gjt header")
    magic, version, bits, dim, row, n, length = _FIXED.unpack(bytes(raw[: _FIXED.size]))
    if magic != MAGIC or version != VERSION:
        raise ValueError(
            f"{path}: not a version-{VERSION} codes.gjt file (magic {magic!r}, version {version})"
        )
    header = json.loads(bytes(raw[_FIXED.size : _FIXED.size + length]).decode())
    start, lab = header["codes_offset"], header["labels_offset"]
    if raw.size < lab + 4 * n or row * 8 != dim * bits:
        raise ValueError(f"{path}: truncated or inconsistent ({raw.size} bytes for {n} codes of {row} bytes)")
    codes = raw[start : start + n * row].reshape(n, row)
    labels = raw[lab : lab + 4 * n].view("<i4")
    return Codes(codes, labels, int(bits), int(dim), header)


def unpack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Packed codes [N, B] uint8 → one code per angle [N, 8B/b] uint8 (little-endian lanes)."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    if bits == 8:
        return np.asarray(codes)
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    lanes = (np.asarray(codes)[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return lanes.reshape(*codes.shape[:-1], codes.shape[-1] * (8 // bits))
