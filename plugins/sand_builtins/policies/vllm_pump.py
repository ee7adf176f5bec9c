"""The ``vllm`` policy's request pump: one thread that hands every request to its engine and steps the engines.

Every request goes through it, those of a synchronous ``generate`` and those ``submit`` makes for asynchronous
rollouts alike, because vLLM's ``LLMEngine`` is not safe to call from several threads and because a streamed
build calls the policy from several threads at once (one per phase: sampling, rollouts, critique and synthesis).
Through one pump their requests share the engine's continuous batching: the base model's critiques of batch k
decode in the same engine steps as the agent's turns of batch k+1 (one engine serving the agent as a LoRA
adapter), or on their own engine at the same time (a full-model agent's engine; on vLLM V1 each engine computes
in its own process, so stepping them from one thread does not serialize them).

Engines that must take turns (sleep mode with one engine awake at a time: ``placement: swap``, or one GPU too
small for both) are respected: a request for a sleeping engine waits until the awake engine has answered every
request it holds, then the pump wakes its engine (the other goes to sleep) and adds it.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from sand_framework.rollout import EngineMeter
from sand_framework.types import Role

STOP = None
"""What :meth:`RequestPump.stop` queues: the pump finishes the requests it holds, then its thread ends."""


@dataclass
class Request:
    """One engine request: prompt token ids, vLLM ``SamplingParams`` (``output_kind`` FINAL_ONLY: the pump
    delivers finished outputs only), and what turns the engine's finished ``RequestOutput`` into the future's
    result."""

    ids: list[int]
    params: Any
    role: Role
    finish: Callable[[Any], Any]
    future: Future
    submitted: float


class RequestPump:
    """Feeds requests to the engines from one thread (started on the first request) until :meth:`stop`.

    ``engine_for(role)`` gives the engine and LoRA request of a role; ``activate(llm)`` wakes an engine (and puts
    the others to sleep unless ``may_share()``: whether engines may be awake, and so hold requests, together)."""

    def __init__(self, engine_for: Callable[[Role], tuple[Any, Any]], activate: Callable[[Any], None],
                 may_share: Callable[[], bool], meter: EngineMeter):
        self._engine_for = engine_for
        self._activate = activate
        self._may_share = may_share
        self.meter = meter
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()
        self._start_lock = threading.Lock()

    def put(self, ids: list[int], params: Any, role: Role, finish: Callable[[Any], Any]) -> Future:
        """Queue one request; its future gets ``finish(output)``, or the exception that failed it."""
        fut: Future = Future()
        self._queue.put(Request(ids, params, role, finish, fut, self.meter.begin()))
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._main, name="sand-vllm-pump", daemon=True)
                self._thread.start()
        return fut

    def stop(self, timeout: float = 30) -> None:
        """Answer what is queued, then end the thread (a later :meth:`put` starts a new one)."""
        with self._start_lock:
            if self._thread is not None and self._thread.is_alive():
                self._queue.put(STOP)
                self._thread.join(timeout)
            self._thread = None
            self._queue = queue.Queue()

    # ------------------------------------------------------------------

    def _take(self, block: bool) -> tuple[list[Request], bool]:
        """Everything queued (waiting for the first item when ``block``), and whether :data:`STOP` was among it."""
        items: list[Request] = []
        try:
            item = self._queue.get() if block else self._queue.get_nowait()
            while True:
                if item is STOP:
                    return items, True
                items.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            return items, False

    def _fail(self, req: Request, exc: BaseException) -> None:
        self.meter.end(req.submitted)
        req.future.set_exception(exc)

    def _deliver(self, req: Request, output: Any) -> None:
        self.meter.end(req.submitted)
        try:
            req.future.set_result(req.finish(output))
        except BaseException as exc:  # noqa: BLE001 - the caller's conversion failed: it is the caller's error
            req.future.set_exception(exc)

    def _add(self, reqs: list[Request], engines: dict[int, Any], inflight: dict[str, Request]) -> list[Request]:
        """Add ``reqs`` to their engines; return those whose engine must wait for the awake one to finish."""
        waiting = []
        for req in reqs:
            try:
                llm, lora = self._engine_for(req.role)
                if id(llm) not in engines:
                    if engines and not self._may_share():
                        waiting.append(req)
                        continue
                    self._activate(llm)
                    engines[id(llm)] = llm
                rid = f"sand-{next(self._ids)}"
                llm.llm_engine.add_request(rid, {"prompt_token_ids": req.ids}, req.params, lora_request=lora)
                inflight[rid] = req
                self.meter.started(req.submitted)
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller that asked
                self._fail(req, exc)
        return waiting

    def _step(self, engines: dict[int, Any], inflight: dict[str, Request]) -> None:
        """One scheduler step of every engine with work; finished requests are delivered. An engine that fails
        fails every request in flight (the engine is gone, or in an unknown state)."""
        try:
            for llm in list(engines.values()):
                if not llm.llm_engine.has_unfinished_requests():
                    continue
                for out in llm.llm_engine.step():
                    if getattr(out, "finished", False) and out.request_id in inflight:
                        self._deliver(inflight.pop(out.request_id), out)
        except BaseException as exc:  # noqa: BLE001 - delivered to every caller waiting
            for req in inflight.values():
                self._fail(req, exc)
            inflight.clear()

    def _main(self) -> None:
        inflight: dict[str, Request] = {}
        engines: dict[int, Any] = {}  # the engines holding requests now
        waiting: list[Request] = []
        stopping = False
        while True:
            if stopping and not inflight and not waiting:
                return
            new, stop = self._take(block=not inflight and not waiting and not stopping)
            stopping = stopping or stop
            waiting = self._add(waiting + new, engines, inflight)
            if inflight:
                self._step(engines, inflight)
            if not inflight:
                engines.clear()  # the next request may wake another engine
