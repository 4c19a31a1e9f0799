"""Several processes as one run: every decision that leads into a collective is taken once, for all of them.

A multi-process run (JAX's distributed runtime, one process per host) meets in collectives: each step's
all-reduce, orbax's checkpoint save, the best-weights save. A process that enters one alone waits for the
others forever (or until gloo or the runtime gives up). So the loop never acts on one process's view:

- a stop (SIGINT, SIGTERM, caught by :func:`stop_signals`) and a checkpoint by the clock are OR-ed over the
  processes each call, one call behind so that no host waits for it (:class:`Agreement`): all save the same
  step and stop together;
- a preemption notice (SIGTERM to any one process, or the cluster's own notice) is JAX's: every process
  reaches the same sync point (:func:`preempted`); :func:`decide` takes both into what every process does
  after a call;
- whether a validation score keeps the weights is the lead's decision (:func:`lead_decides`);
- a process that fails tells the others (:func:`leave`), which stop within half a second with a line that
  names it; a process that dies without a word (killed, out of memory) is noticed by the runtime's heartbeat
  after ``distributed_timeout_s``.

On one process every function here returns its argument or does nothing, with no collective run.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

_FAILED = "geojax/failed/"  # the coordination service's keys of failed processes, one per process
POLL_S = 0.5  # how often each process looks for another's failure


def _client():
    """The distributed runtime's client (its key-value store), or None. JAX has no public handle to it;
    multihost_utils and orbax read the same one."""
    from jax._src import distributed

    return distributed.global_state.client


def several() -> bool:
    """Whether this is one process of a multi-process run.

    Returns:
        True when JAX's distributed runtime joined more than one process.
    """
    return jax.process_count() > 1


def join(address: str | None, count: int | None, index: int | None, *, timeout_s: int) -> None:
    """Start JAX's distributed runtime and the watch for other processes' failures.

    CPU collectives go through gloo. The runtime's heartbeat and shutdown timeouts are ``timeout_s``: a
    process silent for that long (killed, hung) stops the others, and at exit a process waits at most that
    long for the others to finish.

    Args:
        address: the coordinator's HOST:PORT (None: the cluster's own settings).
        count: the number of processes (None: the cluster's).
        index: this process's id (None: the cluster's).
        timeout_s: the heartbeat and shutdown timeout in seconds.
    """
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        address, count, index, heartbeat_timeout_seconds=timeout_s, shutdown_timeout_seconds=timeout_s
    )
    if several():
        watch = _Watch()
        watch.start()
        atexit.register(watch.stop)  # before JAX's own exit handler shuts the runtime down


class Agreement:
    """Flags OR-ed over the processes, one call behind.

    What every process gets at a call is what any process had at the call before.

    Each call posts this process's flags to a small collective program and, without waiting for it, takes
    the previous call's result, which is ready by then (its program ran before the step just dispatched).
    So the host never waits for the devices to agree, and all processes act on the same flags at the same
    call. On one process the flags come back at once, as they are, and nothing runs.
    """

    def __init__(self) -> None:
        self._posted: jax.Array | None = None

    def __call__(self, *flags: bool) -> tuple[bool, ...]:
        """Post ``flags``; return the agreed flags of the previous call (all False at the first).

        Args:
            *flags: this process's flags, the same number at every call.

        Returns:
            One flag per argument, the same on every process.
        """
        if not several():
            return flags
        previous, self._posted = self._posted, _post_or(np.asarray(flags, bool))
        return tuple(False for _ in flags) if previous is None else _read(previous)


@functools.cache
def _or_program() -> tuple[NamedSharding, Callable[[jax.Array], jax.Array]]:
    """The layout of one row of flags per process and the program that ORs the rows, replicated."""
    devices = np.array(jax.devices()).reshape(jax.process_count(), jax.local_device_count())
    mesh = Mesh(devices, ("processes", "local"))
    program = jax.jit(lambda rows: jnp.any(rows, axis=0), out_shardings=NamedSharding(mesh, P()))
    return NamedSharding(mesh, P("processes")), program


def _post_or(flags: np.ndarray) -> jax.Array:
    rows, program = _or_program()
    local = flags[None]  # this process's row
    return program(jax.make_array_from_process_local_data(rows, local, (jax.process_count(), flags.size)))


def _read(agreed: jax.Array) -> tuple[bool, ...]:
    return tuple(bool(v) for v in np.asarray(agreed.addressable_data(0)))


def lead_decides(flags: np.ndarray) -> np.ndarray:
    """Process 0's boolean ``flags`` on every process (on one process, ``flags``).

    Args:
        flags: a boolean array of the same shape on every process.

    Returns:
        The lead's flags.
    """
    if not several():
        return flags
    return np.asarray(multihost_utils.broadcast_one_to_all(flags.astype(np.int32))).astype(bool)


def runtime_catches_sigterm() -> bool:
    """Whether JAX's preemption service listens for SIGTERM in this process.

    It does in a multi-process run with ``jax_enable_preemption_service`` on: SIGTERM is then left to it,
    and :func:`preempted` reports it.

    Returns:
        True in such a run, False otherwise.
    """
    return several() and bool(jax.config.jax_enable_preemption_service)


def preempted(call: int) -> bool:
    """Whether every process has reached the preemption sync point at this call.

    After a preemption notice to any process (SIGTERM, or the cluster's notice), all processes get True at
    the same call; before one, False, at no cost. Every process must ask at every call, counting from 0.

    Args:
        call: the index of this process's dispatch since training (re)started, the same on every process.

    Returns:
        True at the call where every process saves and stops; False otherwise and on one process.
    """
    return runtime_catches_sigterm() and multihost_utils.reached_preemption_sync_point(call)


@contextlib.contextmanager
def stop_signals() -> Iterator[list[int]]:
    """Catch SIGINT and SIGTERM while training: the list receives the signal, the loop saves and stops.

    Where JAX's preemption service listens for SIGTERM (a multi-process run), SIGTERM is left to it
    (:func:`runtime_catches_sigterm`). Outside the main thread (where Python delivers signals) nothing is
    caught.

    Returns:
        A context manager whose value is the list of the signals caught while it is entered.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    signals = (signal.SIGINT,) if runtime_catches_sigterm() else (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in signals}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def decide(agreement: Agreement, caught: list[int], overdue: bool, call: int) -> tuple[int | None, bool]:
    """What every process does after dispatch ``call``: stop or go on, and save by the clock or not.

    Taken from all processes' signals and clocks (``agreement``; in a multi-process run, as they were one
    call before) and JAX's preemption sync point, so that all processes save the same step.

    Args:
        agreement: the run's :class:`Agreement` of (SIGINT, SIGTERM, overdue).
        caught: the signals this process caught (:func:`stop_signals`).
        overdue: whether this process's clock asks for a checkpoint.
        call: the index of the dispatch since training (re)started, the same on every process.

    Returns:
        (the signal that stops the run, None to go on; whether the clock asks for a checkpoint).
    """
    sigint, sigterm, overdue = agreement(signal.SIGINT in caught, signal.SIGTERM in caught, overdue)
    if sigterm or preempted(call):
        return signal.SIGTERM, overdue
    return (signal.SIGINT if sigint else None), overdue


def leave(status: int, err: BaseException) -> NoReturn:
    """End a process of a multi-process run that failed: tell the others, print why, exit now.

    The others stop within :data:`POLL_S` with a line naming this process. This process exits without
    waiting at the runtime's shutdown barrier, which the others will never reach. When another process
    failed first (its exit broke a collective of this one), this process names that one instead and exits
    with status 1.

    Args:
        status: the exit status.
        err: what failed (its traceback is printed unless it is a one-line error of the user's).

    Returns:
        Never: the process ends.
    """
    from train.app.errors import UsageError

    client = _client()
    if client is not None:
        if first := _failed_other(
            client
        ):  # another's failure broke this process's collective: name the cause
            _stop_for(*first)
        text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        client.key_value_set(f"{_FAILED}{jax.process_index()}", text[:500])
    if isinstance(err, UsageError):
        print(f"error: {err}", file=sys.stderr)
    else:
        traceback.print_exception(err)
    print(f"process {jax.process_index()} failed; the other processes stop", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _failed_other(client) -> tuple[str, str] | None:
    """(process id, what failed) of another process that said it failed, or None."""
    me = str(jax.process_index())
    failed = [(k.rsplit("/", 1)[-1], v) for k, v in client.key_value_dir_get(_FAILED)]
    return next(((who, text) for who, text in failed if who != me), None)


def _stop_for(who: str, text: str) -> NoReturn:
    print(f"error: process {who} failed ({text}); process {jax.process_index()} stops", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


class _Watch(threading.Thread):
    """Looks every :data:`POLL_S` for another process's failure; on one, prints it and exits with status 1
    (this process is then most likely waiting in a collective that will never complete)."""

    def __init__(self) -> None:
        super().__init__(name="geojax-failure-watch", daemon=True)
        self._quit = threading.Event()

    def run(self) -> None:
        client = _client()
        while not self._quit.wait(POLL_S):
            try:
                first = _failed_other(client)
            except Exception:  # the runtime is shutting down: nothing more to watch
                return
            if first:
                _stop_for(*first)

    def stop(self) -> None:
        self._quit.set()
        self.join()
