"""Multi-process data parallelism through JAX's distributed runtime: two local processes × 2 CPU devices
(coordinator on 127.0.0.1, gloo collectives), started as ``python -m train`` with the coordinator keys or
JAX's environment variables, train as one process × 4 devices does, and their orbax checkpoints restore in a
run of the other kind, both ways."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from subprocess_env import child_env

from train.app import checkpoint, config, loop
from train.app import step as step_lib

# A well-conditioned recipe, so that the collectives' other summation order stays at round-off: SGD (Adam's
# g/√v blows round-off in near-zero gradients up to the learning rate) and no KoLeo (its 1/distance
# gradients on a barely trained model amplify it past 1e-5).
KW = dict(width=8, dim=4, batch_size=16, optimizer="sgd", lr=0.05, koleo=0.0)
KW |= dict(checkpoint_every=2, log_every=1, progress=False)
TIMEOUT_S = 600  # for one 2-process run, start-up and evaluation included


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_processes(workdir: str, steps: int, *, from_environment: bool) -> dict:
    """``python -m train`` as processes 0 and 1 of one run (logs beside ``workdir``); the lead's report."""
    port, procs, logs = _free_port(), [], []
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    args = [f"{k}={v}" for k, v in {**KW, "steps": steps, "workdir": workdir}.items()]
    for index in (0, 1):
        env = child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2")  # each child has its own 2 devices
        place = [f"coordinator=127.0.0.1:{port}", "num_processes=2", f"process_id={index}"]
        if from_environment:
            env |= {
                "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                "JAX_NUM_PROCESSES": "2",
                "JAX_PROCESS_ID": str(index),
            }
            place = []
        log = open(os.path.join(os.path.dirname(workdir), f"process{index}.log"), "w+")
        logs.append(log)
        command = [sys.executable, "-m", "train", *args, *place]
        procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True))
    deadline = time.time() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            if any(p.returncode not in (None, 0) for p in procs):  # one failed: the other would wait forever
                break
            time.sleep(0.2)
    finally:
        for p in procs:  # ends what is still running (a failure or the time limit), the whole group
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
        log.close()
    for index, p in enumerate(procs):
        assert p.returncode == 0, f"process {index} exited {p.returncode}:\n{texts[index][-3000:]}"
    with open(os.path.join(workdir, "report.json")) as f:
        report = json.load(f)
    assert report["timing"]["processes"] == 2 and report["timing"]["devices"] == 4
    return report


def _checkpointed(workdir, like):
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    try:
        return ckpt.steps()[-1], ckpt.restore(like)
    finally:
        ckpt.close()


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_two_processes_train_as_one_and_checkpoints_restore_both_ways(tmp_path):
    # one process × 4 devices: 4 steps, then extended to 6 (the schedule of a 6-step run from step 4 on)
    one = str(tmp_path / "one" / "run")
    ref4 = loop.train(config.make(workdir=one, steps=4, devices=4, **KW))
    assert ref4.timing["devices"] == 4 and ref4.timing["processes"] == 1
    _, init = step_lib.init_state(config.make(**KW), (8, 8, 1))
    moved = [
        np.max(np.abs(a - b)) for a, b in zip(jax.tree.leaves(ref4.state), jax.tree.leaves(init), strict=True)
    ]
    assert max(moved) > 1e-3  # the steps changed the parameters: their equality below means something
    other = str(tmp_path / "other" / "run")
    shutil.copytree(one, other)  # kept at step 4 for the 2-process extension below
    ref6 = loop.train(config.make(workdir=one, steps=6, devices=4, **KW)).state

    # two processes × 2 devices, the same global batches: the same parameters after 4 steps
    two = str(tmp_path / "two" / "run")
    _two_processes(two, 4, from_environment=False)
    step, restored = _checkpointed(two, ref4.state)
    assert step == 4
    _assert_same(restored, ref4.state)
    with open(os.path.join(one, "metrics.jsonl")) as a, open(os.path.join(two, "metrics.jsonl")) as b:
        one_losses = [json.loads(line)["loss"] for line in a][:4]
        two_losses = [json.loads(line)["loss"] for line in b]
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)

    # the 2-process checkpoint resumes in one process ...
    _assert_same(loop.train(config.make(workdir=two, steps=6, devices=4, **KW)).state, ref6)
    # ... and the 1-process checkpoint in two processes (configured through JAX's environment variables)
    _two_processes(other, 6, from_environment=True)
    step, restored = _checkpointed(other, ref6)
    assert step == 6
    _assert_same(restored, ref6)
