"""train.helpers.allocator: after keep_freed_memory, a 64 MiB block allocated, written and freed again and
again costs no page fault after the first time, in the main thread and in a worker thread; by default glibc
maps it anew each time and every page faults in again. The entry code of ``python -m train`` and of
``python -m train.reproduce`` keeps the memory, unless the environment sets glibc's malloc. Each check runs
in a fresh process: the setting is the whole process's, and a thread keeps the arena it first allocated
from."""

import os
import subprocess
import sys

import pytest

from train.helpers import allocator

# In a fresh process: 64 MiB malloc'd, written and freed 10 times in a row, in the main thread and then in a
# new thread, with or without keep_freed_memory first; prints the minor page faults per time of each.
PROBE = """
import ctypes, resource, sys, threading
import runpy
from train.helpers import allocator
ENTRIES = {"train": "help", "train.reproduce": "--help"}  # the commands that train in their own process
if sys.argv[1] == "keep":
    assert allocator.keep_freed_memory()
if sys.argv[1] in ENTRIES:  # python -m train help, or a sweep's --help: the entry code, its help, exit
    sys.argv = [sys.argv[1], ENTRIES[sys.argv[1]]]
    try:
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as done:
        assert done.code == 0, done.code
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
SIZE, TIMES = 64 << 20, 10
def use_once():
    block = libc.malloc(SIZE)
    ctypes.memset(block, 1, SIZE)
    libc.free(block)
def faults_per_time(out):
    use_once()  # the first time faults in any case
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(TIMES):
        use_once()
    out.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / TIMES)
main, worker = [], []
faults_per_time(main)
thread = threading.Thread(target=faults_per_time, args=(worker,))
thread.start()
thread.join()
print(main[0], worker[0])
"""


def _faults(mode: str, **environ: str) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not allocator.set_by_environment({k: v})} | environ
    command = [sys.executable, "-c", PROBE, mode]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    main, worker = out.stdout.splitlines()[-1].split()
    return float(main), float(worker)


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")
def test_a_reused_block_faults_in_no_page_after_keep_freed_memory_in_any_thread():
    pages = (64 << 20) // 4096
    main, worker = _faults("default")
    assert main >= pages / 512 and worker >= pages / 512  # mapped anew each time (even in 2 MiB pages)
    main, worker = _faults("keep")
    assert main < 10 and worker < 10  # the heap's pages, already faulted in


@pytest.mark.parametrize("below", [0, -1, 2**31, 1.5, True, "1"])
def test_a_bound_outside_a_c_int_raises_before_any_setting(below):
    with pytest.raises(ValueError, match="below must be an int"):
        allocator.keep_freed_memory(below)


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")
@pytest.mark.parametrize("module", ["train", "train.reproduce"])
def test_python_m_train_keeps_freed_memory_unless_the_environment_sets_malloc(module):
    pages = (64 << 20) // 4096
    main, worker = _faults(module)
    assert main < 10 and worker < 10
    main, worker = _faults(module, MALLOC_PERTURB_="0")  # glibc's default value: the documented opt-out
    assert main >= pages / 512 and worker >= pages / 512


@pytest.mark.parametrize(
    ("environ", "chosen"),
    [
        ({}, False),
        ({"PATH": "/usr/bin", "MALLOC": "1", "GLIBC_TUNABLES": ""}, False),
        ({"MALLOC_ARENA_MAX": "2"}, True),
        ({"MALLOC_PERTURB_": ""}, True),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, True),
        ({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}, False),
        ({"GLIBC_TUNABLES": "glibc.rtld.nns=2:glibc.malloc.arena_max=1"}, True),
    ],
)
def test_set_by_environment_sees_glibc_malloc_variables_and_tunables_only(environ, chosen):
    assert allocator.set_by_environment(environ) is chosen


def test_keep_unless_set_leaves_a_chosen_allocator_alone():
    assert allocator.keep_unless_set({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}) == "environment"
