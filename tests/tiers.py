"""The default tier's share of a parametrised test (docs/conventions.md's tiers).

A test run on every kind of index or loss keeps a representative few in README's test command; the others
carry the ``slow`` marker and run in the end-to-end tier (``pytest -q -m slow``), so CI still runs them all.
"""

from collections.abc import Iterable, Sequence

import pytest


def default_tier(cases: Iterable[object], keep: Sequence[object]) -> list[object]:
    """``cases`` as a parametrize list, each case not in ``keep`` marked ``slow``.

    Raises:
        ValueError: a ``keep`` entry that is not one of ``cases`` (a misspelt name would otherwise move
            every case out of the default tier unnoticed).
    """
    cases = list(cases)
    missing = [case for case in keep if case not in cases]
    if missing:
        raise ValueError(f"keep: {missing} are not among the cases {cases}")
    return [case if case in keep else pytest.param(case, marks=pytest.mark.slow) for case in cases]
