"""The one atomic file writer: what geojax writes (an index) and what the training application writes.

The content goes to a temporary file in the destination folder, is flushed to disk, gets ordinary 0644
permissions and is renamed over the destination (``os.replace`` is atomic on POSIX): a reader, or a resumed
run, sees either the old file or the whole new one, never a half-written file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable


def atomic_write(path: str, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (same extension), then rename it to ``path``;
    the folder is created as needed."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:  # what write() left in the OS's buffers reaches the disk first
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
