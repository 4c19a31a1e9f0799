"""geojax's training application and the programs that use it.

- :mod:`train.app`: the application itself (``python -m train key=value …``);
- the experiments, each its own program on top of the application: :mod:`train.reproduce` (the papers'
  claims), :mod:`train.qat` (quantisation-aware fine-tuning), :mod:`train.evaluate` (quantised retrieval of a
  trained run), :mod:`train.binary_eval` (binary embeddings), :mod:`train.export` (integer-only search export)
  with its C and NumPy readers in :mod:`train.csearch`;
- :mod:`train.helpers`: what the application, the experiments, ``benchmarks/`` and the notebooks share.
"""
