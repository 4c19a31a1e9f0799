"""The one timer behind every benchmark and the app's encode timings.

    >>> import jax.numpy as jnp
    >>> fn, peer_fn, x = jax.jit(lambda v: v * 2), jnp.sin, jnp.ones(1000)
    >>> timing = measure(fn, x, repeats=5, warmup=2)
    >>> timing.best <= timing.median and timing.cpu_best >= 0  # seconds per call
    True
    >>> times = interleaved({"ours": Call(fn, (x,)), "peer": Call(peer_fn, (x,))}, rounds=5)
    >>> ratio = times["peer"].median / times["ours"].median  # a ratio measured under the same load

Each sample times ``number`` back-to-back calls and then waits for the last result (``jax.block_until_ready``
by default, so JAX's asynchronous dispatch does not hide the work), and records both wall-clock seconds and
the process's CPU seconds (all its threads, ``time.process_time``) per call. CPU seconds make a comparison
fair on a machine shared with other work; on an accelerator they measure only the host side.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax


@dataclass(frozen=True)
class Timing:
    """The samples of one :func:`measure`: seconds per call (wall clock and process CPU), the last output.

    Attributes:
        seconds: wall-clock seconds per call, one per sample.
        cpu_seconds: the process's CPU seconds (all threads) per call, one per sample.
        result: the output of the last call.
    """

    seconds: tuple[float, ...]
    cpu_seconds: tuple[float, ...]
    result: Any = field(repr=False)

    @property
    def median(self) -> float:
        """Median wall-clock seconds per call."""
        return statistics.median(self.seconds)

    @property
    def best(self) -> float:
        """Smallest wall-clock seconds per call."""
        return min(self.seconds)

    @property
    def cpu_median(self) -> float:
        """Median process CPU seconds per call."""
        return statistics.median(self.cpu_seconds)

    @property
    def cpu_best(self) -> float:
        """Smallest process CPU seconds per call."""
        return min(self.cpu_seconds)


def measure(
    fn: Callable[..., Any],
    *args: Any,
    repeats: int,
    warmup: int = 1,
    number: int = 1,
    budget_s: float | None = None,
    block: Callable[[Any], Any] = jax.block_until_ready,
) -> Timing:
    """Time ``fn(*args)``: ``warmup`` untimed calls (each waited for), then up to ``repeats`` samples.

    A sample is ``number`` consecutive calls followed by ``block(last output)``; its times are divided by
    ``number``, so every figure is seconds per call. ``number > 1`` measures throughput of a pipeline of
    calls (dispatch overlapping the work), ``number = 1`` the latency of one call. ``budget_s``: stop
    taking samples once the timed calls have taken more than this many wall-clock seconds in total (at
    least one sample is always taken). ``block``: waits for an output; the default blocks on every JAX
    array in it and passes anything else through (pass e.g. ``lambda _: torch.cuda.synchronize()`` for
    another framework's asynchronous work).

    Args:
        fn: the function to time.
        *args: its arguments, the same for every call.
        repeats: the most samples to take, ≥ 1.
        warmup: untimed calls first (compilation, caches), ≥ 0.
        number: calls per sample, ≥ 1.
        budget_s: stop once the timed calls took this many wall-clock seconds (None: take every sample).
        block: waits for an output (default ``jax.block_until_ready``).

    Returns:
        The :class:`Timing` of the samples taken, seconds per call, with the last call's output.

    Raises:
        ValueError: ``repeats`` < 1, ``number`` < 1 or ``warmup`` < 0.
    """
    if repeats < 1 or number < 1 or warmup < 0:
        raise ValueError(
            f"need repeats ≥ 1, number ≥ 1 and warmup ≥ 0, got repeats={repeats}, number={number}, "
            f"warmup={warmup}"
        )
    for _ in range(warmup):
        block(fn(*args))
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeats):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(number):
            result = fn(*args)
        block(result)
        walls.append((time.perf_counter() - wall0) / number)
        cpus.append((time.process_time() - cpu0) / number)
        if budget_s is not None and sum(walls) * number > budget_s:
            break
    return Timing(seconds=tuple(walls), cpu_seconds=tuple(cpus), result=result)


class Call(NamedTuple):
    """One contender of :func:`interleaved`, its fields as :func:`measure` takes them.

    Attributes:
        fn: the function to time.
        args: its arguments.
        number: calls per sample.
        block: waits for its output (default ``jax.block_until_ready``).
    """

    fn: Callable[..., Any]
    args: tuple = ()
    number: int = 1
    block: Callable[[Any], Any] = jax.block_until_ready


def interleaved(
    calls: Mapping[str, Call], *, rounds: int, warmup: int = 1, settle_s: float = 0.0
) -> dict[str, Timing]:
    """Time several contenders in alternating rounds, so that their ratios hold on a shared machine.

    ``warmup`` untimed calls of each, then ``rounds`` rounds that take one :func:`measure` sample of each in
    turn, so that load from other processes falls on all of them alike. With ``settle_s``, each sample
    follows untimed calls of the same contender for at least that long, so that it times the contender in
    its own steady state rather than in the wake of the one before: an OpenMP runtime (torch's, faiss's)
    keeps its worker threads spinning for milliseconds after a parallel region, which on a machine with few
    cores takes a core from the next contender's first call.

    Args:
        calls: name → :class:`Call`, timed in this order within each round.
        rounds: the number of rounds (samples per contender), ≥ 1.
        warmup: untimed calls of each first, ≥ 0.
        settle_s: seconds of untimed calls of a contender before each of its samples, ≥ 0 (0: none).

    Returns:
        Name → :class:`Timing` of its ``rounds`` samples (seconds per call) and its last output.

    Raises:
        ValueError: ``settle_s`` is negative.
    """
    if not settle_s >= 0:
        raise ValueError(f"settle_s must be ≥ 0 seconds, got {settle_s!r}")
    for call in calls.values():
        for _ in range(warmup):
            call.block(call.fn(*call.args))
    samples: dict[str, list[Timing]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            _settle(call, settle_s)
            timing = measure(call.fn, *call.args, repeats=1, warmup=0, number=call.number, block=call.block)
            samples[name].append(timing)
    return {
        name: Timing(
            seconds=tuple(t.seconds[0] for t in got),
            cpu_seconds=tuple(t.cpu_seconds[0] for t in got),
            result=got[-1].result,
        )
        for name, got in samples.items()
    }


def _settle(call: Call, seconds: float) -> None:
    """Untimed calls of ``call`` (each waited for) until ``seconds`` have passed; none when 0."""
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        call.block(call.fn(*call.args))
