"""Run a chain of stages over a sequence of items as a pipeline: each stage in its own thread, bounded in flight.

The data-building stage runs each batch of trajectories through sample -> roll out -> critique -> synthesize.
Chunk by chunk, the agent engine idles while a chunk's critiques run and the base engine idles while its
rollouts run. :func:`stream` overlaps them: batch k+1 samples and rolls out while batch k is critiqued. Results
come back in the order of the items, and each stage sees the items in that order, so a stage whose calls carry
their own seeds computes what the chunked loop computes, whatever the timing.

``depth`` bounds the items between entering the first stage and being taken by the consumer (what the stream
holds in memory and what a stop abandons); ``depth=1`` runs every stage in the caller's thread, one item after
another: the chunked loop itself.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

JOIN_TIMEOUT_S = 60.0
"""How long closing a stream waits, in all, for its stage threads to finish the items they are computing (their
results are dropped): a stage is not left running against components the caller is about to shut down, unless
it takes longer than this, and a stop never waits longer than this for the stream."""


@dataclass
class _Failed:
    """An item whose stage raised: it passes the later stages untouched and is raised to the consumer in order."""

    error: BaseException


_END = object()


def stream(items: Iterable[Any], stages: Sequence[Callable[[Any], Any]], depth: int) -> Iterator[Any]:
    """Yield ``stages[-1](...stages[0](item))`` for each item, in order, with at most ``depth`` items in flight.

    A stage's exception is raised when its item's turn comes (the items before it are yielded first); closing
    the generator early (``break``, an exception in the consumer, a stop signal) stops feeding, lets the stage
    threads finish their current items (up to :data:`JOIN_TIMEOUT_S` in all) and drops what is still in flight.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    if depth == 1 or not stages:
        for item in items:
            for fn in stages:
                item = fn(item)
            yield item
        return
    stop = threading.Event()
    slots = threading.Semaphore(depth)
    queues: list[queue.Queue] = [queue.Queue() for _ in range(len(stages) + 1)]

    def feed() -> None:
        try:
            for item in items:
                while not slots.acquire(timeout=0.05):
                    if stop.is_set():
                        return
                if stop.is_set():
                    return
                queues[0].put(item)
        except BaseException as exc:  # noqa: BLE001 - the consumer raises it, in order
            queues[0].put(_Failed(exc))
        finally:
            queues[0].put(_END)

    def work(i: int, fn: Callable[[Any], Any]) -> None:
        while True:
            item = queues[i].get()
            if item is _END:
                queues[i + 1].put(_END)
                return
            if not isinstance(item, _Failed) and not stop.is_set():
                try:
                    item = fn(item)
                except BaseException as exc:  # noqa: BLE001 - the consumer raises it, in order
                    item = _Failed(exc)
            queues[i + 1].put(item)

    threads = [threading.Thread(target=feed, name="sand-stream-feed", daemon=True)]
    threads += [threading.Thread(target=work, args=(i, fn), name=f"sand-stream-{i}", daemon=True)
                for i, fn in enumerate(stages)]
    for t in threads:
        t.start()
    try:
        while True:
            item = queues[-1].get()
            if item is _END:
                return
            slots.release()
            if isinstance(item, _Failed):
                raise item.error
            yield item
    finally:
        stop.set()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
