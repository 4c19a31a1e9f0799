"""``python -m train [preset=NAME] [key=value ...]``: the command-line entry point (:mod:`train.app.cli`).

Before anything else, glibc's malloc is set so that the temporaries XLA allocates anew at every call are not
faulted in page by page each time (:func:`train.helpers.allocator.start`): where glibc ≥ 2.35 and the kernel
grants transparent huge pages, the command re-executes itself with ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``
(2 MiB pages behind large blocks); elsewhere on glibc the process keeps the memory it frees, whose one heap
slows steps made of many small operations. Neither when the environment sets glibc's malloc itself:
``MALLOC_PERTURB_=0`` (glibc's own default value) runs under glibc's default. Figures:
benchmarks/results/malloc.json, docs/performance.md.

Without the ``train`` extra installed it stops with one line naming the extra, exit status 2."""

import sys

from train import MissingExtra
from train.helpers import allocator

allocator.start()  # first: it may re-execute the command, and it applies to threads not yet started

try:
    from train.app.cli import main
except MissingExtra as missing:
    print(f"error: {missing}", file=sys.stderr)
    sys.exit(2)

sys.exit(main(sys.argv[1:]))
