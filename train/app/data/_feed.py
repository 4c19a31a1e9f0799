"""The host feed's prefetch thread: batches computed ahead, so the devices do not wait on the host."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items`` computed ahead by a background thread, so the devices do not wait on the host's NumPy work.

    Closing this generator (or dropping it) stops the thread.

    Args:
        items: an iterable whose items are computed on the thread (a generator of host batches).
        depth: the most items waiting, computed but not yet taken (≥ 1).

    Returns:
        An iterator over ``items``, in order.

    Raises:
        BaseException: whatever computing an item raised, raised here, when the consumer reaches it.
    """
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer((item, None)):
                    return
        except BaseException as err:  # handed to the consumer, which raises it
            offer((None, err))
            return
        offer((done, None))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, err = ready.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        stop.set()
        thread.join()
