"""glibc's malloc told to keep the memory a process frees, so that the next step reuses it.

By default glibc serves an allocation above its mmap threshold (128 KiB at start, rising with the blocks
freed to at most 32 MiB) with a fresh ``mmap`` and unmaps it on ``free``, and it gives the free top of its
heap back to the system. XLA's CPU runtime and torch's CPU tensors allocate a step's temporaries anew at
every call, so each call faults in every page of them again: on a 2-core AMD EPYC, ProxyAnchor's fwd+bwd
against 1,000 proxies at N = 4096 took 23.4 ms by default and 13.3 ms with the memory kept, SupCon's at
N = 4096 128 ms and 72 ms (``python -m benchmarks.losses --malloc keep``, docs/performance.md).

:func:`keep_freed_memory` makes every allocation below a bound come from one heap shared by all threads and
never trims it, so a process's resident memory stays at its peak instead of following each step's
temporaries up and down. :func:`keep_unless_set` does so unless the environment already sets glibc's malloc;
``python -m train`` calls it first thing.

    >>> from train.helpers import allocator
    >>> kept = allocator.keep_freed_memory()  # False, and nothing changed, where the C library is not glibc
    >>> allocator.set_by_environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})
    True
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

# mallopt's parameters, from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
KEEP_BELOW = 1 << 30  # allocations below 1 GiB come from the heap
_INT_MAX = 2**31 - 1  # mallopt takes a C int
# The environment variables glibc's malloc reads at start-up (glibc's manual, "Memory Allocation Tunables"),
# besides the glibc.malloc.* tunables of GLIBC_TUNABLES
MALLOC_VARIABLES = (
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_CHECK_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_PERTURB_",
    "MALLOC_TOP_PAD_",
    "MALLOC_TRIM_THRESHOLD_",
)


def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc (it exports ``gnu_get_libc_version``), else None."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:  # Windows: no process-wide symbol table
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def is_glibc() -> bool:
    """Whether this process's C library is glibc, whose malloc :func:`keep_freed_memory` sets.

    Returns:
        True on glibc (most Linux distributions); False on macOS, musl and Windows.
    """
    return _glibc() is not None


def keep_freed_memory(below: int = KEEP_BELOW) -> bool:
    """Serve each allocation of fewer than ``below`` bytes from the heap, and never give the heap back.

    One heap for every thread, too: a thread's own arena holds at most 64 MiB, so a larger block allocated
    by a worker thread (XLA's, torch's) would still be mapped anew at each call. The process-wide equivalent
    of starting it with ``MALLOC_MMAP_THRESHOLD_=below``, ``MALLOC_TRIM_THRESHOLD_=2147483647`` and
    ``MALLOC_ARENA_MAX=1``. It applies to the allocations made after the call, by threads that have not
    allocated yet: call it first thing, before JAX or torch start their threads.

    Args:
        below: the mmap threshold in bytes, in (0, 2**31).

    Returns:
        True where glibc took the three settings; False where the C library is not glibc (macOS, musl,
        Windows), and nothing changed.

    Raises:
        ValueError: ``below`` is not an int in (0, 2**31).
    """
    if isinstance(below, bool) or not isinstance(below, int) or not 0 < below <= _INT_MAX:
        raise ValueError(f"below must be an int in (0, 2**31) bytes, got {below!r}")
    libc = _glibc()
    if libc is None:
        return False
    settings = ((M_ARENA_MAX, 1), (M_MMAP_THRESHOLD, below), (M_TRIM_THRESHOLD, _INT_MAX))
    return all([bool(libc.mallopt(param, value)) for param, value in settings])  # a list: each is set


def set_by_environment(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` sets glibc's malloc itself.

    That is, it holds one of :data:`MALLOC_VARIABLES`, or a ``glibc.malloc.`` tunable in ``GLIBC_TUNABLES``
    (``glibc.malloc.hugetlb=1``, say).

    Args:
        environ: the environment, name to value.

    Returns:
        True when one of them is there, even empty.
    """
    tunables = environ.get("GLIBC_TUNABLES", "").split(":")
    return any(name in environ for name in MALLOC_VARIABLES) or any(
        t.strip().startswith("glibc.malloc.") for t in tunables
    )


def keep_unless_set(environ: Mapping[str, str] | None = None) -> str:
    """:func:`keep_freed_memory` with its default bound, unless the environment sets glibc's malloc itself.

    What ``python -m train`` does before it imports JAX: mallopt's settings would override the ones a user
    started the process with, so the process keeps them when the user chose any. The opt-out:
    ``MALLOC_PERTURB_=0 python -m train …`` (glibc's own default for that variable) runs under glibc's usual
    settings.

    Args:
        environ: the environment (None: this process's, ``os.environ``).

    Returns:
        ``"kept"`` (the memory is kept), ``"environment"`` (left as the environment set it) or ``"not glibc"``
        (nothing changed: the C library is not glibc).
    """
    if set_by_environment(os.environ if environ is None else environ):
        return "environment"
    return "kept" if keep_freed_memory() else "not glibc"
