"""The statistics and verdict rules of every paper's reproduction: mean ± sd, confidence intervals over seeds
(Student t, Welch), the paired test-set bootstrap, per-query nearest neighbours, the rules that turn an
interval or counts of runs into a verdict, and the gate that makes a claim on runs not worth having "not
testable"."""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from geojax import metrics
from train.reproduce.verdicts import FAILS as FAILS
from train.reproduce.verdicts import HOLDS as HOLDS
from train.reproduce.verdicts import INCONCLUSIVE as INCONCLUSIVE
from train.reproduce.verdicts import LEARNED as LEARNED
from train.reproduce.verdicts import NOT_TESTABLE as NOT_TESTABLE
from train.reproduce.verdicts import VERDICTS as VERDICTS
from train.reproduce.verdicts import learned as learned

if TYPE_CHECKING:
    from train.reproduce.records import Claim, Run

EQUIVALENT = 0.02  # the margin of an "≈" claim whose paper gives no spread: ±2 points of P@1 / accuracy
ABOVE_BASELINE = 0.03  # a learned embedding worth having: P@1 at least 3 points above the raw pixels
LEVEL = 0.95  # the confidence level of every interval a verdict is judged on


@dataclasses.dataclass(frozen=True)
class Arms:
    """The runs a claim rests on and the bar each must clear for the claim to be testable at a scale: the
    raw pixels' 1-NN under the run's own protocol (its report's ``baseline_raw_1nn``) plus ABOVE_BASELINE,
    (``bar="own"``) a baseline of the run's own code size plus ABOVE_BASELINE (the paper's details name it
    per metric and run, ``bars``: a 2-d code against the pixels' 2-d PCA, not their 784 dimensions), or
    (``bar="learned"``) LEARNED × chance. A claim whose runs do not all clear it is not a result about the
    paper: :func:`gate` makes it NOT_TESTABLE."""

    patterns: tuple[str, ...]  # run names (fnmatch patterns)
    metric: str = "precision_at_1"  # the metric the bar applies to (Run.metric)
    bar: str = "raw"  # "raw", "own" or "learned"
    every: bool = True  # every run must clear the bar (False: at least one)

    def chosen(self, runs: Sequence[Run]) -> list[Run]:
        """The runs of ``runs`` that these arms name."""
        return [r for r in runs if any(fnmatch.fnmatch(r.name, p) for p in self.patterns)]


def arms_of(claim: str, arms: dict[str, Arms]) -> Arms | None:
    """The arms of the claim whose text is ``claim`` (``arms``: claim text prefix → Arms), or None."""
    return next((a for prefix, a in arms.items() if claim.startswith(prefix)), None)


@dataclasses.dataclass(frozen=True)
class Margin:
    """The margin of an equivalence claim ("A ≈ B" holds when the interval of A − B lies within ±value) and
    where it comes from: the paper's own spread, the differences it calls insignificant, or, where the paper
    gives no number, geojax's choice."""

    value: float  # a fraction (0.01: one point)
    source: str

    def text(self) -> str:
        """'±1 pt (source)' as a rule states it."""
        points = 100 * self.value
        return f"±{points:g} {'pt' if points == 1 else 'pts'} ({self.source})"


OWN_MARGIN = Margin(
    EQUIVALENT, "geojax's choice: the paper gives no number for the differences it calls equal"
)


# The recipes the cpu scale's supervised runs were trained with, for the page of a claim that is not testable.
RECIPES_TRIED = (
    "Recipes tried at the cpu scale for the supervised runs: each paper's own optimiser, views and schedule "
    "cut to 180,000 training images on the small CNN (the page before this one: on Fashion-MNIST no Stowell "
    "2026 run reached raw-pixel 1-NN + 3 points, Feeney & Hughes 2024's SupCon sat at the raw pixels and "
    "SINCERE below them, SimO at 73.8 % P@1), then geojax's CPU recipe of this page."
)


TRIALS_NOTE = "Recipes tried for these runs before the sweep's"  # how trials_note's line starts


def trials_note(trials: Sequence[dict]) -> str:
    """The page's line for the recipes tried before the sweep's (``rundirs.recipe_trials``): each one's change
    from the sweep's recipe and its P@1 beside the raw pixels' 1-NN, and how many reached raw + 3 points."""
    steps = sorted({t["steps"] for t in trials})

    def tried(t: dict) -> str:
        keys = {k: v for k, v in t["changes"].items() if k != "steps"}
        what = ", ".join(f"{k}={v}" for k, v in keys.items()) or "the sweep's recipe"
        length = f" ({t['steps']:,} steps)" if len(steps) > 1 else ""
        return f"{what}{length}: {100 * t['p_at_1']:.1f}"

    worth = sum(t["p_at_1"] >= t["raw"] + ABOVE_BASELINE for t in trials)
    return (
        f"{TRIALS_NOTE}, one run of seed 0 each with one change to the sweep's command"
        f" ({'/'.join(f'{n:,}' for n in steps)} steps; P@1, raw pixels "
        f"{100 * trials[0]['raw']:.1f}): {'; '.join(tried(t) for t in trials)}. {worth} of {len(trials)} "
        f"reached raw-pixel 1-NN + {100 * ABOVE_BASELINE:g} points."
    )


Bars = Mapping[str, Mapping[str, float]]  # metric → run name → the baseline of the run's own code size


def gate(
    claims: Sequence[Claim],
    arms: dict[str, Arms],
    runs: Sequence[Run],
    classes: int,
    bars: Bars | None = None,
) -> list[Claim]:
    """``claims`` with those whose runs (``arms``: claim text prefix → Arms) are not all worth having made
    NOT_TESTABLE, naming the runs short of the bar; a claim without arms, or whose runs all clear it, as it
    was. ``bars``: the baselines of ``bar="own"`` arms (a run without one does not clear it)."""
    out = []
    for c in claims:
        spec = arms_of(c.claim, arms)
        if spec is None:
            out.append(c)
            continue
        chosen = spec.chosen(runs)
        short = {r.name: r.metric(spec.metric) for r in chosen if not _clears(r, spec, classes, bars or {})}
        if chosen and (not short if spec.every else len(short) < len(chosen)):
            out.append(c)
            continue
        bar = {
            "raw": "raw-pixel 1-NN + 3 pts",
            "own": "1-NN on the pixels' PCA to the code's width + 3 pts",
            "learned": f"{LEARNED:g}× chance",
        }[spec.bar]
        named = ", ".join(f"{name} {100 * v:.1f}" for name, v in short.items()) or "none trained"
        out.append(
            dataclasses.replace(c, ours=f"{c.ours}; runs short of {bar}: {named}", verdict=NOT_TESTABLE)
        )
    return out


def _clears(run: Run, spec: Arms, classes: int, bars: Bars) -> bool:
    """Whether ``run`` clears ``spec``'s bar (a diverged run does not, nor one without its own bar)."""
    value = run.metric(spec.metric)
    if not math.isfinite(value):
        return False
    if spec.bar == "learned":
        return value >= LEARNED / classes
    if spec.bar == "own":
        own = bars.get(spec.metric, {}).get(run.name)
        return own is not None and value >= own + ABOVE_BASELINE
    assert run.report is not None  # a finite metric comes from a report
    return value >= run.report["baseline_raw_1nn"]["precision_at_1"] + ABOVE_BASELINE


# --------------------------------------------------------------------------------------------------------
# Statistics.
# --------------------------------------------------------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    """Mean of the finite values (NaN when there are none, e.g. every run diverged)."""
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def mean_sd(values: Sequence[float]) -> str:
    """Fractions as percent: 'mean ± sd' over the finite values, sd the sample standard deviation (ddof = 1);
    'x' for one value, '–' for none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "–"
    if len(finite) == 1:
        return f"{100 * finite[0]:.1f}"
    return f"{100 * np.mean(finite):.1f} ± {100 * np.std(finite, ddof=1):.1f}"


Interval = tuple[float, float, float]  # (estimate, lower bound, upper bound)


def t_interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """(mean, lo, hi): the Student-t confidence interval of the mean of the finite values (e.g. per-seed
    paired differences); lo and hi are NaN for fewer than two values (one seed shows no spread), all NaN for
    none."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if len(finite) == 0:
        return math.nan, math.nan, math.nan
    m = float(finite.mean())
    if len(finite) == 1:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(finite) - 1) * finite.std(ddof=1) / math.sqrt(len(finite)))
    return m, m - half, m + half


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Interval:
    """(mean(a) − mean(b), lo, hi): Welch's confidence interval of the difference of two independent means
    (the finite values of each; e.g. seeds of two configurations); NaN bounds when either has fewer than two.

    Welch 1947: se² = s_a²/n_a + s_b²/n_b, Welch–Satterthwaite degrees of freedom se⁴ / Σ (s²/n)² / (n − 1).
    """
    x, y = (np.asarray([v for v in vs if math.isfinite(v)], dtype=np.float64) for vs in (a, b))
    if len(x) == 0 or len(y) == 0:
        return math.nan, math.nan, math.nan
    diff = float(x.mean() - y.mean())
    if len(x) < 2 or len(y) < 2:
        return diff, math.nan, math.nan
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df) * se)
    return diff, diff - half, diff + half


def point(value: float) -> Interval:
    """A value computed once, with no spread to estimate (a deterministic count, one fit) as an interval."""
    return value, value, value


# --------------------------------------------------------------------------------------------------------
# Verdict rules: every claim's verdict comes from one of these, on an interval over seeds (or test queries)
# or on counts of runs; each can come out "holds", "does not hold at this scale" or "inconclusive".
# --------------------------------------------------------------------------------------------------------


def above(ci: Interval, threshold: float) -> str:
    """A claim "the quantity exceeds ``threshold``" on its interval (estimate, lo, hi): HOLDS when the whole
    interval lies above it, FAILS when the whole interval lies below it, INCONCLUSIVE otherwise (the interval
    straddles it, or is undefined: NaN)."""
    _, lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if lo > threshold:
        return HOLDS
    return FAILS if hi < threshold else INCONCLUSIVE


def within(ci: Interval, margin: float = EQUIVALENT) -> str:
    """A claim "the difference is negligible" (equivalence within ±``margin``) on its interval: HOLDS when the
    whole interval lies inside ±margin, FAILS when it lies wholly outside (above +margin or below −margin),
    INCONCLUSIVE otherwise (or when undefined: NaN). Unlike "the interval contains 0", a noisy estimate
    cannot pass: its wide interval leaves the margin."""
    _, lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return INCONCLUSIVE
    if -margin <= lo and hi <= margin:
        return HOLDS
    return FAILS if lo > margin or hi < -margin else INCONCLUSIVE


def fisher_p(events_a: int, runs_a: int, events_b: int, runs_b: int) -> float:
    """One-sided Fisher's exact p that events are rarer in group a than in group b: P(X ≤ events_a) for X
    hypergeometric (the events of both groups, drawn into a's runs)."""
    table = [[events_a, runs_a - events_a], [events_b, runs_b - events_b]]
    return float(stats.fisher_exact(table, alternative="less").pvalue)


def smallest_split(runs_a: int, runs_b: int, alpha: float = 1 - LEVEL) -> int | None:
    """The fewest events in group b, with none in group a, that a one-sided Fisher test calls significant
    (p < ``alpha``) at these run counts: the smallest result that could show "rarer in a"; None where no
    split of these runs can (e.g. 2 runs against 2: p = 1/6 at best).

    >>> smallest_split(6, 6), smallest_split(4, 4), smallest_split(2, 2)
    (4, 4, None)
    """
    return next((k for k in range(1, runs_b + 1) if _below(fisher_p(0, runs_a, k, runs_b), alpha)), None)


def _below(p: float, alpha: float) -> bool:
    """p < alpha, a p that rounding puts a hair under alpha counted as alpha (0 of 3 against 3 of 3: p is
    1/20 exactly, which is not below 0.05)."""
    return p < alpha * (1 - 1e-9)


def fewer(events_a: int, runs_a: int, events_b: int, runs_b: int, alpha: float = 1 - LEVEL) -> str:
    """A claim "events (divergence, failure) are rarer in group a than in group b" on counts of runs, by
    Fisher's exact test one-sided each way: HOLDS when the test that a has fewer gives p < ``alpha``, FAILS
    when the test that a has more does (the interval rules' "wholly on the other side"), INCONCLUSIVE
    otherwise. A test without power is inconclusive whatever the counts: no events in either group (0 of 6
    against 0 of 6 refutes nothing), or run counts at which no split could be significant
    (:func:`smallest_split`). Counts must satisfy 0 ≤ events ≤ runs."""
    for name, k, n in (("a", events_a, runs_a), ("b", events_b, runs_b)):
        if not 0 <= k <= n:
            raise ValueError(f"events_{name} must lie in [0, runs_{name}], got {k} of {n}")
    if events_a + events_b == 0 or smallest_split(runs_a, runs_b, alpha) is None:
        return INCONCLUSIVE
    if _below(fisher_p(events_a, runs_a, events_b, runs_b), alpha):
        return HOLDS
    return FAILS if _below(fisher_p(events_b, runs_b, events_a, runs_a), alpha) else INCONCLUSIVE


def fewer_text(events_a: int, runs_a: int, events_b: int, runs_b: int, alpha: float = 1 - LEVEL) -> str:
    """A count result as the page states it beside its verdict: Fisher's one-sided p, and the smallest split
    that would be significant at these run counts (or that none would be).

    >>> fewer_text(0, 6, 2, 6)
    'one-sided Fisher p = 0.227; at 6 against 6 runs the smallest significant split is 0 against 4'
    >>> fewer_text(0, 2, 0, 2)
    'no split of 2 against 2 runs can be significant (one-sided Fisher p < 0.05)'
    """
    k = smallest_split(runs_a, runs_b, alpha)
    if k is None:
        return (
            f"no split of {runs_a} against {runs_b} runs can be significant (one-sided Fisher p < {alpha:g})"
        )
    p = fisher_p(events_a, runs_a, events_b, runs_b)
    return (
        f"one-sided Fisher p = {p:.3g}; at {runs_a} against {runs_b} runs the smallest significant split is "
        f"0 against {k}"
    )


def significance(ci: Interval) -> str:
    """Whether a difference is significant on its 95% interval, in words: an equivalence verdict says whether
    the difference is small, this says whether it is there at all (both are reported).

    >>> significance((0.015, 0.01, 0.02))
    'significant (the 95% interval excludes 0)'
    >>> significance((0.0, -0.01, 0.01)), significance((0.1, math.nan, math.nan))
    ('not significant (the 95% interval contains 0)', 'no interval')
    """
    _, lo, hi = ci
    if math.isnan(lo) or math.isnan(hi):
        return "no interval"
    if lo > 0 or hi < 0:
        return "significant (the 95% interval excludes 0)"
    return "not significant (the 95% interval contains 0)"


def every(verdicts: Sequence[str]) -> str:
    """A claim made of several parts (e.g. one per geometry): FAILS when any part fails, INCONCLUSIVE when
    none fails but one is inconclusive (or there are no parts), HOLDS when every part holds."""
    if FAILS in verdicts:
        return FAILS
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def provided(verdict: str, condition: bool) -> str:
    """``verdict``, or INCONCLUSIVE when the runs it rests on do not meet ``condition`` (e.g. they did not
    learn: a rule must not hold, nor fail, on runs that learned nothing)."""
    return verdict if condition else INCONCLUSIVE


def bootstrap_diff(a: np.ndarray, b: np.ndarray, *, n: int, seed: int = 0) -> tuple[float, float, float]:
    """Paired test-set bootstrap of mean(a) − mean(b) for per-query outcomes: (diff, lo95, hi95).

    a, b: [Nq] outcomes of the same queries; n resamples of the queries with replacement.
    """
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    diffs = a[idx].mean(1) - b[idx].mean(1)
    return float(a.mean() - b.mean()), float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))


def nearest_labels(
    query: np.ndarray, reference: np.ndarray, reference_labels: np.ndarray, similarity: str
) -> np.ndarray:
    """Label [Nq] of each query's most similar reference row (ties to the lower index, as geojax.metrics).

    Used where a per-query outcome is needed (bootstrap, per-class recall); each caller checks its mean
    against geojax.metrics' 1-NN figure of the same run.
    """
    nn = metrics.nearest_neighbors(query, reference, k=1, similarity=similarity)
    return np.asarray(reference_labels)[np.asarray(nn)[:, 0]]


def count_interval(counts: Sequence[float], level: float = LEVEL) -> Interval:
    """:func:`t_interval` of per-seed counts (e.g. classes lost, paired by seed), with undefined (NaN) bounds
    where the finite counts are all the same: the t interval of identical counts has zero width, which says
    the seeds agree, not that their mean is known (any rule on it is inconclusive)."""
    finite = [v for v in counts if math.isfinite(v)]
    m, lo, hi = t_interval(finite, level)
    if len(set(finite)) <= 1:
        return m, math.nan, math.nan
    return m, lo, hi


def value_text(
    ci: Interval, *, fmt: str, over: str = "", single: str = "no interval", missing: str = "–"
) -> str:
    """An interval of a quantity in its own units as the page states it: '+0.442, 95% CI [+0.3, +0.5] over
    3 paired seeds' (``fmt`` the format of each number, ``over`` what the interval is over), the estimate
    with ``single`` in brackets where the bounds are undefined, ``missing`` for no estimate.

    >>> value_text((0.5, 0.25, 0.75), fmt="+.2f", over="3 seeds")
    '+0.50, 95% CI [+0.25, +0.75] over 3 seeds'
    >>> value_text((2.0, math.nan, math.nan), fmt="+.1f"), value_text((math.nan,) * 3, fmt="+.1f")
    ('+2.0 (no interval)', '–')
    """
    m, lo, hi = ci
    if math.isnan(m):
        return missing
    if math.isnan(lo) or math.isnan(hi):
        return f"{m:{fmt}} ({single})"
    return f"{m:{fmt}}, 95% CI [{lo:{fmt}}, {hi:{fmt}}]" + (f" over {over}" if over else "")


def interval_text(ci: Interval, seeds: int, *, unit: str = "pts", over: str = "paired seeds") -> str:
    """An interval of a difference of fractions as the page states it: 'Δ +1.2 pts, 95% CI [+0.4, +2.0] over
    3 paired seeds'; 'Δ +1.2 pts (1 paired seed: no interval)' where its bounds are undefined, '–' for no
    estimate."""
    m, lo, hi = ci
    if math.isnan(m):
        return "–"
    head = f"Δ {100 * m:+.1f} {unit}"
    if math.isnan(lo) or math.isnan(hi):
        return f"{head} ({seeds} {over.removesuffix('s') if seeds == 1 else over}: no interval)"
    return f"{head}, 95% CI [{100 * lo:+.1f}, {100 * hi:+.1f}] over {seeds} {over}"
