"""The reproduction page's line on learned runs against the raw pixels (render.baseline_gap)."""

import numpy as np

from train.app.data import Dataset
from train.reproduce import atlas
from train.reproduce.render import baseline_gap


def _run(name, p_at_1, raw=0.85):
    report = {"precision_at_1": p_at_1, "baseline_raw_1nn": {"precision_at_1": raw, "knn_accuracy": raw}}
    return {"name": name, "overrides": {}, "seed": 0, "steps": 1, "epochs": 1.0, "report": report}


def test_counts_learned_runs_three_points_above_the_raw_pixels_and_names_the_rest():
    res = {
        "data": {"classes": 10},
        "runs": [
            _run("above", 0.881),  # 3.1 points above 85.0
            _run("level", 0.879),  # 2.9 points: below the bar
            _run("failed", 0.15),  # under 2 × chance: not a learned run, not counted
            {"name": "diverged", "overrides": {}, "seed": 0, "steps": 1, "epochs": 1.0, "diverged": True},
        ],
    }
    line = baseline_gap(res)
    assert "(P@1 85.0): 1 of 2 learned runs" in line
    assert line.endswith("short of +3 pts: level 87.9.") and "failed" not in line and "diverged" not in line
    res["runs"] = res["runs"][:1]
    assert baseline_gap(res).endswith("or more.")
    assert baseline_gap({"data": {"classes": 10}, "runs": [res["runs"][0] | {"report": None}]}) == ""


def test_a_paper_s_own_baselines_replace_the_raw_pixels_each_against_its_runs_metric():
    res = {
        "data": {"classes": 10},
        "runs": [_run("msimclr-d2-n16-seed0", 0.2)],  # P@1 far below the raw pixels: not what is judged
        "details": {
            "baselines": [
                {"baseline": "the 2-d PCA probe", "value": 0.51, "metric": "probe accuracy",
                 "runs": {"a": 0.541, "b": 0.539}},
                {"baseline": "2-d PCA 1-NN", "value": 0.40, "metric": "R@1", "runs": {"c": 0.45}},
            ]
        },
    }  # fmt: skip
    line = baseline_gap(res)
    assert line.startswith("**Against the 2-d PCA probe** (51.0, no training): 1 of 2 runs' probe accuracy")
    assert "short of +3 pts: b 53.9." in line and "raw pixels" not in line
    assert line.endswith(
        "**Against 2-d PCA 1-NN** (40.0, no training): 1 of 1 runs' R@1 reach 3 points above it or more."
    )


def test_pca_recall_is_the_1nn_hit_rate_in_the_principal_plane():
    rng = np.random.default_rng(0)
    train_y, test_y = rng.integers(0, 3, 300), rng.integers(0, 3, 70)
    centres = rng.normal(size=(3, 6))
    train_x = (centres[train_y] + rng.normal(size=(300, 6))).reshape(300, 2, 3, 1).astype(np.float32)
    test_x = (centres[test_y] + rng.normal(size=(70, 6))).reshape(70, 2, 3, 1).astype(np.float32)
    ds = Dataset("toy", train_x, train_y, test_x, test_y)
    flat_train, flat_test = (
        train_x.reshape(300, -1).astype(np.float64),
        test_x.reshape(70, -1).astype(np.float64),
    )
    centre = flat_train.mean(0)
    _, _, vt = np.linalg.svd(flat_train - centre, full_matrices=False)  # an independent PCA: the SVD
    a, b = (flat_train - centre) @ vt[:2].T, (flat_test - centre) @ vt[:2].T
    nearest = [int(np.argmin(((a - q) ** 2).sum(1))) for q in b]
    expected = float(np.mean(train_y[nearest] == test_y))
    assert atlas.pca_recall(ds, dim=2, chunk=16) == expected
    assert 0.5 < expected < 1.0  # the toy is neither trivial nor chance
