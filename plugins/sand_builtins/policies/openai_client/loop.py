"""A private asyncio event loop on a daemon thread, for a synchronous API over an async client.

The policy interface is synchronous, while the SDK's ``AsyncOpenAI`` keeps
many requests in flight over one connection pool. That pool belongs to the
event loop it first ran on, so every call must run on the same loop:
``asyncio.run`` per call would strand the pool's connections on a closed loop,
and it cannot be used at all by a caller that already runs a loop (a notebook,
an async application). One long-lived loop on its own thread avoids both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Runs coroutines to completion on one event loop that lives on a daemon thread."""

    def __init__(self, name: str = "sand-openai-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it; an interrupt (Ctrl-C) while waiting cancels it."""
        if not self.running:
            coro.close()
            raise RuntimeError("policy 'openai': used after close()")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()
