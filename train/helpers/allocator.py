"""glibc's malloc told not to fault a step's temporaries in again at every call.

By default glibc serves an allocation above its mmap threshold (128 KiB at start, rising with the blocks
freed to at most 32 MiB) with a fresh ``mmap`` and unmaps it on ``free``, and it gives the free top of its
heap back to the system. XLA's CPU runtime and torch's CPU tensors allocate a step's temporaries anew at
every call, so each call faults in every page of them again: on a 2-core AMD EPYC, ProxyAnchor's fwd+bwd
against 1,000 proxies at N = 4096 took 23.4 ms by default and 13.3 ms with the memory kept, SupCon's at
N = 4096 128 ms and 72 ms (``python -m benchmarks.losses --malloc keep``, docs/performance.md).

Two remedies, and :func:`start` picks one for ``python -m train``:

- **huge pages** (:data:`HUGETLB`, glibc ≥ 2.35 with transparent huge pages in ``madvise`` or ``always``
  mode): malloc asks the kernel for 2 MiB pages behind its large blocks, so a fresh block faults in once
  per 2 MiB, not once per 4 KiB. A tunable is read only when the process starts, so :func:`start`
  re-executes the command with it in the environment.
- **kept memory** (:func:`keep_freed_memory`): every allocation below a bound comes from one heap shared by
  all threads, never trimmed, so resident memory stays at its peak. The one heap's lock slows steps made of
  many small operations (XLA's threads wait on it), which huge pages do not.

    >>> from train.helpers import allocator
    >>> kept = allocator.keep_freed_memory()  # False, and nothing changed, where the C library is not glibc
    >>> allocator.set_by_environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"})
    True
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Mapping, Sequence

# mallopt's parameters, from glibc's <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
KEEP_BELOW = 1 << 30  # allocations below 1 GiB come from the heap
_INT_MAX = 2**31 - 1  # mallopt takes a C int
HUGETLB = "glibc.malloc.hugetlb=1"  # the tunable: madvise(MADV_HUGEPAGE) on malloc's large blocks and heap
HUGETLB_SINCE = (2, 35)  # the first glibc that reads it
TRANSPARENT_HUGEPAGES = "/sys/kernel/mm/transparent_hugepage/enabled"  # e.g. "always [madvise] never"
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


def glibc_version() -> tuple[int, int] | None:
    """The version of this process's glibc.

    Returns:
        (major, minor), e.g. (2, 36); None where the C library is not glibc.
    """
    libc = _glibc()
    if libc is None:
        return None
    libc.gnu_get_libc_version.restype = ctypes.c_char_p
    major, minor = libc.gnu_get_libc_version().decode().split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def transparent_hugepages(path: str = TRANSPARENT_HUGEPAGES) -> str | None:
    """The kernel's transparent huge page mode: ``"always"``, ``"madvise"`` or ``"never"``.

    Args:
        path: the sysfs file that names it, the chosen mode in brackets.

    Returns:
        The mode; None where the file cannot be read (not Linux, a kernel without them).
    """
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    chosen = [word[1:-1] for word in text.split() if word.startswith("[") and word.endswith("]")]
    return chosen[0] if len(chosen) == 1 else None


def huge_pages_available(version: tuple[int, int] | None, mode: str | None) -> bool:
    """Whether :data:`HUGETLB` takes effect.

    Glibc reads it from 2.35 on, and the kernel grants huge pages on request (mode ``madvise``) or always.

    Args:
        version: glibc's (major, minor), None when the C library is not glibc (:func:`glibc_version`).
        mode: the transparent huge page mode (:func:`transparent_hugepages`).

    Returns:
        True where both hold.
    """
    return version is not None and version >= HUGETLB_SINCE and mode in ("always", "madvise")


def with_huge_pages(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with :data:`HUGETLB` added to its ``GLIBC_TUNABLES``.

    Args:
        environ: an environment, name to value; its tunables, if any, stay first.

    Returns:
        A new environment, ``environ`` unchanged.
    """
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t]
    return {**environ, "GLIBC_TUNABLES": ":".join([*tunables, HUGETLB])}


def setting(environ: Mapping[str, str] | None = None) -> str:
    """What :func:`start` does to glibc's malloc in this process, without doing it.

    Args:
        environ: the environment (None: this process's, ``os.environ``).

    Returns:
        ``"environment"`` (the environment sets glibc's malloc: left as it is), ``"huge pages"``
        (:data:`HUGETLB`, where :func:`huge_pages_available`), ``"kept"`` (:func:`keep_freed_memory`) or
        ``"not glibc"`` (nothing to set).
    """
    if set_by_environment(os.environ if environ is None else environ):
        return "environment"
    if _glibc() is None:
        return "not glibc"
    huge = sys.executable and huge_pages_available(glibc_version(), transparent_hugepages())
    return "huge pages" if huge else "kept"


def start(
    environ: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
    execve: Callable[[str, Sequence[str], Mapping[str, str]], object] = os.execve,
) -> str:
    """Set glibc's malloc up for training: the first call of ``python -m train`` and its sweeps.

    As :func:`setting` says: with huge pages the process re-executes its own command line with
    :data:`HUGETLB` added to its environment (a tunable is read only at start-up); the new process, the
    same PID, finds the tunable set and goes on. With ``"kept"`` it calls :func:`keep_freed_memory`. An
    environment that sets glibc's malloc itself is left alone: ``MALLOC_PERTURB_=0`` (glibc's own default
    value) is the opt-out. Call it before anything else: the re-executed process starts from the beginning,
    and mallopt's settings apply to the threads that have not allocated yet.

    Args:
        environ: the environment (None: this process's, ``os.environ``).
        argv: the command line to re-execute (None: ``sys.orig_argv``, the interpreter's, ``-m`` included).
        execve: what re-executes it (``os.execve``, which does not return).

    Returns:
        The setting (:func:`setting`). With huge pages ``os.execve`` replaces the process and nothing returns;
        a stand-in ``execve`` that returns makes it return ``"huge pages"``.
    """
    environ = os.environ if environ is None else environ
    chosen = setting(environ)
    if chosen == "huge pages":
        execve(sys.executable, list(sys.orig_argv if argv is None else argv), with_huge_pages(environ))
    elif chosen == "kept":
        keep_freed_memory()
    return chosen
