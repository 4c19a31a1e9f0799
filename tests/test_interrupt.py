"""Runs that survive interruption and damage: SIGINT / SIGTERM save and resume exactly, a damaged latest
checkpoint falls back to the previous one, a finished run can be extended, and what would fail after training
(or deep inside numpy, json or orbax) is a one-line error before any work."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import jax
import numpy as np
import pytest

from train import app, checkpoint, config, loop

TINY = dict(width=8, dim=4, batch_size=16, progress=False, eval_batch=512, devices=1, lr=1e-2)


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


def _assert_same_state(a, b):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def _train_cli(workdir, steps, **kw):
    args = [f"{k}={v}" for k, v in {**TINY, "steps": steps, "workdir": workdir, "log_every": 1, **kw}.items()]
    return [sys.executable, "-m", "train", *args]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_run_saves_then_rerun_ends_as_an_uninterrupted_run(signum, tmp_path):
    steps = 400
    env = {**os.environ, "XLA_FLAGS": "", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(_train_cli(str(tmp_path / "a"), steps), env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    # A background child of a non-interactive shell starts with SIGINT ignored: restore the default.
    proc = subprocess.Popen(
        _train_cli(str(tmp_path / "b"), steps),
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    log = tmp_path / "b" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 20):
        time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    err = err.decode()
    assert proc.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err and "rerun the command to resume" in err
    stopped = int(err.split("stopped after step ")[1].split()[0])
    assert 20 <= stopped < steps  # interrupted mid-run, not at the end
    again = subprocess.run(_train_cli(str(tmp_path / "b"), steps), env=env, capture_output=True, timeout=600)
    assert again.returncode == 0 and f"resuming from step {stopped} of {steps}" in again.stderr.decode()
    with np.load(tmp_path / "a" / "embeddings.npz") as a, np.load(tmp_path / "b" / "embeddings.npz") as b:
        np.testing.assert_allclose(a["query"], b["query"], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(a["reference"], b["reference"], rtol=1e-6, atol=1e-7)
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


def test_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path):
    kw = dict(TINY, steps=6, checkpoint_every=2, log_every=1)
    ref = loop.train(config.make(workdir=str(tmp_path / "a"), **kw)).state
    cfg = config.make(workdir=str(tmp_path / "b"), **kw)
    loop.train(cfg, stop_at=4)  # checkpoints at steps 2 and 4
    _damage_latest(cfg.workdir)
    with pytest.warns(UserWarning, match="checkpoint of step 4 .* skipped"):
        resumed = loop.train(cfg).state  # from step 2
    _assert_same_state(resumed, ref)


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


def test_a_finished_run_can_be_extended_and_keeps_its_timing(tmp_path, capsys):
    kw = dict(TINY, checkpoint_every=2, log_every=1)
    ref = loop.train(config.make(workdir=str(tmp_path / "a"), steps=6, **kw)).state
    first = app.run(config.make(workdir=str(tmp_path / "b"), steps=6, **kw))
    again = app.run(config.make(workdir=str(tmp_path / "b"), steps=6, **kw))
    assert again["timing"]["train_s"] == first["timing"]["train_s"]  # rerun of a finished run: no new timing
    capsys.readouterr()
    longer = loop.train(config.make(workdir=str(tmp_path / "b"), steps=9, **kw))
    assert "extending the finished run" in capsys.readouterr().err
    assert int(longer.state["step"]) == 9
    assert not np.allclose(_leaves(longer.state["params"])[0], _leaves(ref["params"])[0])
    with pytest.raises(ValueError, match="holds a run at step 9"):
        loop.train(config.make(workdir=str(tmp_path / "b"), steps=5, **kw))


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
    app.run(config.make(workdir=str(tmp_path), **TINY, steps=2, preset="mtriplet"))  # circular variance: None
    for name in ("config.json", "report.json"):
        json.loads(
            (tmp_path / name).read_text(),
            parse_constant=lambda c, name=name: pytest.fail(f"{name}: bare {c}"),
        )
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"metrics.jsonl: bare {c}"))


def test_idx_files_convert_to_the_npz_the_app_reads(tmp_path):
    import gzip

    from train import data

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
