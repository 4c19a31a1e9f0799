"""Runs that survive interruption and damage: SIGINT / SIGTERM save and resume exactly (and SIGTERM ends a
real process with one line), a damaged latest checkpoint falls back to the previous one, a finished run can
be extended, and what would fail after training (or deep inside numpy, json or orbax) is a one-line error
before any work."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import jax
import numpy as np
import pytest
from subprocess_env import child_env

from train.app import checkpoint, cli, config, loop

TINY = dict(width=8, dim=4, batch_size=16, progress=False, eval_batch=512, devices=1, lr=1e-2)


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


def _assert_same_state(a, b):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def _train_cli(workdir, steps, **kw):
    args = [f"{k}={v}" for k, v in {**TINY, "steps": steps, "workdir": workdir, "log_every": 1, **kw}.items()]
    return [sys.executable, "-m", "train", *args]


REF_KW = dict(TINY, steps=6, checkpoint_every=2, log_every=1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The final state of an uninterrupted 6-step run, checkpoints every 2 steps (shared by several tests)."""
    workdir = str(tmp_path_factory.mktemp("reference"))
    return loop.train(config.make(workdir=workdir, **REF_KW)).state


@pytest.mark.slow
def test_sigterm_in_a_real_process_saves_one_line_exits_143_and_the_rerun_resumes(tmp_path):
    """The command-line path in a process of its own: SIGTERM (a scheduler's preemption) mid-run, one line
    and exit status 128 + 15, no traceback; the rerun resumes from that step and completes the log. That a
    resumed run ends exactly as an uninterrupted one is test_signal_saves_the_current_step_and_resumes."""
    steps = 400
    env = child_env(JAX_PLATFORMS="cpu")
    proc = subprocess.Popen(
        _train_cli(str(tmp_path), steps), env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    log = tmp_path / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 20):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    err = err.decode()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "Traceback" not in err and "rerun the command to resume" in err
    stopped = int(err.split("SIGTERM: stopped after step ")[1].split()[0])
    assert 20 <= stopped < steps  # interrupted mid-run, not at the end
    again = subprocess.run(_train_cli(str(tmp_path), steps), env=env, capture_output=True, timeout=600)
    assert again.returncode == 0 and f"resuming from step {stopped} of {steps}" in again.stderr.decode()
    with np.load(tmp_path / "embeddings.npz") as z:
        assert z["query"].shape == (450, TINY["dim"]) and np.isfinite(z["query"]).all()
    steps_logged = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps_logged == list(range(1, steps + 1))


def _damage_latest(workdir):
    ckpts = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    latest = os.path.join(ckpts.directory, str(ckpts.steps()[-1]))
    for root, _, names in os.walk(latest):
        for name in names:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"not a checkpoint")
    ckpts.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_saves_the_current_step_and_resumes(signum, tmp_path, monkeypatch, reference):
    """Ctrl-C or SIGTERM after step 3, delivered to this process while it trains (between two calls): a
    checkpoint of step 3 itself (the periodic ones are at 2 and 4), then the rerun ends exactly where an
    uninterrupted run does."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers in the main thread only (training installs none elsewhere)")
    cfg = config.make(workdir=str(tmp_path), **REF_KW)

    class SignalAfterStep3(loop._Window):
        seen = 0

        def add(self, metrics, steps):
            super().add(metrics, steps)
            SignalAfterStep3.seen += steps
            if SignalAfterStep3.seen == 3:
                signal.raise_signal(signum)

    monkeypatch.setattr(loop, "_Window", SignalAfterStep3)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(loop.Interrupted) as stop:
            loop.train(cfg)
    except KeyboardInterrupt:
        pytest.fail("SIGINT was not caught while training")
    assert (stop.value.signum, stop.value.step) == (signum, 3)
    assert str(stop.value).startswith(f"{signum.name}: stopped after step 3 with a checkpoint")
    assert handlers == {s: signal.getsignal(s) for s in handlers}  # restored after training
    ckpts = checkpoint.Checkpointer(os.path.join(cfg.workdir, "checkpoints"))
    assert ckpts.steps()[-1] == 3
    ckpts.close()
    monkeypatch.undo()
    _assert_same_state(loop.train(cfg).state, reference)
    with open(os.path.join(cfg.workdir, "metrics.jsonl")) as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3, 4, 5, 6]


def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, reference):
    cfg = config.make(workdir=str(tmp_path), **REF_KW)
    loop.train(cfg, stop_at=4)  # checkpoints at steps 2 and 4
    _damage_latest(cfg.workdir)
    with pytest.warns(UserWarning, match="checkpoint of step 4 .* skipped"):
        resumed = loop.train(cfg).state  # from step 2
    _assert_same_state(resumed, reference)


def test_a_checkpoint_of_another_model_is_one_clear_error(tmp_path):
    kw = dict(TINY, steps=2, checkpoint_every=1)
    loop.train(config.make(workdir=str(tmp_path), **{**kw, "width": 12}))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "width": 8}))  # claims another model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(checkpoint.CheckpointError, match="another shape"):
            loop.train(config.make(workdir=str(tmp_path), **kw))


def test_all_checkpoints_damaged_names_the_directory(tmp_path):
    cfg = config.make(workdir=str(tmp_path), **dict(TINY, steps=2, checkpoint_every=1))
    loop.train(cfg)
    _damage_latest(cfg.workdir)
    ck = checkpoint.Checkpointer(os.path.join(cfg.workdir, "checkpoints"))
    first = os.path.join(ck.directory, str(ck.steps()[0]))
    ck.close()
    for root, _, names in os.walk(first):
        for name in names:
            with open(os.path.join(root, name), "wb") as f:
                f.write(b"garbage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(checkpoint.CheckpointError, match="no readable checkpoint in .*checkpoints"):
            loop.train(cfg)


def test_a_finished_run_can_be_extended_and_keeps_its_timing(tmp_path, capsys, reference):
    first = cli.run(config.make(workdir=str(tmp_path), **REF_KW))
    again = cli.run(config.make(workdir=str(tmp_path), **REF_KW))
    assert again["timing"]["train_s"] == first["timing"]["train_s"]  # rerun of a finished run: no new timing
    capsys.readouterr()
    longer = loop.train(config.make(workdir=str(tmp_path), **{**REF_KW, "steps": 9}))
    assert "extending the finished run" in capsys.readouterr().err
    assert int(longer.state["step"]) == 9
    assert not np.allclose(_leaves(longer.state["params"])[0], _leaves(reference["params"])[0])
    with pytest.raises(ValueError, match="holds a run at step 9"):
        loop.train(config.make(workdir=str(tmp_path), **{**REF_KW, "steps": 5}))


def test_errors_before_any_work(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        loop.train(config.make(workdir=str(a_file), **TINY, steps=1))
    pickled = tmp_path / "pickled.npz"
    np.save(pickled, np.array([{"a": 1}], dtype=object))
    os.replace(str(pickled) + ".npy", pickled)
    with pytest.raises(ValueError, match="cannot be read as a NumPy .npz"):
        loop.train(config.make(dataset=f"npz:{pickled}", workdir=str(tmp_path / "w1"), **TINY, steps=1))
    text = tmp_path / "text.npz"
    text.write_text("not an archive")
    with pytest.raises(ValueError, match="cannot be read as a NumPy .npz"):
        loop.train(config.make(dataset=f"npz:{text}", workdir=str(tmp_path / "w2"), **TINY, steps=1))
    with pytest.raises(ValueError, match="knn_k must be at most"):
        loop.train(config.make(knn_k=5000, workdir=str(tmp_path / "w3"), **TINY, steps=1))
    bad = tmp_path / "inf.npz"
    images = np.random.default_rng(0).random((40, 8, 8)).astype(np.float32)
    images[3, 2, 2] = np.inf
    np.savez(bad, images=images, labels=np.arange(40) % 4)
    with pytest.raises(ValueError, match="1 of 40 images hold NaN or ±inf"):
        loop.train(config.make(dataset=f"npz:{bad}", workdir=str(tmp_path / "w4"), **TINY, steps=1))
    assert not any((tmp_path / f"w{i}").exists() for i in range(1, 5))  # nothing written
    (tmp_path / "w5").mkdir()
    (tmp_path / "w5" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read its config.json"):
        loop.train(config.make(workdir=str(tmp_path / "w5"), **TINY, steps=1))


def test_written_files_are_strict_json(tmp_path):
    cli.run(config.make(workdir=str(tmp_path), **TINY, steps=2, preset="mtriplet"))  # circular variance: None
    for name in ("config.json", "report.json"):
        json.loads(
            (tmp_path / name).read_text(),
            parse_constant=lambda c, name=name: pytest.fail(f"{name}: bare {c}"),
        )
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"metrics.jsonl: bare {c}"))


def test_idx_files_convert_to_the_npz_the_app_reads(tmp_path):
    import gzip

    from train.app import data

    images = np.random.default_rng(0).integers(0, 256, (30, 5, 4), dtype=np.uint8)
    labels = (np.arange(30) % 3).astype(np.uint8)
    with gzip.open(tmp_path / "images-idx3-ubyte.gz", "wb") as f:  # the MNIST layout: magic, sizes, bytes
        f.write(bytes([0, 0, 8, 3]) + b"".join(n.to_bytes(4, "big") for n in images.shape) + images.tobytes())
    with open(tmp_path / "labels-idx1-ubyte", "wb") as f:
        f.write(bytes([0, 0, 8, 1]) + (30).to_bytes(4, "big") + labels.tobytes())
    out = str(tmp_path / "small.npz")
    assert data.main([str(tmp_path / "images-idx3-ubyte.gz"), str(tmp_path / "labels-idx1-ubyte"), out]) == 0
    with np.load(out) as z:
        np.testing.assert_array_equal(z["images"], images)
        np.testing.assert_array_equal(z["labels"], labels)
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + (31).to_bytes(4, "big") + labels.tobytes())
    with pytest.raises(ValueError, match="30 data bytes follow"):
        data.read_idx(str(tmp_path / "short"))
