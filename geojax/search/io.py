"""``write_index`` / ``read_index``: one versioned file format for every index and codec.

A file is a fixed header (magic ``GEOJAXIX``, format version, bytes of the JSON description, CRC-32 of the
description and the arrays), the JSON description (index kind and parameters, codec parameters, and the
name, dtype and shape of each array) and the arrays' bytes, little-endian, in the listed order. A write is
atomic (a temporary file renamed over the destination). ``read_index`` refuses, with one line naming the
path, a file of another format, a format version it does not read, an index or codec other than the one
asked for, and a damaged file (a size other than its header describes, or a checksum that does not match).
With several processes each process writes and reads its own part (give each its own path).
"""

from __future__ import annotations

import json
import os
import struct
import zlib

import jax
import numpy as np

from geojax._files import atomic_write
from geojax.search.codecs import codec_from_state
from geojax.search.flat import IndexFlat
from geojax.search.ivf import IndexIVF

MAGIC = b"GEOJAXIX"
VERSION = 2
_HEADER = struct.Struct("<8sIII")  # magic, format version, bytes of the JSON description, CRC-32
_READ_BLOCK = 1 << 24


_CLASSES = {"flat": IndexFlat, "ivf": IndexIVF}


def write_index(index, path: str) -> None:
    """Write ``index`` (this process's part) to ``path`` atomically.

    ``path`` holds its old content or all of the new (a temporary file renamed over it). The file is the
    header, the JSON description and the arrays' bytes (module docstring).

    Args:
        index: an :class:`geojax.search.IndexFlat` or :class:`geojax.search.IndexIVF`.
        path: the file to write (with several processes, each its own).

    Raises:
        ValueError: ``index`` is not an IndexFlat or IndexIVF.

    Example:
        >>> import os
        >>> import tempfile
        >>> import numpy as np
        >>> from geojax.search import IndexFlat, TorusCodec, read_index, write_index
        >>> index = IndexFlat(TorusCodec(4))
        >>> index.add(np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4]], np.float32))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     write_index(index, os.path.join(folder, "index.gjx"))
        ...     with open(os.path.join(folder, "index.gjx"), "rb") as f:
        ...         f.read(8)  # the magic of the fixed header
        b'GEOJAXIX'
    """
    classes = _CLASSES
    if type(index) not in classes.values():
        raise ValueError(
            f"index must be one of {[c.__name__ for c in classes.values()]}, got {type(index).__name__}"
        )
    meta, arrays = index.state()
    codec_params, codec_arrays = index.codec.state()
    named = [("index", name, np.asarray(a)) for name, a in arrays.items()]
    named += [("codec", name, np.asarray(a)) for name, a in codec_arrays.items()]
    description = {
        "index": index.kind,
        "meta": meta,
        "codec": codec_params,
        "process": jax.process_index(),
        "processes": jax.process_count(),
        "arrays": [[part, name, a.dtype.newbyteorder("<").str, list(a.shape)] for part, name, a in named],
    }
    text = json.dumps(description).encode()
    blobs = [np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes() for _, _, a in named]
    crc = zlib.crc32(text)
    for blob in blobs:
        crc = zlib.crc32(blob, crc)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(MAGIC, VERSION, len(text), crc))
            f.write(text)
            for blob in blobs:
                f.write(blob)

    atomic_write(path, write)


def _read(path: str) -> tuple[dict, dict, dict]:
    """(description, index arrays, codec arrays) of an index file; ValueError for a foreign, newer or
    damaged file."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size or head[:8] != MAGIC:
            raise ValueError(f"path {path!r} is not a geojax index file (its first bytes are not {MAGIC!r})")
        _, version, length, crc = _HEADER.unpack(head)
        if version != VERSION:
            raise ValueError(
                f"path {path!r} is a geojax index file of format version {version}; this geojax reads "
                f"version {VERSION}"
            )
        text = f.read(length)
        try:
            description = json.loads(text.decode())
            specs = [
                (part, name, np.dtype(dtype), tuple(shape))
                for part, name, dtype, shape in description["arrays"]
            ]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"path {path!r} is damaged: its description does not parse ({e})") from None
        expected = _HEADER.size + length + sum(dt.itemsize * int(np.prod(shape)) for _, _, dt, shape in specs)
        if size != expected:
            raise ValueError(
                f"path {path!r} is damaged: it holds {size} bytes; its header describes {expected}"
            )
        check = zlib.crc32(text)
        arrays: dict = {"index": {}, "codec": {}}
        for part, name, dtype, shape in specs:
            blob = f.read(dtype.itemsize * int(np.prod(shape)))
            check = zlib.crc32(blob, check)
            arrays[part][name] = np.frombuffer(blob, dtype).reshape(shape).astype(dtype.newbyteorder("="))
    if check != crc:
        raise ValueError(f"path {path!r} is damaged: its checksum does not match its content")
    return description, arrays["index"], arrays["codec"]


def read_index(path: str, *, kind: str | None = None, codec: str | None = None, **placement):
    """The index written by :func:`write_index` (this process's file), placed on ``placement``.

    Args:
        path: the file to read.
        kind: 'flat' or 'ivf' to refuse any other index; None accepts both.
        codec: 'torus', 'binary' or 'pq' to refuse any other codec; None accepts all.
        **placement: ``mesh``, ``db_axis``, ``query_axis`` as the index's constructor takes.

    Returns:
        The :class:`geojax.search.IndexFlat` or :class:`geojax.search.IndexIVF`.

    Raises:
        ValueError: (one line naming the path) ``kind`` is not None, 'flat' or 'ivf'; the file is of another
            format or of a format version this geojax does not read; it holds another index or codec than
            asked for; it is damaged (a size other than its header describes, a checksum that does not match,
            a description that does not parse).

    Example:
        >>> import os
        >>> import tempfile
        >>> import numpy as np
        >>> from geojax.search import IndexFlat, TorusCodec, read_index, write_index
        >>> index = IndexFlat(TorusCodec(4))
        >>> index.add(np.array([[0.0, 0.25, 0.5, 0.75], [0.1, 0.2, 0.3, 0.4]], np.float32))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     write_index(index, os.path.join(folder, "index.gjx"))
        ...     again = read_index(os.path.join(folder, "index.gjx"), kind="flat", codec="torus")
        >>> type(again).__name__, again.ntotal
        ('IndexFlat', 2)
    """
    classes = _CLASSES
    if kind is not None and kind not in classes:
        raise ValueError(f"kind must be None or one of {list(classes)}, got {kind!r}")
    description, index_arrays, codec_arrays = _read(path)
    found, codec_kind = description["index"], description["codec"]["kind"]
    if kind is not None and found != kind:
        raise ValueError(f"path {path!r} holds a {found!r} index, not the {kind!r} index asked for")
    if codec is not None and codec_kind != codec:
        raise ValueError(f"path {path!r} holds {codec_kind!r} codes, not the {codec!r} codes asked for")
    if found not in classes:
        raise ValueError(f"path {path!r} holds an index of unknown kind {found!r}")
    made = codec_from_state(description["codec"], codec_arrays)
    return classes[found].from_state(made, description["meta"], index_arrays, **placement)
