"""train.helpers.allocator: after keep_freed_memory, glibc serves a 16 MiB block from its heap and keeps it
when it is freed (by default it maps a fresh block and unmaps it). Each check runs in a fresh process: the
setting is the whole process's."""

import subprocess
import sys

import pytest

from train.helpers import allocator

# In a fresh process: malloc 16 MiB, read glibc's mallinfo2 while it is held and after it is freed, with or
# without keep_freed_memory first; prints "mapped while held, heap after free" in MiB.
PROBE = """
import ctypes, sys
from train.helpers import allocator
class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "keep":
    assert allocator.keep_freed_memory()
block = libc.malloc(16 << 20)
held = libc.mallinfo2().hblkhd
libc.free(block)
print(held >> 20, libc.mallinfo2().arena >> 20)
"""


def _probe(mode: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    held, heap = out.stdout.split()
    return int(held), int(heap)


@pytest.mark.skipif(
    allocator._glibc() is None or not hasattr(allocator._glibc(), "mallinfo2"),
    reason="needs glibc ≥ 2.33 (mallinfo2)",
)
def test_a_freed_block_stays_in_the_heap_only_after_keep_freed_memory():
    held, heap = _probe("default")
    assert held >= 16 and heap < 16  # glibc's default: mapped on its own, unmapped when freed
    held, heap = _probe("keep")
    assert held == 0 and heap >= 16  # from the heap, and the heap keeps it


@pytest.mark.parametrize("below", [0, -1, 2**31, 1.5, True, "1"])
def test_a_bound_outside_a_c_int_raises_before_any_setting(below):
    with pytest.raises(ValueError, match="below must be an int"):
        allocator.keep_freed_memory(below)
