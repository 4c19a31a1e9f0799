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
    """Call ``write(tmp)`` on a temporary path beside ``path``, then rename it to ``path``.

    The temporary file has the same extension and lies in the destination folder (created as needed); it is
    flushed to disk, given 0644 permissions and renamed over ``path`` (``os.replace``, atomic on POSIX), so a
    reader sees either the old file or the whole new one. If ``write`` raises, the temporary file is removed
    and the exception propagates.

    Args:
        path: the destination file.
        write: a function that writes the content to the path it is given.

    Example:
        >>> import os
        >>> import tempfile
        >>> from geojax._files import atomic_write
        >>> def write(tmp):
        ...     with open(tmp, "w") as f:
        ...         f.write("done")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "sub", "a.txt")
        ...     atomic_write(path, write)
        ...     print(open(path).read(), os.listdir(os.path.dirname(path)))
        done ['a.txt']
    """
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
