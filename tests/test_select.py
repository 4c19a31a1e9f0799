"""Best-epoch selection (``select_best``, Stowell 2026 §5's early stopping): a validation split carved from
the training set, its P@1 every ``val_every`` steps, and the report of the best evaluation's weights."""

from __future__ import annotations

import json
import logging
import os

import jax
import numpy as np
import pytest

from train.app import checkpoint, cli, config, data, report, step
from train.app.errors import UsageError

# 12 validations over 60 steps; at this learning rate validation P@1 peaks before the last step.
RUN = dict(
    dataset="digits",
    width=32,
    dim=8,
    batch_size=64,
    steps=60,
    lr=3e-2,
    warmup=0,
    schedule="constant",
    select_best=True,
    val_every=5,
    progress=False,
    eval_batch=512,
    devices=1,
)


def _rows(x: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in x}


def test_hold_out_is_disjoint_stratified_and_fixed():
    ds = data.load("digits")
    fit, val = data.hold_out(ds, 0.1)
    assert _rows(fit.train_x).isdisjoint(_rows(val.test_x))
    assert _rows(fit.train_x) | _rows(val.test_x) == _rows(ds.train_x)
    assert len(val.test_y) == pytest.approx(0.1 * len(ds.train_y), abs=1)
    assert np.all(np.abs(np.bincount(val.test_y) - 0.1 * np.bincount(ds.train_y)) <= 1)  # stratified
    np.testing.assert_array_equal(fit.train_x, val.train_x)  # validation references: the rest
    np.testing.assert_array_equal(fit.test_x, ds.test_x)  # the test set is untouched
    again, _ = data.hold_out(ds, 0.1)
    np.testing.assert_array_equal(again.train_x, fit.train_x)
    with pytest.raises(ValueError, match="fraction"):
        data.hold_out(ds, 1.0)


def test_select_best_keys():
    assert config.make().select_best is False
    for preset in ("supcon_sphere_cifar10", "supcon_torus_n_cifar100"):
        cfg = config.make(preset=preset)
        assert cfg.select_best and cfg.val_fraction == 0.1
    with pytest.raises(UsageError, match="val_fraction applies to select_best=True"):
        config.make(val_fraction=0.2)
    with pytest.raises(UsageError, match="val_fraction must be in"):
        config.make(select_best=True, val_fraction=1.5)


def _evaluate(cfg: config.Config, state: step.State) -> dict:
    """The report of ``state`` on the run's data: test queries against the training images less the
    validation split, as an independent evaluation of a checkpoint."""
    fit, _ = data.hold_out(data.load(cfg.dataset), cfg.val_fraction)
    graphdef, _ = step.init_state(cfg, fit.image_shape, axis_name=None)
    query = report.embed(graphdef, state, fit.test_x, batch=cfg.eval_batch)
    reference = report.embed(graphdef, state, fit.train_x, batch=cfg.eval_batch)
    return report.retrieval_report(cfg, query, reference, fit)


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("select") / "run")
    cfg = config.make(**RUN, workdir=workdir)
    rep = cli.run(cfg)
    with open(os.path.join(workdir, "selection.json")) as f:
        return cfg, rep, json.load(f)


def test_report_holds_the_best_validation_epochs_weights(selected):
    cfg, rep, sel = selected
    history = sel["history"]
    assert [h["step"] for h in history] == list(range(5, 61, 5))
    p1 = [h["precision_at_1"][0] for h in history]
    best = history[int(np.argmax(p1))]
    assert sel["best"] == [{"step": best["step"], "epoch": best["epoch"], "precision_at_1": max(p1)}]
    assert best["step"] < 60 and max(p1) > p1[-1]  # the last evaluation is not the best
    per_epoch = step.steps_per_epoch(cfg, len(data.hold_out(data.load("digits"), 0.1)[0].train_y))
    assert best["epoch"] == round(best["step"] / per_epoch, 3)
    # the kept checkpoint is the best step's, and the report is its evaluation
    ckpt = checkpoint.Checkpointer(os.path.join(cfg.workdir, "best"), keep=1)
    assert ckpt.steps() == [best["step"]]
    _, like = step.init_state(cfg, (8, 8, 1), axis_name=None)
    kept = ckpt.restore(like)
    ckpt.close()
    assert int(kept["step"]) == best["step"]
    again = _evaluate(cfg, kept)
    for key in ("precision_at_1", "knn_accuracy"):
        assert rep[key] == pytest.approx(again[key], abs=1e-6), key
    assert rep["n_reference"] == len(data.load("digits").train_y) - len(
        data.hold_out(data.load("digits"), 0.1)[1].test_y
    )
    # … and not that of the last weights
    last = checkpoint.Checkpointer(os.path.join(cfg.workdir, "checkpoints"))
    final = _evaluate(cfg, last.restore(like))
    last.close()
    assert final["precision_at_1"] != pytest.approx(rep["precision_at_1"], abs=1e-6)


def test_select_best_resumes_to_the_same_selection(selected, tmp_path):
    cfg, rep, sel = selected
    workdir = str(tmp_path / "run")
    assert cli.run(config.make(**RUN, workdir=workdir, checkpoint_every=20), stop_at=50) is None
    resumed = cli.run(config.make(**RUN, workdir=workdir, checkpoint_every=20))
    with open(os.path.join(workdir, "selection.json")) as f:
        again = json.load(f)
    assert again["best"] == sel["best"]
    assert [h["step"] for h in again["history"]] == [h["step"] for h in sel["history"]]
    np.testing.assert_allclose(
        [h["precision_at_1"] for h in again["history"]],
        [h["precision_at_1"] for h in sel["history"]],
        atol=1e-6,
    )
    assert resumed["precision_at_1"] == pytest.approx(rep["precision_at_1"], abs=1e-6)


def test_every_evaluation_reuses_one_compiled_forward(caplog):
    """A run evaluates many times (every validation, the report's test and reference sets): after the first
    embedding, one of another set with the same model and batch compiles nothing."""
    cfg = config.make(**RUN)
    fit, val = data.hold_out(data.load(cfg.dataset), cfg.val_fraction)
    graphdef, state = step.init_state(cfg, fit.image_shape, axis_name=None)
    report.embed(graphdef, state, val.test_x, batch=cfg.eval_batch)
    with jax.log_compiles(), caplog.at_level(logging.WARNING, logger="jax"):
        out = report.embed(graphdef, state, fit.train_x, batch=cfg.eval_batch)
    assert out.embedding.shape == (len(fit.train_x), cfg.dim)
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not compiled, compiled
