"""``python -m train [preset=NAME] [key=value ...]``: the command-line entry point (:mod:`train.app.cli`).

Before JAX starts, glibc's malloc is told to keep the memory the process frees
(:func:`train.helpers.allocator.keep_unless_set`), unless the environment sets glibc's malloc itself: XLA
allocates a step's temporaries anew at every call, and by default each call faulted their pages in again
(on a 2-core AMD EPYC the CPU recipe trained on Fashion-MNIST at 12.2–12.6 steps/s by default and at
19.5–20.7 so; benchmarks/results/cpu_recipe_malloc_glibc.json and cpu_recipe.json, docs/performance.md).
The one heap it shares between threads slows steps made of many small operations (threads wait on its lock);
``MALLOC_PERTURB_=0`` or ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` in the environment leaves it out.

Without the ``train`` extra installed it stops with one line naming the extra, exit status 2."""

import sys

from train import MissingExtra
from train.helpers import allocator

allocator.keep_unless_set()  # first: it applies to the threads that have not allocated yet

try:
    from train.app.cli import main
except MissingExtra as missing:
    print(f"error: {missing}", file=sys.stderr)
    sys.exit(2)

sys.exit(main(sys.argv[1:]))
