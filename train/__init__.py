"""geojax training application: ``python -m train``."""
