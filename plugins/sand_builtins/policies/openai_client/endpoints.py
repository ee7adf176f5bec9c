"""The servers behind one ``openai`` policy: an SDK client each, requests spread over them, admin calls to all.

Every request goes to the server with the fewest requests in flight (ties in
turn), under one bound of ``max_concurrency`` per server: with equal servers
that is round-robin, and a slow or busy server simply receives less. Retries
and backoff are the SDK's (``max_retries``, ``timeout``); what still fails
after them is translated into the policy's errors, naming the server.

All coroutines here run on the policy's :class:`~.loop.LoopThread`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import openai

from .errors import ServerUnavailable, error_text, translate

T = TypeVar("T")


def server_root(api_root: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000``: where a vLLM server's admin routes are."""
    url = api_root.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass
class Endpoint:
    """One server: its API root, its SDK client and what it has been sent."""

    url: str
    client: openai.AsyncOpenAI
    in_flight: int = 0
    """Requests sent and not yet answered (what the spreading balances)."""
    requests: int = 0
    """SDK calls made to this server (each may take several HTTP attempts)."""
    attempts: int = 0
    """HTTP requests actually sent, retries included (counted by an httpx event hook)."""


class Endpoints:
    """SDK clients for ``urls``, one request bound per server, least-in-flight spreading."""

    def __init__(self, urls: list[str], api_key: str, timeout_s: float, connect_timeout_s: float,
                 max_retries: int, max_concurrency: int):
        self.urls = list(urls)
        self.api_key = api_key or "EMPTY"  # the SDK insists on a key; servers without --api-key ignore it
        self.timeout = openai.Timeout(float(timeout_s), connect=float(connect_timeout_s))
        self.max_retries = int(max_retries)
        self.max_concurrency = int(max_concurrency)
        self.endpoints: list[Endpoint] = []
        self._slots: asyncio.Semaphore | None = None
        self._turn = 0

    async def open(self) -> None:
        """Create the clients on the running loop (their connection pools belong to it)."""
        for url in self.urls:
            ep = Endpoint(url=url, client=None)  # type: ignore[arg-type]
            ep.client = openai.AsyncOpenAI(
                base_url=url, api_key=self.api_key, timeout=self.timeout, max_retries=self.max_retries,
                http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [self._counter(ep)]}))
            self.endpoints.append(ep)
        self._slots = asyncio.Semaphore(self.max_concurrency * len(self.endpoints))

    @staticmethod
    def _counter(ep: Endpoint) -> Callable[[Any], Awaitable[None]]:
        async def count(_request: Any) -> None:
            ep.attempts += 1

        return count

    def pick(self) -> Endpoint:
        """The server with the fewest requests in flight; among equals, the next in turn."""
        n = len(self.endpoints)
        order = [self.endpoints[(self._turn + i) % n] for i in range(n)]
        best = min(order, key=lambda ep: ep.in_flight)
        self._turn = (self.endpoints.index(best) + 1) % n
        return best

    async def call(self, what: str, request: Callable[[openai.AsyncOpenAI], Awaitable[T]]) -> tuple[T, str]:
        """``request(client)`` on the least busy server, within the concurrency bound: its answer and the server's
        URL. Errors are translated (and name the server).

        The global bound is ``max_concurrency x servers`` and the least busy
        server is chosen once a slot is free, so no server ever has more than
        ``max_concurrency`` requests in flight.
        """
        assert self._slots is not None, "Endpoints.open() first"
        async with self._slots:
            ep = self.pick()
            ep.in_flight += 1
            ep.requests += 1
            start = time.monotonic()
            try:
                return await request(ep.client), ep.url
            except openai.OpenAIError as exc:
                raise translate(exc, ep.url, what, self.max_retries + 1, time.monotonic() - start) from exc
            finally:
                ep.in_flight -= 1

    async def post(self, ep: Endpoint, route: str, body: dict[str, Any]) -> str:
        """``POST {url}/{route}`` on one server (vLLM's admin routes, which the SDK has no method for)."""
        ep.requests += 1
        start = time.monotonic()
        try:
            return await ep.client.post(f"/{route}", body=body, cast_to=str)
        except openai.OpenAIError as exc:
            raise translate(exc, ep.url, f"POST /{route}", self.max_retries + 1, time.monotonic() - start) from exc

    async def post_root(self, ep: Endpoint, path: str, body: dict[str, Any] | None = None) -> str:
        """``POST {server root}{path}`` on one server: vLLM's dev-mode routes (``/sleep``, ``/wake_up``,
        ``/collective_rpc``, ``/reset_prefix_cache``) live beside ``/v1``, not under it."""
        ep.requests += 1
        start = time.monotonic()
        try:
            return await ep.client.post(server_root(ep.url) + path, body=body, cast_to=str)
        except openai.OpenAIError as exc:
            raise translate(exc, ep.url, f"POST {path}", self.max_retries + 1, time.monotonic() - start) from exc

    async def post_all(self, route: str, body: dict[str, Any] | None,
                       endpoints: list[Endpoint] | None = None, root: bool = False) -> list[Exception | None]:
        """The same admin call on every server (or on ``endpoints``) at once; per server ``None`` or its error.
        ``root``: ``route`` is a path under the server root (see :meth:`post_root`), not under the API root."""
        targets = self.endpoints if endpoints is None else endpoints
        call = (lambda ep: self.post_root(ep, route, body)) if root else (lambda ep: self.post(ep, route, body))
        results = await asyncio.gather(*(call(ep) for ep in targets), return_exceptions=True)
        out: list[Exception | None] = []
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, Exception):
                raise r  # cancellation, interrupts
            out.append(r if isinstance(r, Exception) else None)
        return out

    async def wait_ready(self, timeout_s: float) -> None:
        """Poll every server's ``GET /models`` until all answer, or raise naming the ones that did not."""
        deadline = time.monotonic() + timeout_s

        async def one(ep: Endpoint) -> str | None:
            last = "no attempt"
            while True:
                left = deadline - time.monotonic()
                quick = ep.client.with_options(max_retries=0, timeout=openai.Timeout(
                    max(0.1, min(self.timeout.read or timeout_s, left)), connect=self.timeout.connect))
                ep.requests += 1
                try:
                    await quick.models.list()
                    return None
                except openai.APIStatusError as exc:
                    last = f"HTTP {exc.status_code}: {error_text(exc)}"
                except openai.OpenAIError as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if time.monotonic() >= deadline:
                    return last
                await asyncio.sleep(min(1.0, max(0.05, deadline - time.monotonic())))

        lasts = await asyncio.gather(*(one(ep) for ep in self.endpoints))
        failed = [f"{ep.url} (last: {last})" for ep, last in zip(self.endpoints, lasts) if last is not None]
        if failed:
            raise ServerUnavailable(f"policy 'openai': server(s) not ready after {timeout_s:.0f}s: "
                                    + "; ".join(failed))

    @property
    def requests(self) -> int:
        return sum(ep.requests for ep in self.endpoints)

    @property
    def retries(self) -> int:
        return max(0, sum(ep.attempts for ep in self.endpoints) - self.requests)

    async def aclose(self) -> None:
        for ep in self.endpoints:
            await ep.client.close()
        self.endpoints = []

