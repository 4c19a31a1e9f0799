"""``init_from=RUN_DIR``: a new run starts from another run's newest checkpoint (weights, optimiser state,
step) under its own keys, the app's way to fine-tune (quantisation-aware training in train.qat)."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from train.app import config, loop
from train.app.errors import UsageError

TINY = dict(width=32, batch_size=32, dim=8, steps_per_call=1, progress=False, log_every=1, lr=1e-2)


def _leaves_close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_a_run_started_from_a_checkpoint_continues_it_as_a_resume_would(tmp_path):
    kw = dict(TINY, steps=6, checkpoint_every=3)
    source = str(tmp_path / "source")
    loop.train(config.make(workdir=source, **kw), stop_at=3)  # its newest checkpoint: step 3
    started = loop.train(config.make(workdir=str(tmp_path / "new"), init_from=source, **kw)).state
    resumed = loop.train(config.make(workdir=source, **kw)).state  # the source itself, resumed to step 6
    assert int(started["step"]) == int(resumed["step"]) == 6
    _leaves_close(started["params"], resumed["params"])
    _leaves_close(started["opt_state"], resumed["opt_state"])
    with open(tmp_path / "new" / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [4, 5, 6]
    with open(tmp_path / "new" / "config.json") as f:
        assert json.load(f)["init_from"] == source


def test_fine_tuning_under_new_keys_trains_through_them_and_resumes_its_own_checkpoint(tmp_path, capsys):
    # A float torusN run, then quantisation-aware fine-tuning from its step 3: the QAT run ends elsewhere
    # than the float run's own continuation, and, interrupted, resumes from its own checkpoint.
    kw = dict(TINY, steps=6, checkpoint_every=1)
    source = str(tmp_path / "float")
    loop.train(config.make(workdir=source, **kw), stop_at=3)
    plain = loop.train(config.make(workdir=str(tmp_path / "plain"), init_from=source, **kw)).state
    qat_cfg = config.make(workdir=str(tmp_path / "qat"), init_from=source, qat_bits=2, **kw)
    assert int(loop.train(qat_cfg, stop_at=5).state["step"]) == 5
    capsys.readouterr()
    qat = loop.train(qat_cfg).state
    assert "resuming from step 5" in capsys.readouterr().err
    assert int(qat["step"]) == 6
    pairs = zip(jax.tree.leaves(qat["params"]), jax.tree.leaves(plain["params"]), strict=True)
    assert any(not np.allclose(a, b) for a, b in pairs)


def test_bad_init_from_is_refused_before_the_workdir_is_touched(tmp_path):
    kw = dict(TINY, steps=4, checkpoint_every=2)
    source = str(tmp_path / "source")
    loop.train(config.make(workdir=source, **kw))  # at step 4
    new = tmp_path / "new"
    cases = [
        (dict(init_from=str(tmp_path / "nowhere")), "init_from .* is not a run directory with checkpoints"),
        (dict(init_from=source, dim=16), "init_from .*another shape"),
        (dict(init_from=source, steps=3), r"init_from .* is at step 4; steps must be ≥ 4"),
    ]
    for keys, message in cases:
        with pytest.raises(UsageError, match=message):
            loop.train(config.make(workdir=str(new), **{**kw, **keys}))
        assert not os.path.exists(new)
