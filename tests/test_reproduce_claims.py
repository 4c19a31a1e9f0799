"""The reproduction's claim rules, each a pure function of numbers, on fixed inputs whose verdicts are known
(no training): edge cases are NaN numbers, diverged runs and intervals at the margins."""

import math

import pytest

from train.reproduce import atlas, binary, similarities, simo, torus

NAN = math.nan


def _verdicts(claims) -> list[bool]:
    return [c.holds for c in claims]


def _torus_numbers(**changes):
    n = {
        "p_at_1": {"sphere": [0.90, 0.91, 0.92], "torus_n": [0.90, 0.905, 0.915]},
        "deltas": [0.0, -0.005, -0.005],
        "gap": (-0.0033, -0.0105, 0.0038),
        "totals": {
            "clip 100": {"runs": 4, "diverged": 0, "failed": 1, "p_at_1": 0.6},
            "no clip": {"runs": 4, "diverged": 2, "failed": 3, "p_at_1": 0.3},
        },
        "eight_bit_drop": {"sphere": 0.004, "torus_n": 0.009},
        "low_bit_drop": {"sphere": {"1-bit": 0.2, "PQ(8,2)": 0.05}, "torus_n": {"1-bit": 0.25}},
        "dims": [2, 4],
        "steps": 300,
        "epochs": 44.4,
    }
    return {**n, **changes}


def test_torus_claims_hold_on_numbers_that_meet_every_rule():
    assert _verdicts(torus.claims(_torus_numbers())) == [True] * 6


@pytest.mark.parametrize(
    "changes,index",
    [
        ({"gap": (-0.03, -0.04, -0.025)}, 0),  # torusN significantly worse by > 2 pts
        ({"gap": (NAN, NAN, NAN)}, 0),  # a seed diverged: no verdict can hold
        ({"gap": (0.025, -0.01, 0.06)}, 0),  # the CI contains 0 but the mean is 2.5 pts off
    ],
)
def test_torus_equivalence_rule_fails_outside_the_margin(changes, index):
    assert not torus.claims(_torus_numbers(**changes))[index].holds


def test_torus_clipping_rules():
    same = {"runs": 4, "diverged": 1, "failed": 1, "p_at_1": 0.6}
    c = torus.claims(_torus_numbers(totals={"clip 100": same, "no clip": dict(same)}))
    assert not c[1].holds and not c[2].holds and c[3].holds  # no difference; one clipped run failed
    worse = {**same, "p_at_1": 0.55}  # same failures, mean P@1 lower by 5 pts without clipping
    assert torus.claims(_torus_numbers(totals={"clip 100": same, "no clip": worse}))[2].holds
    close = {**same, "p_at_1": 0.59}  # … by 1 pt: within the margin
    assert not torus.claims(_torus_numbers(totals={"clip 100": same, "no clip": close}))[2].holds
    nan = {**same, "p_at_1": NAN}
    assert not torus.claims(_torus_numbers(totals={"clip 100": same, "no clip": nan}))[2].holds
    clean = {**same, "diverged": 0, "failed": 0}
    assert not torus.claims(_torus_numbers(totals={"clip 100": clean, "no clip": same}))[3].holds


def test_torus_quantisation_rules():
    assert not torus.claims(_torus_numbers(eight_bit_drop={"sphere": 0.004, "torus_n": 0.011}))[4].holds
    assert not torus.claims(_torus_numbers(eight_bit_drop={}))[4].holds  # nothing quantised
    low = {"sphere": {"1-bit": 0.2, "PQ(8,2)": 0.005}, "torus_n": {"1-bit": 0.25}}
    assert not torus.claims(_torus_numbers(low_bit_drop=low))[5].holds
    assert not torus.claims(_torus_numbers(low_bit_drop={"sphere": {}}))[5].holds


def test_atlas_claims_compare_mean_scores_of_the_two_chart_counts():
    n = {
        "piecewise_linear_accuracy": {1: [0.4, 0.5], 16: [0.7, 0.6]},
        "recall_at_1": {1: [0.3], 16: [0.2]},
        "simclr_linear_accuracy": [0.5, 0.7],
    }
    assert _verdicts(atlas.claims(n)) == [True, True, False]
    n["simclr_linear_accuracy"] = [0.7, NAN]  # SimCLR's finished seed beats MSimCLR's mean
    assert not atlas.claims(n)[1].holds
    n["piecewise_linear_accuracy"][16] = [0.3, NAN]  # a diverged seed is left out of the mean
    assert not atlas.claims(n)[0].holds
    n["piecewise_linear_accuracy"][16] = [NAN, NAN]  # every seed diverged
    assert not atlas.claims(n)[0].holds


def _binary_numbers(**changes):
    counts = [{"shape": "4096 → 4096 bits", "tp_params": 1152, "paper_tp_params": 1152, "dense": 4096**2}]
    n = {
        "d": 64,
        "map": {32: {"TP": 0.2, "ITQ": 0.3}, 64: {"TP": 0.40, "ITQ": 0.405}, 128: {"TP": 0.5, "ITQ": 0.45}},
        "long_bits": [64, 128],
        "gaps": {64: -0.005, 128: 0.05},
        "ratios": {32: 0.01, 64: 0.005},
        "paper_counts": counts,
        "paper_ratio": 1152 / 4096**2,
    }
    return {**n, **changes}


def test_binary_claims():
    assert _verdicts(binary.claims(_binary_numbers())) == [True, True, False]
    assert not binary.claims(_binary_numbers(gaps={64: -0.011, 128: 0.05}))[0].holds  # TP 1.1 pts under
    assert not binary.claims(_binary_numbers(gaps={}, long_bits=[]))[0].holds  # no b ≥ d was run
    assert not binary.claims(_binary_numbers(paper_ratio=2e-3))[1].holds
    assert binary.claims(_binary_numbers(ratios={64: 1e-3}))[2].holds


def _similarity_numbers(first, second):
    acc = {"1nn": [0.9, 0.91], "5nn": [0.92, 0.93]}
    labels = [label for pair in similarities.COMPARED for label in pair]
    pairs = similarities.COMPARED
    return {
        "accuracy": {label: acc for label in labels},
        "bootstrap": {f"{pairs[0][0]} vs {pairs[0][1]}": first, f"{pairs[1][0]} vs {pairs[1][1]}": second},
        "bootstraps": 1000,
    }


def test_similarity_claims_hold_when_the_bootstrap_interval_contains_zero():
    assert _verdicts(similarities.claims(_similarity_numbers((0.01, -0.005, 0.02), (0.0, 0.0, 0.01)))) == [
        True,
        True,
    ]
    c = similarities.claims(_similarity_numbers((0.02, 0.001, 0.04), None))
    assert _verdicts(c) == [False, False] and c[1].ours == "a run diverged"


def _simo_variant(distinguishable):
    return {
        "distinguishable": distinguishable,
        "classes": 10,
        "p_at_1": [0.9],
        "probe": [0.9],
        "abs_cos": [0.1],
    }


def test_simo_claims():
    full, ablation = simo.FULL, simo.ABLATION
    details = {"D=16": {full: _simo_variant([10, 10]), ablation: _simo_variant([4, 5])}}
    assert _verdicts(simo.claims(details)) == [True, True]
    details["D=4"] = {full: _simo_variant([10, 9]), ablation: _simo_variant([9, 10])}
    assert _verdicts(simo.claims(details))[2:] == [False, False]  # one seed lost a class; no collapse
    assert _verdicts(simo.claims({"D=16": {full: _simo_variant([]), ablation: _simo_variant([])}})) == [
        False,
        False,
    ]  # every run diverged
