"""The reproduction page's line on learned runs against the raw pixels (render.baseline_gap)."""

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
    assert line.endswith("below: level 87.9.") and "failed" not in line and "diverged" not in line
    res["runs"] = res["runs"][:1]
    assert baseline_gap(res).endswith("or more.")
    assert baseline_gap({"data": {"classes": 10}, "runs": [res["runs"][0] | {"report": None}]}) == ""
