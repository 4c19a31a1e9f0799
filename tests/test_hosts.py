"""Several processes decide as one (train.app.hosts): a signal to one process, clocks that cross the
checkpoint time at different calls, and a process that fails, each tried on two local processes of one
``python -m train`` run (jax.distributed on 127.0.0.1, gloo, one CPU device each) through
tests/hosts_worker.py; and what one process does, which must be what it did before."""

import os
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from subprocess_env import child_env

from train.app import checkpoint, config, hosts
from train.app import step as step_lib

WORKER = os.path.join(os.path.dirname(__file__), "hosts_worker.py")
# the well-conditioned recipe of test_multiprocess.py: two processes and one agree to round-off
KW = dict(width=8, dim=4, batch_size=16, optimizer="sgd", lr=0.05, koleo=0.0, log_every=1, progress=False)
KW |= dict(distributed_timeout_s=60)


def test_one_process_decides_alone_with_no_collective(monkeypatch):
    def no_collective(*args, **kw):
        raise AssertionError("a collective on one process")

    monkeypatch.setattr(hosts.multihost_utils, "process_allgather", no_collective)
    monkeypatch.setattr(hosts.multihost_utils, "broadcast_one_to_all", no_collective)
    monkeypatch.setattr(hosts.multihost_utils, "reached_preemption_sync_point", no_collective)
    monkeypatch.setattr(hosts, "_post_or", no_collective)
    agreement = hosts.Agreement()
    assert agreement(True, False, True) == (True, False, True)  # at once, not one call behind
    flags = np.array([True, False])
    assert hosts.lead_decides(flags) is flags
    assert not hosts.preempted(7) and not hosts.runtime_catches_sigterm() and not hosts.several()
    assert hosts.decide(agreement, [], False, 0) == (None, False)
    assert hosts.decide(agreement, [signal.SIGINT], True, 3) == (signal.SIGINT, True)
    assert hosts.decide(agreement, [signal.SIGINT, signal.SIGTERM], False, 3) == (signal.SIGTERM, False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Pair:
    """Processes 0 and 1 of one run of tests/hosts_worker.py, each with its own worker options."""

    def __init__(self, workdir, steps: int, options: tuple[list[str], list[str]], **keys):
        port, self.procs, self.logs = _free_port(), [], []
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        args = [f"{k}={v}" for k, v in {**KW, **keys, "steps": steps, "workdir": self.workdir}.items()]
        for index in (0, 1):
            env = child_env(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="1")
            place = [f"coordinator=127.0.0.1:{port}", "num_processes=2", f"process_id={index}"]
            log = open(os.path.join(os.path.dirname(self.workdir), f"process{index}-{time.time()}.log"), "w+")
            self.logs.append(log)
            command = [sys.executable, WORKER, *options[index], *args, *place]
            self.procs.append(
                subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
            )

    def wait(self, timeout_s: float) -> tuple[list[int | None], list[str], list[float]]:
        """Each process's exit status (None: running at the deadline, then killed), log and exit time."""
        deadline, ended = time.time() + timeout_s, [None, None]
        try:
            while time.time() < deadline and None in ended:
                for i, p in enumerate(self.procs):
                    if ended[i] is None and p.poll() is not None:
                        ended[i] = time.time()
                time.sleep(0.1)
        finally:
            codes = [p.poll() for p in self.procs]
            for p in self.procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        texts = []
        for log in self.logs:
            log.seek(0)
            texts.append(log.read())
            log.close()
        return codes, texts, ended

    def lead_step(self) -> int:
        """The last step of the lead's metrics.jsonl (0 before its first line)."""
        try:
            with open(os.path.join(self.workdir, "metrics.jsonl")) as f:
                steps = re.findall(r'"step": (\d+)', f.read())
        except FileNotFoundError:
            return 0
        return int(steps[-1]) if steps else 0


def _saves(text: str) -> list[int]:
    return [int(s) for s in re.findall(r"saved step (\d+)", text)]


def _like():
    return step_lib.init_state(config.make(**KW), (8, 8, 1))[1]


def _checkpointed(workdir):
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"))
    try:
        return ckpt.steps(), ckpt.restore(_like())
    finally:
        ckpt.close()


def _ok(codes, texts):
    for index, (code, text) in enumerate(zip(codes, texts, strict=True)):
        assert code == 0, f"process {index} exited {code}:\n{text[-3000:]}"


@pytest.mark.slow
def test_sigterm_to_one_process_saves_one_common_step_and_the_rerun_ends_as_an_unbroken_run(tmp_path):
    steps, keys = 300, dict(checkpoint_every=100)
    broken = _Pair(tmp_path / "broken" / "run", steps, (["--slow", "0.02"], ["--slow", "0.02"]), **keys)
    deadline = time.time() + 240
    while broken.lead_step() < 20 and time.time() < deadline and broken.procs[1].poll() is None:
        time.sleep(0.1)
    assert broken.lead_step() >= 20, "the run did not reach step 20"
    signalled = time.time()
    os.kill(broken.procs[1].pid, signal.SIGTERM)  # process 1 alone, as a preempted host
    codes, texts, ended = broken.wait(90)
    assert codes == [143, 143], f"exit statuses {codes}:\n{texts[0][-2000:]}\n{texts[1][-2000:]}"
    assert max(ended) - signalled < 60
    stopped = [int(re.search(r"stopped after step (\d+)", t).group(1)) for t in texts]
    assert stopped[0] == stopped[1] and 20 <= stopped[0] < steps, stopped
    assert _saves(texts[0]) == _saves(texts[1]) and _saves(texts[0])[-1] == stopped[0]
    assert _checkpointed(broken.workdir)[0][-1] == stopped[0]

    # the same two commands again resume from that step and end where an unbroken run ends
    codes, texts, _ = _Pair(broken.workdir, steps, ([], []), **keys).wait(240)
    _ok(codes, texts)
    assert f"resuming from step {stopped[0]} of {steps}" in texts[0]
    codes, texts, _ = _Pair(tmp_path / "whole" / "run", steps, ([], []), **keys).wait(240)
    _ok(codes, texts)
    (last, resumed), (last_whole, whole) = (
        _checkpointed(broken.workdir),
        _checkpointed(tmp_path / "whole" / "run"),
    )
    assert last[-1] == last_whole[-1] == steps
    for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(whole), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_clocks_that_cross_the_checkpoint_time_at_other_calls_save_the_same_steps(tmp_path):
    # checkpoint_minutes=2: process 0's clock passes 120 s every 3rd read, process 1's every 2nd; the
    # best-weights selection's saves (every 5 steps) are decided by the lead's validation
    clocks = (["--clock", "50"], ["--clock", "70"])
    keys = dict(checkpoint_every=1000, checkpoint_minutes=2, select_best=True, val_every=5)
    pair = _Pair(tmp_path / "run", 30, clocks, **keys)
    codes, texts, _ = pair.wait(240)
    _ok(codes, texts)
    saves = [_saves(t) for t in texts]
    assert saves[0] == saves[1], saves
    assert len(saves[0]) >= 8 and saves[0][-1] == 30  # the clocks' saves, then the last step's


@pytest.mark.slow
def test_a_process_that_fails_stops_the_other_with_a_line_naming_it(tmp_path):
    # process 1 fails at its 2nd save (step 20) while process 0 enters that save's collectives
    pair = _Pair(tmp_path / "run", 40, ([], ["--fail-at-save", "2"]), checkpoint_every=10)
    codes, texts, ended = pair.wait(120)
    assert codes == [1, 1], f"exit statuses {codes}:\n{texts[0][-2000:]}\n{texts[1][-2000:]}"
    assert "RuntimeError: a fault injected at save 2 (step 20)" in texts[1]
    assert (
        "error: process 1 failed (RuntimeError: a fault injected at save 2 (step 20)); process 0 stops"
        in (texts[0])
    )
    assert abs(ended[0] - ended[1]) < 10
    steps, restored = _checkpointed(pair.workdir)  # the newest checkpoint is the last complete one
    assert steps[-1] == 10 and int(restored["step"]) == 10
