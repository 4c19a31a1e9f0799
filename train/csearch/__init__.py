"""Dependency-free search over exported torus codes: a C99 single header (``geojax_torus.h``) and a numpy-only
reader of the ``codes.gjt`` files ``python -m train.export`` writes (``reader.py``)."""
