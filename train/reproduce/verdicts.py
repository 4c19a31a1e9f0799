"""The verdicts a claim can get and when a run learned: what the claim and run records (:mod:`.records`) and
the verdict rules (:mod:`.rules`) both need, kept apart so that neither imports the other both ways."""

from __future__ import annotations

import math

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold at this scale", "inconclusive"
NOT_TESTABLE = "not testable at this scale"  # the runs a claim rests on are not worth having (rules.Arms)
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE)
LEARNED = 2.0  # a run learned when its P@1 reaches LEARNED × chance (1 / classes); below: "failed to learn"


def learned(p_at_1: float, chance: float) -> bool:
    """Whether a run learned: its P@1 is finite and at least LEARNED × ``chance``.

    A run below that "failed to learn"; one that diverged has no P@1 and did not learn either.

    Args:
        p_at_1: the run's P@1 (NaN when it diverged).
        chance: the chance level, 1 / classes.

    Returns:
        True when it learned.
    """
    return math.isfinite(p_at_1) and p_at_1 >= LEARNED * chance
