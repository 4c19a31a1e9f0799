"""Build ``geojax_torus.h`` into a shared library with the system C compiler and call it through ctypes
(numpy and the standard library only): what the tests and benchmarks use to check and time the C search."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from importlib import resources

import numpy as np

HEADER = "geojax_torus.h"
FLAGS = ("-std=c99", "-O3", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-shared", "-fPIC")


def header_path() -> str:
    """Path of the installed ``geojax_torus.h`` (package data of train.csearch)."""
    return str(resources.files("train.csearch").joinpath(HEADER))


def compiler() -> str | None:
    """The system C compiler ($CC, else cc, gcc or clang), or None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


class _DB(ctypes.Structure):
    _fields_ = [
        ("bits", ctypes.c_uint32),
        ("dim", ctypes.c_uint32),
        ("row_bytes", ctypes.c_uint32),
        ("count", ctypes.c_uint64),
        ("codes", ctypes.c_void_p),
        ("labels", ctypes.c_void_p),
    ]


class Library:
    """The compiled header: ``topk`` and ``open_db`` on numpy arrays."""

    def __init__(self, folder: str, *, extra_flags: tuple[str, ...] = ()):
        cc = compiler()
        if cc is None:
            raise RuntimeError("no C compiler found ($CC, cc, gcc, clang)")
        source = os.path.join(folder, "gjt_impl.c")
        with open(source, "w") as f:
            f.write(f'#define GEOJAX_TORUS_IMPLEMENTATION\n#include "{header_path()}"\n')
        path = os.path.join(folder, "libgjt.so")
        subprocess.run(
            [cc, *FLAGS, *extra_flags, source, "-o", path], check=True, capture_output=True, text=True
        )
        self.lib = ctypes.CDLL(path)
        u8, u32 = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint32)
        self.lib.gjt_topk_batch.restype = ctypes.c_uint32
        self.lib.gjt_topk_batch.argtypes = [
            u8,
            ctypes.c_uint64,
            u8,
            ctypes.c_uint64,
            ctypes.c_uint32,
            ctypes.c_uint32,
            ctypes.c_uint32,
            u32,
            u32,
        ]
        self.lib.gjt_open.restype = ctypes.c_int
        self.lib.gjt_open.argtypes = [u8, ctypes.c_size_t, ctypes.POINTER(_DB)]
        self.lib.gjt_label.restype = ctypes.c_int32
        self.lib.gjt_label.argtypes = [ctypes.POINTER(_DB), ctypes.c_uint64]

    def topk(
        self, queries: np.ndarray, codes: np.ndarray, k: int, *, bits: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(distances [Q, k] uint32, indices [Q, k] uint32) of ``gjt_topk_batch`` on packed uint8 codes."""
        queries = np.ascontiguousarray(queries, np.uint8)
        codes = np.ascontiguousarray(codes, np.uint8)
        if queries.shape[1] != codes.shape[1]:
            raise ValueError(
                f"queries and codes must have the same width, got {queries.shape}, {codes.shape}"
            )
        nq, n = len(queries), len(codes)
        dist = np.zeros((nq, k), np.uint32)
        index = np.zeros((nq, k), np.uint32)
        u8, u32 = ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint32)
        found = self.lib.gjt_topk_batch(
            queries.ctypes.data_as(u8),
            nq,
            codes.ctypes.data_as(u8),
            n,
            codes.shape[1],
            bits,
            k,
            dist.ctypes.data_as(u32),
            index.ctypes.data_as(u32),
        )
        if nq and found != min(k, n):
            raise ValueError(f"gjt_topk_batch found {found} results, expected {min(k, n)} (bits = {bits}?)")
        return dist, index

    def open_db(self, blob: bytes) -> tuple[int, int, int, np.ndarray, np.ndarray]:
        """(bits, dim, count, codes, labels) as ``gjt_open`` and ``gjt_label`` read a codes.gjt image."""
        buf = np.frombuffer(blob, np.uint8)
        db = _DB()
        if self.lib.gjt_open(buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), len(buf), ctypes.byref(db)):
            raise ValueError("gjt_open rejected the image")
        start = db.codes - buf.ctypes.data
        codes = buf[start : start + db.count * db.row_bytes].reshape(db.count, db.row_bytes)
        labels = np.array([self.lib.gjt_label(ctypes.byref(db), i) for i in range(db.count)], np.int32)
        return db.bits, db.dim, db.count, codes, labels
