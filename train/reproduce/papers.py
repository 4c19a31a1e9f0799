"""The reproduced papers, one module each (its :class:`~train.reproduce.common.Paper` record ``PAPER``, its
sizes per scale ``SIZES`` where it has some, its runs, claims and judging): a new paper is a new module and
its entry in :data:`MODULES`."""

from __future__ import annotations

from types import ModuleType

from train.reproduce import atlas, binary, similarities, simo, torus
from train.reproduce.common import Paper, Scale

# Selector → the paper's module, in selector order (``all`` runs them in this order).
MODULES: dict[str, ModuleType] = {m.PAPER.key: m for m in (torus, atlas, binary, similarities, simo)}
PAPERS: dict[str, Paper] = {key: m.PAPER for key, m in MODULES.items()}


def fractions(scale: Scale) -> dict[str, float] | None:
    """Per paper, the share of its recipes' epochs each run trains at ``scale`` (the papers that set one),
    as the result JSON records it; None where the scale trains all of them.

    >>> from train.reproduce.common import SCALES
    >>> fractions(SCALES["gpu"])["001"] == 1 / 75, fractions(SCALES["cpu"])
    (True, None)
    """
    if not scale.shares:
        return None
    return {key: p.fractions[scale.name] for key, p in PAPERS.items() if scale.name in p.fractions}
