"""train.reproduce.same_code: code versions checked to give the same results keep their runs current; the
check trains each distinct configuration with both versions and tells a difference from none."""

import json
import os

import pytest

from train.helpers.version import code_hash
from train.reproduce import render, same_code
from train.reproduce.records import Run

PAIRS = [{"from": "a", "to": "b"}, {"from": "c", "to": "b"}, {"from": "x", "to": "y"}]


def test_same_results_follows_chains_of_checked_pairs_in_either_direction():
    assert same_code.same_results("a", "a", [])
    assert not same_code.same_results("a", "b", [])
    assert same_code.same_results("a", "c", PAIRS) and same_code.same_results("c", "a", PAIRS)
    assert not same_code.same_results("a", "y", PAIRS)


def _run_dir(root, name, config, code):
    os.makedirs(root / name)
    json.dump(config, open(root / name / "config.json", "w"))
    json.dump({"code_version": {"code_hash": code}}, open(root / name / "report.json", "w"))
    return str(root / name)


def test_configurations_are_distinct_up_to_seed_length_and_data_and_only_of_the_given_code(tmp_path):
    base = {"loss": "supcon", "lr": 0.1, "seed": 0, "steps": 9, "dataset": "idx:data/x", "workdir": "w"}
    first = _run_dir(tmp_path, "a-seed0", base, "h1")
    _run_dir(tmp_path, "a-seed1", {**base, "seed": 1, "steps": 20, "dataset": "digits"}, "h1")
    other = _run_dir(tmp_path, "b-seed0", {**base, "lr": 0.2}, "h1")
    _run_dir(tmp_path, "c-seed0", {**base, "lr": 0.3}, "h2")  # other code: not checked against h1
    assert list(same_code.configurations(str(tmp_path), "h1")) == [first, other]


def test_runs_of_a_checked_version_are_current_and_the_page_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(same_code, "RECORD", tmp_path / "same_results.json")
    (tmp_path / "same_results.json").write_text(json.dumps([{"from": "old", "to": "new"}]))
    current = {"code_hash": "new", "commit": None}
    row = {
        "name": "r",
        "overrides": {},
        "seed": 0,
        "steps": 1,
        "code_version": {"code_hash": "old", "commit": None},
    }
    assert not Run.from_json(row).stale(current)
    assert Run.from_json({**row, "code_version": {"code_hash": "older"}}).stale(current)
    assert Run.from_json({**row, "code_version": None}).stale(current)
    res = {"runs": [row, {"name": "s", "code_version": {"code_hash": "new"}}]}
    text = render.same_code_runs(res, current)
    assert text.startswith("**Same results**: 1 of 2 runs were trained by code old,")
    assert render.same_code_runs({"runs": [row]}, {"code_hash": "other"}) == ""


@pytest.mark.slow
def test_the_check_finds_no_difference_between_equal_code_and_one_in_what_is_trained(tmp_path, monkeypatch):
    """HEAD against this checkout (the same code in a fresh clone) on one quick configuration: the same.
    Then the checkout's side trains with twice the learning rate: the check must see it."""
    config = {"preset": "supcon", "encoder": "mlp", "width": 32, "batch_size": 64, "lr": 0.01}
    folder = _run_dir(tmp_path / "runs", "quick-seed0", config, code_hash())
    # the run stands for HEAD's code even where this checkout's working files differ from HEAD
    monkeypatch.setattr(same_code, "configurations", lambda runs, code: {folder: config})
    result = same_code.check("HEAD", str(tmp_path / "runs"))
    assert result["configurations"] == [folder] and result["differ"] == []

    train = same_code._train

    def faster_here(root, cfg, workdir):
        return train(root, {**cfg, "lr": 2 * cfg["lr"]} if root == same_code.ROOT else cfg, workdir)

    monkeypatch.setattr(same_code, "_train", faster_here)
    assert same_code.check("HEAD", str(tmp_path / "runs"))["differ"] == [folder]
