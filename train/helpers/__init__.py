"""Helpers shared by the training application, its experiments, ``benchmarks/`` and the notebooks: atomic
files, the code version, markdown tables, timing, figures and the results folder. Nothing here imports the
application (:mod:`train.app`), so a benchmark or a notebook can use them without it."""
