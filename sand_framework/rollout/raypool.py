"""Env-worker pool on Ray: actors holding warm environments (``pip install 'sand-framework[ray]'``).

Ray is imported only when a pool is created, so this module (and the ``ray``
executor) import without it. Each actor wraps an
:class:`~sand_framework.rollout.worker.EnvHost`. Three kinds of trouble, three
answers:

* **A lost actor** (its process or node died): Ray restarts it
  (``max_restarts``) and retries the call that was running on it
  (``max_task_retries``). Every step request carries its episode's history,
  so the restarted actor replays the episode before stepping; the driver sees
  a new actor incarnation and counts it in ``faults_survived``.
* **A hung actor** (an environment stuck in a step, e.g. a JVM): Ray cannot
  see it, so every call has a deadline, as in the process pool (``timeout_s``;
  ``startup_timeout_s`` for an actor's first call, which builds its
  environment). Past it the actor is killed and replaced by a fresh one, and
  its operations are sent again (``hangs`` and ``faults_survived``), at most
  ``max_restarts`` times within one call.
* **An actor Ray could not save** (restarts used up, a node gone for good, an
  exception outside the environment): :class:`EnvWorkerError` (exit code 5,
  the run is resumable) naming the actor, what it was running and Ray's
  reason, instead of a bare Ray traceback.

Actors are named (``sand-env-<pool>-w<i>.<generation>``), so the one an error
names is the one ``ray list actors`` and the dashboard show.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import Counter
from typing import Any

from sand_framework.components import Environment
from sand_framework.errors import EnvWorkerError, ExtraNotInstalled, install_hint
from sand_framework.rollout.remote import RemotePool
from sand_framework.rollout.worker import EnvHost

log = logging.getLogger(__name__)


def _require_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExtraNotInstalled(f"executor 'ray' needs Ray, which is not installed ({exc}); "
                                f"{install_hint('ray')}") from exc
    return ray


class _EnvActor:
    """The actor body (wrapped by ``ray.remote`` on first use)."""

    def __init__(self, blob: dict[str, Any]):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self.host = EnvHost(blob)

    def run(self, ops: list[tuple]) -> tuple[str, list[Any]]:
        return self.host.incarnation, self.host.run(ops)

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.host.close()


def describe_ops(ops: list[tuple]) -> str:
    """``run(2 step, 1 replay; tasks a, b)``: what a call was doing, for error messages."""
    kinds = Counter(op[0] for op in ops)
    tasks = sorted({str(op[3] if op[0] == "step" else op[2]) for op in ops if len(op) > 3})
    shown = ", ".join(tasks[:4]) + (f" (+{len(tasks) - 4} more)" if len(tasks) > 4 else "")
    return f"run({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}; tasks {shown})"


class RayEnvPool(RemotePool):
    def __init__(self, prototype: Environment, num_workers: int = 2, address: str | None = None,
                 num_cpus: float = 1.0, max_restarts: int = 3, max_task_retries: int = 3,
                 timeout_s: float | None = 300.0, startup_timeout_s: float = 180.0, log_to_driver: bool = False,
                 actor_options: dict[str, Any] | None = None, init_options: dict[str, Any] | None = None):
        super().__init__(prototype, num_workers)
        ray = self.ray = _require_ray()
        self.owns_ray = False
        if not ray.is_initialized():
            # Inside `ray job submit`, address=None connects to the job's cluster (RAY_ADDRESS is set).
            ray.init(address=address, include_dashboard=False, log_to_driver=log_to_driver, **(init_options or {}))
            self.owns_ray = address is None
        self.max_restarts = max_restarts
        self.max_task_retries = max_task_retries
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.counters["hangs"] = 0
        self.pool_id = uuid.uuid4().hex[:8]
        self._options = {"num_cpus": num_cpus, "max_restarts": max_restarts, "max_task_retries": max_task_retries,
                         **(actor_options or {})}
        self._actor_cls = ray.remote(_EnvActor)
        self.generations = [0] * self.n_workers
        self.actors = [self._spawn(w) for w in range(self.n_workers)]
        self.incarnations: list[str | None] = [None] * self.n_workers
        self.answered = [False] * self.n_workers
        """Until its first reply an actor is still starting (scheduling, imports, a JVM): not hung yet."""

    def actor_name(self, w: int) -> str:
        return f"sand-env-{self.pool_id}-w{w}.{self.generations[w]}"

    def describe(self, w: int) -> str:
        return f"env actor {w} of {self.n_workers} ({self.actor_name(w)})"

    def _spawn(self, w: int) -> Any:
        return self._actor_cls.options(**{**self._options, "name": self.actor_name(w)}).remote(self.blob)

    def pids(self) -> list[int]:
        return self.ray.get([a.pid.remote() for a in self.actors])

    def _limit(self, w: int) -> float:
        assert self.timeout_s is not None
        return self.timeout_s if self.answered[w] else max(self.timeout_s, self.startup_timeout_s)

    def _replace(self, w: int, ref: Any, survived: bool = True) -> None:
        """Kill a hung actor for good and start a fresh one in its slot (it replays episodes from history)."""
        try:
            self.ray.cancel(ref)  # a cancelled call is not retried by Ray on top of our resend
        except Exception as exc:  # noqa: BLE001 - best effort: the kill below is what frees the slot
            log.debug("%s: cancel failed: %s", self.describe(w), exc)
        try:
            self.ray.kill(self.actors[w], no_restart=True)
        except Exception as exc:  # noqa: BLE001
            log.warning("%s: could not kill the hung actor: %s", self.describe(w), exc)
        self.generations[w] += 1
        self.actors[w] = self._spawn(w)
        self.incarnations[w] = None
        self.answered[w] = False
        if survived:
            self.counters["faults_survived"] += 1

    def _failure(self, w: int, ops: list[tuple], exc: Exception) -> EnvWorkerError:
        """The error for an actor call Ray could not complete, naming the actor and the call."""
        what = f"{self.describe(w)} failed while running {describe_ops(ops)}"
        if isinstance(exc, self.ray.exceptions.RayActorError):
            return EnvWorkerError(
                f"{what}: the actor died and Ray could not recover it (max_restarts={self.max_restarts}, "
                f"max_task_retries={self.max_task_retries}): {exc}. Its output is in the Ray logs of its node "
                "(`ray logs`, or /tmp/ray/session_latest/logs; executor.log_to_driver=true streams it here); "
                "the run can be resumed once the environment is fixed")
        cause = getattr(exc, "cause", None) or exc
        return EnvWorkerError(f"{what}: {type(cause).__name__}: {cause}")

    def _label_errors(self, w: int, results: list[Any]) -> list[Any]:
        """Environment exceptions come back as values; say which actor raised them (a replay that
        diverged is an expected outcome, recorded in the rollout, and keeps its message)."""
        out = []
        for r in results:
            if isinstance(r, tuple) and len(r) == 3 and r[0] == "error" and r[1] != "ReplayMismatch":
                r = ("error", r[1], f"{r[2]} [{self.describe(w)}]")
            out.append(r)
        return out

    def _dispatch(self, batches: dict[int, list[tuple]]) -> dict[int, list[Any]]:
        ray = self.ray
        refs = {w: self.actors[w].run.remote(ops) for w, ops in batches.items()}
        sent = {w: time.monotonic() for w in refs}
        replies: dict[int, list[Any]] = {}
        restarts = 0
        while refs:
            deadlines = None if self.timeout_s is None else {w: sent[w] + self._limit(w) for w in refs}
            wait = None if deadlines is None else max(0.0, min(deadlines.values()) - time.monotonic())
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=wait)
            done = set(ready)
            for w, ref in list(refs.items()):
                if ref in done:
                    del refs[w]
                    try:
                        incarnation, results = ray.get(ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                        raise self._failure(w, batches[w], exc) from exc
                    if self.incarnations[w] is not None and self.incarnations[w] != incarnation:
                        self.counters["faults_survived"] += 1  # Ray restarted it and retried the call
                    self.incarnations[w] = incarnation
                    self.answered[w] = True
                    replies[w] = self._label_errors(w, results)
                elif deadlines is not None and time.monotonic() >= deadlines[w]:
                    self.counters["hangs"] += 1
                    limit, who = self._limit(w), self.describe(w)
                    if restarts >= self.max_restarts:
                        self._replace(w, ref, survived=False)  # a hung actor holds its CPUs: never leave one behind
                        raise EnvWorkerError(
                            f"{who} did not answer {describe_ops(batches[w])} within {limit:.0f}s "
                            f"(executor.timeout_s), with {restarts} hung actor(s) already replaced in this call "
                            f"(executor.max_restarts={self.max_restarts}): the environment itself hangs; the run can "
                            "be resumed once it is fixed")
                    restarts += 1
                    log.warning("%s did not answer %s within %.0fs: replacing it and sending its operations again",
                                self.describe(w), describe_ops(batches[w]), limit)
                    self._replace(w, ref)
                    refs[w] = self.actors[w].run.remote(batches[w])
                    sent[w] = time.monotonic()
        return replies

    def close(self) -> None:
        for w, actor in enumerate(getattr(self, "actors", [])):
            try:
                self.ray.get(actor.close.remote(), timeout=30)
            except self.ray.exceptions.RayActorError:
                pass  # already dead: nothing left to close
            except Exception as exc:  # noqa: BLE001 - closing must go on with the other actors
                log.warning("%s: closing its environments failed: %s", self.describe(w), exc)
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception as exc:  # noqa: BLE001
                log.debug("%s: kill failed: %s", self.describe(w), exc)
        self.actors = []
        self.history.clear()
        if self.owns_ray:
            self.ray.shutdown()
            self.owns_ray = False
