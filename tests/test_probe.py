"""train.app.probe: the linear probe and Korman 2021's piecewise linear evaluation, on data where the right
answer is known: separable classes are found, shuffled labels are not, and a labelling that flips between two
charts defeats one linear classifier but not one per chart."""

from __future__ import annotations

import numpy as np

from train.app import probe

FIT = {"epochs": 30, "batch": 32, "lr": 0.05, "seed": 0}


def _blobs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated Gaussian classes in 5-d (centres 8 apart, unit spread), labels 0, 1, 2."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int32)
    centres = 8.0 * np.eye(3, 5)
    return (centres[y] + rng.normal(size=(n, 5))).astype(np.float32), y


def test_linear_probe_separates_separable_classes_and_not_shuffled_labels():
    x, y = _blobs(600, 0)
    xt, yt = _blobs(300, 1)
    assert probe.linear_probe(x, y, xt, yt, num_classes=3, **FIT) >= 0.98
    shuffled = np.random.default_rng(2).permutation(y)  # labels carry no information about x
    assert probe.linear_probe(x, shuffled, xt, yt, num_classes=3, **FIT) <= 0.5  # chance is 1/3


def _flipped_by_chart(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes in [0, 1]²: class = (first coordinate > 0.5) in chart 0 and the opposite in chart 1."""
    rng = np.random.default_rng(seed)
    code = rng.uniform(size=(n, 2)).astype(np.float32)
    chart = rng.integers(0, 2, n).astype(np.int32)
    y = ((code[:, 0] > 0.5) ^ (chart == 1)).astype(np.int32)
    return code, chart, y


def test_piecewise_linear_fits_one_classifier_per_chart():
    code, chart, y = _flipped_by_chart(800, 0)
    tcode, tchart, ty = _flipped_by_chart(400, 1)
    piecewise = probe.piecewise_linear(code, chart, y, tcode, tchart, ty, charts=2, num_classes=2, **FIT)
    assert piecewise >= 0.9
    # One linear classifier over the same codes (the chart ignored) can do no better than chance here.
    assert probe.linear_probe(code, y, tcode, ty, num_classes=2, **FIT) <= 0.65
    # Each point is classified by its own chart's classifier: swapping the charts at test time inverts it.
    swapped = probe.piecewise_linear(code, chart, y, tcode, 1 - tchart, ty, charts=2, num_classes=2, **FIT)
    assert swapped <= 0.1
