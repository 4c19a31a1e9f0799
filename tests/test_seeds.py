"""Several seeds in one program (``seeds=S``): each replica is exactly the single-seed run with its seed, on
one device and data-parallel, through an interruption; the report's mean / std / per-seed records."""

import json

import jax
import numpy as np
import pytest

from train.app import cli, config, loop, report, step
from train.app.errors import UsageError

TINY = dict(width=8, dim=4, batch_size=16, progress=False, eval_batch=512, steps=4, log_every=2)


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, pytest.param(4, marks=pytest.mark.multidevice)])
def test_each_replica_is_the_single_seed_run_with_its_seed(devices, tmp_path):
    kw = dict(TINY, devices=devices, ema=0.5, koleo=0.1)
    several = cli.run(config.make(seed=3, seeds=2, workdir=str(tmp_path / "two"), **kw))
    stacked = loop.train(config.make(seed=3, seeds=2, workdir=str(tmp_path / "two"), **kw)).state
    assert several["per_seed"] and len(several["per_seed"]) == 2
    for index, seed in enumerate((3, 4)):
        single_dir = str(tmp_path / f"one-{seed}")
        single = cli.run(config.make(seed=seed, workdir=single_dir, **kw))
        alone = loop.train(config.make(seed=seed, workdir=single_dir, **kw)).state
        mine = step.replica(stacked, index)
        for part in ("params", "ema"):
            assert _max_diff(jax.tree.leaves(mine[part]), jax.tree.leaves(alone[part])) < 1e-5
        got = several["per_seed"][index]
        for key in ("precision_at_1", "knn_accuracy", "circular_variance"):
            assert got[key] == pytest.approx(single[key], abs=1e-6)
    p1 = [r["precision_at_1"] for r in several["per_seed"]]
    assert several["precision_at_1"] == pytest.approx(np.mean(p1))
    assert several["precision_at_1_std"] == pytest.approx(np.std(p1, ddof=1))
    with open(tmp_path / "two" / "metrics.jsonl") as f:
        last = [json.loads(line) for line in f][-1]
    assert len(last["loss_per_seed"]) == 2 and last["loss"] == pytest.approx(np.mean(last["loss_per_seed"]))


@pytest.mark.slow
def test_an_interrupted_several_seeds_run_resumes_exactly(tmp_path):
    kw = dict(TINY, seeds=2, steps=6, checkpoint_every=2, ema=0.5, devices=1)
    whole = loop.train(config.make(workdir=str(tmp_path / "a"), **kw)).state
    loop.train(config.make(workdir=str(tmp_path / "b"), **kw), stop_at=3)
    resumed = loop.train(config.make(workdir=str(tmp_path / "b"), **kw)).state
    assert np.asarray(resumed["step"]).tolist() == [6, 6]
    assert np.asarray(resumed["seed"]).tolist() == [0, 1]
    assert _max_diff(jax.tree.leaves(whole), jax.tree.leaves(resumed)) < 1e-6


def test_the_report_of_several_seeds_is_their_mean_with_deviations():
    reports = [
        {"precision_at_1": 0.8, "recall_at_k": {"1": 0.8, "8": 0.9}, "circular_variance": None, "loss": "x"},
        {"precision_at_1": 0.9, "recall_at_k": {"1": 0.9, "8": 1.0}, "circular_variance": None, "loss": "x"},
        {"precision_at_1": 0.7, "recall_at_k": {"1": 0.6, "8": 0.8}, "circular_variance": None, "loss": "x"},
    ]
    for r, used in zip(reports, (3, 4, 4), strict=True):
        r |= {"knn_k": 5, "charts_used": used}
    out = report.over_seeds(reports)
    assert out["knn_k"] == 5 and isinstance(out["knn_k"], int)  # a shared setting stays the integer it is
    assert out["charts_used"] == pytest.approx(11 / 3)  # a count that differs is averaged
    assert out["precision_at_1"] == pytest.approx(0.8) and out["precision_at_1_std"] == pytest.approx(0.1)
    assert out["recall_at_k"]["8"] == pytest.approx(0.9) and out["recall_at_k_std"]["1"] == pytest.approx(
        np.std([0.8, 0.9, 0.6], ddof=1)
    )
    assert out["circular_variance"] is None and "circular_variance_std" not in out and out["loss"] == "x"


@pytest.mark.parametrize("args", [["seeds=2", "feed=host"], ["seeds=2", "parallel=pmap"], ["seeds=0"]])
def test_several_seeds_refuse_what_they_cannot_do(args):
    with pytest.raises(UsageError, match="seeds"):
        config.from_args(args)
