"""Asynchronous agent episodes: each episode goes generate -> parse -> environment step -> generate on its own.

:func:`~sand_framework.rollout.episodes.run_lockstep` advances every live
episode one depth at a time: one batched model call, then one ``step_all``,
so each depth costs the longest generation in the batch plus the slowest
environment step, and the engine idles while environments step and while
finished episodes wait for the stragglers. :func:`run_async` instead lets at
most ``max_concurrency`` episodes run on their own: an episode submits its
next turn as soon as its environment has answered, the engine batches
whatever requests are in flight (vLLM's continuous batching; a micro-batching
thread for backends without one), and environment steps run in the episode
pool (in its worker processes or Ray actors where it has them) while the
engine generates for the other episodes.

Results do not depend on scheduling: every request carries its own seed,
derived from the episode's seed and the turn index
(:func:`~sand_framework.rollout.episodes.turn_seed`), the same seed lock-step
mode sends, so an episode's sampled text depends on its own chat and seed
only (for backends that honour per-request seeds: ``SamplingParams.seeds``).

How a policy is driven (:func:`engine_client`):

* a policy with a ``submit(chat, sampling, role) -> concurrent.futures.Future`` method (the ``vllm`` policy:
  requests added to its engine as they come and its scheduler stepped by one thread; the ``openai`` policy:
  one request per turn on its event loop, spread over its servers) is used directly;
* any other policy is served by a :class:`MicroBatcher`: a thread that takes every request waiting and makes
  one ``generate`` call of them (the requests that arrive meanwhile form the next call).

Engine accounting (:class:`EngineMeter`, in the policy's ``stats`` for the built-in backends and in
:attr:`AsyncStats`): busy seconds (time with at least one request in the engine), the requests' queueing
seconds before the engine took them, their summed latency (latency / busy = mean requests in flight).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

from sand_framework.prompting import parse_turn
from sand_framework.rollout.episodes import Episode, _Direct, apply, turn_seed
from sand_framework.types import Chat, Completion, Role, SamplingParams, StepResult

ROLLOUT_MODES = ("lockstep", "async")


class EngineMeter:
    """Thread-safe accounting of an engine's requests: busy time (>= 1 request in flight), queueing, latency.

    ``begin`` when a request is handed to the caller's engine queue, ``started`` when the engine takes it,
    ``end`` when its result is delivered. A synchronous batched call is one ``span`` of ``k`` requests.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inflight = 0
        self._since = 0.0
        self.busy_seconds = 0.0
        self.queue_seconds = 0.0
        self.latency_seconds = 0.0
        self.requests = 0

    def begin(self) -> float:
        now = time.perf_counter()
        with self._lock:
            if self._inflight == 0:
                self._since = now
            self._inflight += 1
            self.requests += 1
        return now

    def started(self, submitted: float) -> None:
        with self._lock:
            self.queue_seconds += time.perf_counter() - submitted

    def end(self, submitted: float) -> None:
        now = time.perf_counter()
        with self._lock:
            self._inflight -= 1
            self.latency_seconds += now - submitted
            if self._inflight == 0:
                self.busy_seconds += now - self._since

    def span(self, seconds: float, requests: int) -> None:
        """A synchronous call that kept the engine busy ``seconds`` for ``requests`` requests (no queueing)."""
        with self._lock:
            if self._inflight == 0:
                self.busy_seconds += seconds
            self.requests += requests
            self.latency_seconds += seconds * requests

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            busy = self.busy_seconds + (time.perf_counter() - self._since if self._inflight else 0.0)
            return {"engine_busy_seconds": busy, "engine_queue_seconds": self.queue_seconds,
                    "engine_latency_seconds": self.latency_seconds, "engine_requests": float(self.requests)}


@dataclass
class AsyncStats:
    """What one :func:`run_async` call did (also what lock-step reports through :func:`rollout_stats`)."""

    wall_seconds: float = 0.0
    agent_turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    env_seconds: float = 0.0
    """Time the environment stepper was busy (steps of every pool call, summed over calls)."""
    engine: dict[str, float] = field(default_factory=dict)
    """The client's :class:`EngineMeter` snapshot over the call."""


# ---------------------------------------------------------------------------------------------- engine clients


class MicroBatcher:
    """Serves single-chat requests of a policy without ``submit``: one thread, one ``generate`` per batch.

    Requests waiting when the thread is free are generated together (up to ``max_batch``) if they share the
    role, temperature, ``n`` and ``max_new_tokens``; each keeps its own seed (``SamplingParams.seeds``)."""

    def __init__(self, policy: Any, max_batch: int = 0, meter: EngineMeter | None = None):
        self.policy = policy
        self.max_batch = max_batch
        self.meter = meter or EngineMeter()
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="sand-microbatcher", daemon=True)
        self._thread.start()

    def submit(self, chat: Chat, sampling: SamplingParams, role: Role = "agent") -> Future:
        fut: Future = Future()
        self._q.put((chat, sampling, role, fut, self.meter.begin()))
        return fut

    def _main(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            batch = [item]
            key = _batch_key(item[1], item[2])
            held = []
            while not self.max_batch or len(batch) < self.max_batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    held.append(None)
                    break
                (batch if _batch_key(nxt[1], nxt[2]) == key else held).append(nxt)
            for other in held:
                self._q.put(other)
            self._run(batch)

    def _run(self, batch: list[tuple]) -> None:
        sp = batch[0][1]
        seeds = [_request_seed(b[1]) for b in batch]
        sampling = SamplingParams(n=sp.n, temperature=sp.temperature, max_new_tokens=sp.max_new_tokens,
                                  seed=seeds[0], seeds=None if any(s is None for s in seeds) else seeds)
        for b in batch:
            self.meter.started(b[4])
        try:
            outs = self.policy.generate([b[0] for b in batch], sampling, role=batch[0][2])
        except BaseException as exc:  # noqa: BLE001 - delivered to every waiting episode
            for b in batch:
                self.meter.end(b[4])
                b[3].set_exception(exc)
            return
        for b, out in zip(batch, outs):
            self.meter.end(b[4])
            b[3].set_result(out)

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(30)


def _batch_key(sampling: SamplingParams, role: Role) -> tuple:
    return (role, sampling.n, sampling.temperature, sampling.max_new_tokens)


def _request_seed(sampling: SamplingParams) -> int | None:
    if sampling.seeds:
        return sampling.seeds[0]
    return sampling.seed


class _PolicyClient:
    """A policy's own ``submit``, metered by the caller."""

    def __init__(self, policy: Any, meter: EngineMeter | None = None):
        self.policy = policy
        self.meter = meter or EngineMeter()

    def submit(self, chat: Chat, sampling: SamplingParams, role: Role = "agent") -> Future:
        t0 = self.meter.begin()
        fut = self.policy.submit(chat, sampling, role)
        fut.add_done_callback(lambda _f: self.meter.end(t0))
        return fut

    def close(self) -> None:
        pass


def engine_client(policy: Any, max_batch: int = 0) -> Any:
    """How :func:`run_async` reaches ``policy``: its own ``submit`` where it has one, else a :class:`MicroBatcher`."""
    if callable(getattr(policy, "submit", None)):
        return _PolicyClient(policy)
    return MicroBatcher(policy, max_batch=max_batch)


# ---------------------------------------------------------------------------------------------- environment side


class EnvStepper:
    """One thread owning the pool: every step waiting is sent in one ``pool.step_all`` (parallel across the pool's
    workers), while the driver keeps submitting turns. The pool is touched by this thread only."""

    def __init__(self, pool: Any):
        self.pool = pool if pool is not None else _Direct
        self.busy_seconds = 0.0
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="sand-env-stepper", daemon=True)
        self._thread.start()

    def step(self, handle: Any, action: str) -> Future:
        fut: Future = Future()
        self._q.put((handle, action, fut))
        return fut

    def _main(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            batch = [item]
            stop = False
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            t0 = time.perf_counter()
            try:
                results = self.pool.step_all([(h, a) for h, a, _ in batch])
            except BaseException as exc:  # noqa: BLE001 - delivered to the episodes that asked
                for *_, fut in batch:
                    fut.set_exception(exc)
            else:
                for (*_, fut), res in zip(batch, results):
                    fut.set_result(res)
            self.busy_seconds += time.perf_counter() - t0
            if stop:
                return

    def close(self) -> None:
        self._q.put(None)
        self._thread.join(60)


# ---------------------------------------------------------------------------------------------- the loop


def run_async(episodes: list[Episode], policy: Any, sampling: SamplingParams, role: Role = "agent",
              pool: Any = None, max_concurrency: int = 32, client: Any = None) -> AsyncStats:
    """Advance every episode until done, each on its own, at most ``max_concurrency`` at a time.

    Same contract as :func:`~sand_framework.rollout.episodes.run_lockstep` (episodes positioned, ``pool`` holds
    their environments or None when they are environments; same parsing, step caps, token accounting and
    per-turn seeds), so both give the same episodes. ``client``: an engine client to reuse (default
    :func:`engine_client` of ``policy``, closed here)."""
    from sand_framework.rollout.episodes import assign_seeds

    start = time.perf_counter()
    stats = AsyncStats()
    assign_seeds(episodes, sampling)
    own_client = client is None
    client = client if client is not None else engine_client(policy)
    meter0 = client.meter.snapshot()
    stepper = EnvStepper(pool)
    waiting = deque(e for e in episodes if not e.done)
    pending: dict[Future, tuple[str, Episode, Any]] = {}
    greedy = sampling.temperature is None or sampling.temperature <= 0

    first = {id(e): len(e.steps) for e in episodes}

    def ask(ep: Episode) -> None:
        if greedy or ep.seed is None:  # as lock-step: the call's seed plus the depth reached in this call
            seed = None if sampling.seed is None else sampling.seed + len(ep.steps) - first[id(ep)]
            seeds = None
        else:
            seed = turn_seed(ep.seed, len(ep.steps))
            seeds = [seed]
        sp = SamplingParams(n=1, temperature=sampling.temperature, max_new_tokens=sampling.max_new_tokens,
                            seed=seed, seeds=seeds)
        pending[client.submit(ep.chat, sp, role)] = ("gen", ep, None)

    def fill() -> None:
        while waiting and len(pending) < max(1, int(max_concurrency)):
            ep = waiting.popleft()
            if not ep.done:
                ask(ep)

    try:
        fill()
        while pending:
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                kind, ep, turn = pending.pop(fut)
                if kind == "gen":
                    completion: Completion = fut.result()[0]
                    ep.prompt_tokens += completion.prompt_tokens
                    ep.completion_tokens += completion.completion_tokens
                    stats.prompt_tokens += completion.prompt_tokens
                    stats.completion_tokens += completion.completion_tokens
                    stats.agent_turns += 1
                    parsed = parse_turn(completion.text)
                    if not parsed.valid:
                        apply(ep, parsed.thought, parsed.action, None)
                    else:
                        pending[stepper.step(ep.env, parsed.action)] = ("env", ep, (parsed.thought, parsed.action))
                        continue
                else:
                    result: StepResult = fut.result()
                    apply(ep, turn[0], turn[1], result)
                if ep.done:
                    fill()
                else:
                    ask(ep)
    finally:
        stepper.close()
        meter1 = client.meter.snapshot()
        if own_client:
            client.close()
    stats.env_seconds = stepper.busy_seconds
    stats.engine = {k: meter1[k] - meter0.get(k, 0.0) for k in meter1}
    stats.wall_seconds = time.perf_counter() - start
    return stats


def run_episodes(episodes: list[Episode], policy: Any, sampling: SamplingParams, role: Role = "agent",
                 pool: Any = None, mode: str = "lockstep", max_concurrency: int = 32) -> AsyncStats:
    """:func:`run_lockstep` or :func:`run_async` by ``mode`` (``lockstep`` | ``async``); both give the same
    episodes for the same seeds (per-request seeds), and report the same :class:`AsyncStats`."""
    from sand_framework.rollout.episodes import run_lockstep

    if mode == "async":
        return run_async(episodes, policy, sampling, role=role, pool=pool, max_concurrency=max_concurrency)
    if mode != "lockstep":
        raise ValueError(f"rollout_mode must be one of {ROLLOUT_MODES}, got {mode!r}")
    start = time.perf_counter()
    turns0 = sum(len(e.steps) for e in episodes)
    tok0 = [(e.prompt_tokens, e.completion_tokens) for e in episodes]
    run_lockstep(episodes, policy, sampling, role=role, pool=pool)
    stats = AsyncStats(wall_seconds=time.perf_counter() - start,
                       agent_turns=sum(len(e.steps) for e in episodes) - turns0)
    stats.prompt_tokens = sum(e.prompt_tokens - p for e, (p, _) in zip(episodes, tok0))
    stats.completion_tokens = sum(e.completion_tokens - c for e, (_, c) in zip(episodes, tok0))
    return stats

