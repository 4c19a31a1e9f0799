"""train.helpers.allocator: after keep_freed_memory, a 64 MiB block allocated, written and freed again and
again costs no page fault after the first time, in the main thread and in a worker thread; by default glibc
maps it anew each time and every page faults in again. With huge pages, malloc advises the kernel to back
the block with them (``hg`` among the flags of its mapping in /proc/self/smaps). The entry code of
``python -m train`` and of ``python -m train.reproduce`` re-executes itself with huge pages where they are
available and keeps the memory elsewhere, unless the environment sets glibc's malloc. Each check runs in a
fresh process: the setting is the whole process's, and a thread keeps the arena it first allocated from."""

import os
import subprocess
import sys

import pytest

from train.helpers import allocator

# In a fresh process: 64 MiB malloc'd, written and freed 10 times in a row, in the main thread and then in a
# new thread, with or without keep_freed_memory first; prints the minor page faults per time of each, whether
# the kernel was advised to back a fresh 64 MiB block with huge pages, and the process's GLIBC_TUNABLES.
PROBE = """
import ctypes, os, resource, sys, threading
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
def huge_page_advice(address):  # whether the mapping holding address carries MADV_HUGEPAGE ("hg")
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                low, high = (int(x, 16) for x in head.split("-"))
                inside = low <= address < high
            elif inside and line.startswith("VmFlags:"):
                return "hg" in line.split()[1:]
    raise AssertionError("no mapping holds the block")
main, worker = [], []
faults_per_time(main)
thread = threading.Thread(target=faults_per_time, args=(worker,))
thread.start()
thread.join()
block = libc.malloc(SIZE)
print(main[0], worker[0], huge_page_advice(block), os.environ.get("GLIBC_TUNABLES", "-"))
"""


def _probe(mode: str, **environ: str) -> tuple[float, float, bool, str]:
    """The probe's page faults per time (main thread, worker thread), its huge page advice and tunables."""
    env = {k: v for k, v in os.environ.items() if not allocator.set_by_environment({k: v})} | environ
    command = [sys.executable, "-c", PROBE, mode]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    main, worker, advised, tunables = out.stdout.splitlines()[-1].split()
    return float(main), float(worker), advised == "True", tunables


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")
def test_a_reused_block_faults_in_no_page_after_keep_freed_memory_in_any_thread():
    pages = (64 << 20) // 4096
    main, worker, advised, _ = _probe("default")
    assert main >= pages / 512 and worker >= pages / 512  # mapped anew each time (even in 2 MiB pages)
    assert not advised
    main, worker, advised, _ = _probe("keep")
    assert main < 10 and worker < 10  # the heap's pages, already faulted in
    assert not advised


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")
@pytest.mark.skipif((allocator.glibc_version() or (0, 0)) < allocator.HUGETLB_SINCE, reason="glibc < 2.35")
def test_the_hugetlb_tunable_advises_huge_pages_for_a_large_block():
    assert _probe("default", GLIBC_TUNABLES=allocator.HUGETLB)[2]


@pytest.mark.parametrize("below", [0, -1, 2**31, 1.5, True, "1"])
def test_a_bound_outside_a_c_int_raises_before_any_setting(below):
    with pytest.raises(ValueError, match="below must be an int"):
        allocator.keep_freed_memory(below)


@pytest.mark.skipif(allocator._glibc() is None, reason="glibc's malloc only")
@pytest.mark.parametrize("module", ["train", "train.reproduce"])
def test_python_m_train_sets_huge_pages_or_keeps_freed_memory_unless_the_environment_sets_malloc(module):
    pages = (64 << 20) // 4096
    main, worker, advised, tunables = _probe(module)
    if allocator.setting({}) == "huge pages":
        assert advised and tunables.split(":")[-1] == allocator.HUGETLB  # re-executed with the tunable
    else:
        assert main < 10 and worker < 10 and not advised and allocator.HUGETLB not in tunables.split(":")
    # glibc's default value: the documented opt-out
    main, worker, advised, tunables = _probe(module, MALLOC_PERTURB_="0")
    assert main >= pages / 512 and worker >= pages / 512
    assert not advised and allocator.HUGETLB not in tunables.split(":")


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


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never\n", "always"),
        ("always madvise [never]\n", "never"),
        ("always madvise never\n", None),  # none chosen
        ("", None),
    ],
)
def test_transparent_hugepages_reads_the_bracketed_mode(tmp_path, text, mode):
    path = tmp_path / "enabled"
    path.write_text(text)
    assert allocator.transparent_hugepages(str(path)) == mode


def test_transparent_hugepages_is_none_without_the_file(tmp_path):
    assert allocator.transparent_hugepages(str(tmp_path / "absent")) is None


@pytest.mark.parametrize(
    ("version", "mode", "available"),
    [
        ((2, 35), "madvise", True),
        ((2, 36), "always", True),
        ((3, 0), "madvise", True),
        ((2, 34), "always", False),  # the tunable is unknown before 2.35
        ((2, 36), "never", False),
        ((2, 36), None, False),
        (None, "always", False),  # not glibc
    ],
)
def test_huge_pages_need_glibc_2_35_and_a_kernel_that_grants_them(version, mode, available):
    assert allocator.huge_pages_available(version, mode) is available


def test_with_huge_pages_adds_the_tunable_after_the_ones_set():
    assert allocator.with_huge_pages({"A": "1"}) == {"A": "1", "GLIBC_TUNABLES": allocator.HUGETLB}
    assert allocator.with_huge_pages({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}) == {
        "GLIBC_TUNABLES": f"glibc.rtld.nns=2:{allocator.HUGETLB}"
    }


@pytest.fixture
def calls(monkeypatch):
    """start's effects recorded instead of done: the command it would re-execute and the keep it would set."""
    done = []
    monkeypatch.setattr(allocator, "_glibc", lambda: object())  # as on glibc, whatever this machine runs
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: done.append("keep") or True)
    return done


@pytest.mark.parametrize("huge", [True, False])
def test_start_re_executes_the_command_with_huge_pages_or_keeps_freed_memory(monkeypatch, calls, huge):
    monkeypatch.setattr(allocator, "glibc_version", lambda: (2, 36))
    monkeypatch.setattr(allocator, "transparent_hugepages", lambda: "madvise" if huge else "never")
    argv = ["python", "-m", "train", "preset=supcon_sphere_cpu"]
    chosen = allocator.start({"PATH": "/bin"}, argv, lambda *call: calls.append(call))
    if huge:
        assert chosen == "huge pages"
        assert calls == [(sys.executable, argv, {"PATH": "/bin", "GLIBC_TUNABLES": allocator.HUGETLB})]
    else:
        assert chosen == "kept" and calls == ["keep"]


def test_start_leaves_a_chosen_allocator_alone(calls):
    environ = {"GLIBC_TUNABLES": allocator.HUGETLB}  # as the re-executed process finds it
    assert allocator.start(environ, ["python"], lambda *call: calls.append(call)) == "environment"
    assert calls == []
