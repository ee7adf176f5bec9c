"""Warm environment instances, and the env-worker pools that step them in parallel.

Starting an environment can cost a JVM launch (TextWorld-Express,
ScienceWorld) or a PDDL translation (ALFWorld); resetting one is cheap. A pool
hands out ``k`` independent environments as *handles* and keeps them for reuse.

Everything the engine does to pooled environments goes through two batched
calls, so that a pool whose environments live in other processes (or on other
machines) can run them in parallel while model calls stay batched in the
driver:

* :meth:`EnvPool.replay_all` — position several environments at an action
  prefix (reset + replay, checked against recorded observations);
* :meth:`EnvPool.step_all` — one action in each of several environments (one
  lock-step depth of :func:`sand_framework.engine.episodes.run_lockstep`).

:class:`EnvPool` is the local pool: handles are the environments themselves and
both calls are a sequential loop. :class:`RemotePool` keeps, per handle, the
task and the actions executed so far; every request it sends carries that
history, so a worker that lost its state (a crashed process, a restarted Ray
actor) replays the episode before stepping and the driver never notices beyond
the ``faults_survived`` statistic. :class:`ProcessEnvPool` runs the workers as
local processes; the Ray pool lives in :mod:`sand_framework.engine.raypool`.
"""

from __future__ import annotations

import importlib
import inspect
import multiprocessing as mp
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand_framework.components import Environment
from sand_framework.errors import EnvWorkerError, ReplayMismatch
from sand_framework.types import StepResult

Handle = Any
"""What a pool hands out for one environment: the instance itself (local) or a slot number (remote)."""

ReplayItem = tuple[Handle, str, list[str], "list[str] | None"]
"""``(handle, task_id, actions, expected observations or None)``."""


@dataclass
class EnvPool:
    """Local pool: handles are :class:`Environment` instances, stepped one after another in this process."""

    prototype: Environment
    instances: list[Environment] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: {"env_steps": 0, "replays": 0, "faults_survived": 0})

    def __post_init__(self) -> None:
        if not self.instances:
            self.instances.append(self.prototype)

    def take(self, k: int) -> list[Handle]:
        while len(self.instances) < k:
            self.instances.append(self.prototype.clone())
        return self.instances[:k]

    def replay_all(self, items: list[ReplayItem]) -> list[list[StepResult] | ReplayMismatch]:
        """Position each environment at its prefix; a diverging replay is returned, not raised."""
        out: list[list[StepResult] | ReplayMismatch] = []
        for env, task_id, actions, expected in items:
            self.counters["replays"] += 1
            self.counters["env_steps"] += len(actions)
            try:
                out.append(env.replay(task_id, list(actions), expected))
            except ReplayMismatch as exc:
                out.append(exc)
        return out

    def step_all(self, pairs: list[tuple[Handle, str]]) -> list[StepResult]:
        """One action in each environment (the same handle never appears twice)."""
        self.counters["env_steps"] += len(pairs)
        return [env.step(action) for env, action in pairs]

    @property
    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    def close(self) -> None:
        """Close the clones; the prototype belongs to whoever passed it in."""
        for env in self.instances:
            if env is not self.prototype:
                env.close()
        self.instances = [self.prototype]


# --------------------------------------------------------------------------
# Worker side: environments rebuilt from a spec, positioned on demand
# --------------------------------------------------------------------------


def env_blob(env: Environment) -> dict[str, Any]:
    """What a worker needs to rebuild ``env``: its spec plus where its class lives (for non-installed plugins)."""
    cls = type(env)
    try:
        path = inspect.getfile(cls)
    except (TypeError, OSError):
        path = None
    return {"spec": env.spec(), "module": cls.__module__, "path": path}


def build_env(blob: dict[str, Any]) -> Environment:
    """Rebuild an environment in a worker: ``load_plugins().registries().build_spec(spec)``.

    A class from a plugin the worker would not load by default (a module or
    plugin directory named in the recipe) is imported by module name or path.
    """
    from sand_framework.plugins import PluginSet, _import_path, load_plugins

    spec = blob["spec"]
    regs = load_plugins().registries()
    if spec["name"] not in regs[spec["kind"]]:
        ps = PluginSet()
        ps.load_builtins()
        try:
            module = importlib.import_module(blob["module"])
        except ImportError:
            if not blob.get("path"):
                raise
            module = _import_path(Path(blob["path"]))
        ps.register(module, blob["module"], "local", "module")
        regs = ps.registries()
    return regs.build_spec(spec)  # type: ignore[return-value]


class EnvHost:
    """The environments of one worker, by slot, each positioned at ``(task_id, steps done)``.

    Operations (plain tuples, so they cross process and Ray boundaries):

    * ``("replay", slot, task_id, actions, expected)`` -> ``list[StepResult]``
    * ``("step", slot, action, task_id, history_actions, history_observations)``
      -> ``StepResult``; if the slot is not at the end of that history (a fresh
      worker after a crash), the history is replayed first and checked.

    A failed operation returns ``("error", type_name, message)``.
    """

    def __init__(self, blob: dict[str, Any]):
        self.blob = blob
        self.envs: dict[int, Environment] = {}
        self.position: dict[int, tuple[str, int] | None] = {}
        self.recovered = 0
        self.incarnation = uuid.uuid4().hex

    def env(self, slot: int) -> Environment:
        if slot not in self.envs:
            self.envs[slot] = build_env(self.blob) if not self.envs else next(iter(self.envs.values())).clone()
        return self.envs[slot]

    def run(self, ops: list[tuple]) -> list[Any]:
        out = []
        for op in ops:
            try:
                out.append(self._one(op))
            except Exception as exc:  # noqa: BLE001 - returned to the driver, which decides
                out.append(("error", type(exc).__name__, str(exc)))
        return out

    def _one(self, op: tuple) -> Any:
        if op[0] == "replay":
            _, slot, task_id, actions, expected = op
            self.position[slot] = None
            results = self.env(slot).replay(task_id, list(actions), expected)
            self.position[slot] = (task_id, len(actions))
            return results
        if op[0] == "step":
            _, slot, action, task_id, hist_actions, hist_obs = op
            if self.position.get(slot) != (task_id, len(hist_actions)):
                self.position[slot] = None
                self.env(slot).replay(task_id, list(hist_actions), list(hist_obs))
                self.recovered += 1
            self.position[slot] = None
            result = self.env(slot).step(action)
            self.position[slot] = (task_id, len(hist_actions) + 1)
            return result
        raise ValueError(f"unknown env-worker operation {op[0]!r}")

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass
        self.envs.clear()
        self.position.clear()


# --------------------------------------------------------------------------
# Driver side of a remote pool
# --------------------------------------------------------------------------


@dataclass
class _History:
    task_id: str
    actions: list[str]
    observations: list[str]


def _error(result: Any) -> Exception | None:
    if isinstance(result, tuple) and len(result) == 3 and result[0] == "error":
        _, name, message = result
        return ReplayMismatch(message) if name == "ReplayMismatch" else RuntimeError(f"env worker: {name}: {message}")
    return None


class RemotePool(EnvPool):
    """A pool whose environments live in workers; handles are slot numbers, slot ``i`` on worker ``i % workers``.

    Subclasses implement :meth:`_dispatch` (send each worker its operations,
    gather the replies in parallel, recover lost workers) and :meth:`close`.
    """

    def __init__(self, prototype: Environment, workers: int):
        self.prototype = prototype
        self.instances = []
        self.counters = {"env_steps": 0, "replays": 0, "faults_survived": 0}
        self.n_workers = max(1, int(workers))
        self.slots = 0
        self.history: dict[int, _History | None] = {}
        self.blob = env_blob(prototype)

    def take(self, k: int) -> list[Handle]:
        self.slots = max(self.slots, k)
        return list(range(k))

    def _dispatch(self, batches: dict[int, list[tuple]]) -> dict[int, list[Any]]:
        raise NotImplementedError

    def _route(self, ops: list[tuple]) -> list[Any]:
        """Group operations by worker, run the groups in parallel, return results in the original order."""
        batches: dict[int, list[tuple]] = {}
        where: list[tuple[int, int]] = []
        for op in ops:
            w = op[1] % self.n_workers
            batches.setdefault(w, []).append(op)
            where.append((w, len(batches[w]) - 1))
        replies = self._dispatch(batches) if batches else {}
        return [replies[w][i] for w, i in where]

    def replay_all(self, items: list[ReplayItem]) -> list[list[StepResult] | ReplayMismatch]:
        ops = [("replay", slot, task_id, list(actions), None if expected is None else list(expected))
               for slot, task_id, actions, expected in items]
        self.counters["replays"] += len(ops)
        self.counters["env_steps"] += sum(len(op[3]) for op in ops)
        out: list[list[StepResult] | ReplayMismatch] = []
        for (slot, task_id, actions, _), res in zip(items, self._route(ops)):
            err = _error(res)
            if err is not None:
                self.history[slot] = None
                if not isinstance(err, ReplayMismatch):
                    raise err
                out.append(err)
            else:
                self.history[slot] = _History(task_id, list(actions), [r.observation for r in res])
                out.append(res)
        return out

    def step_all(self, pairs: list[tuple[Handle, str]]) -> list[StepResult]:
        ops = []
        for slot, action in pairs:
            h = self.history.get(slot)
            if h is None:
                raise RuntimeError(f"env slot {slot} was stepped before being positioned (replay_all)")
            ops.append(("step", slot, action, h.task_id, list(h.actions), list(h.observations)))
        self.counters["env_steps"] += len(ops)
        results = self._route(ops)
        for (slot, action), res in zip(pairs, results):
            err = _error(res)
            if err is not None:
                raise err
            h = self.history[slot]
            h.actions.append(action)
            h.observations.append(res.observation)
        return results


# --------------------------------------------------------------------------
# Process pool
# --------------------------------------------------------------------------


def _worker_main(conn: Any, blob: dict[str, Any]) -> None:
    """Entry point of a pool process: serve operation batches until told to stop."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    host = EnvHost(blob)
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if msg is None:
                break
            conn.send(host.run(msg))
    finally:
        host.close()


class _Worker:
    def __init__(self, ctx: Any, blob: dict[str, Any]):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, blob), daemon=True)
        self.proc.start()
        child.close()
        self.answered = False
        """Until its first reply a worker is still starting (interpreter, plugins, a JVM): not hung."""

    def stop(self, timeout: float = 10.0) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        self.conn.close()


class ProcessEnvPool(RemotePool):
    """Environments held warm in ``workers`` local processes (``spawn``/``forkserver``), stepped in parallel.

    A worker that dies, or that has not answered after ``timeout_s`` (a hung
    environment: a JVM stuck in a step), is killed and restarted, and the
    operations it had been sent are sent again; the fresh worker replays each
    episode from the driver's history (``faults_survived`` counts restarts,
    ``hangs`` the ones caused by a timeout, ``max_restarts`` bounds them per call).
    """

    def __init__(self, prototype: Environment, workers: int = 2, start_method: str = "spawn",
                 max_restarts: int = 3, timeout_s: float | None = 300.0, startup_timeout_s: float = 180.0):
        super().__init__(prototype, workers)
        self.ctx = mp.get_context(start_method)
        self.max_restarts = max_restarts
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        """A fresh worker's first call also pays for its start-up (a JVM under load can take minutes)."""
        self.counters["hangs"] = 0
        self.workers: list[_Worker | None] = [None] * self.n_workers

    def worker(self, w: int) -> _Worker:
        if self.workers[w] is None:
            self.workers[w] = _Worker(self.ctx, self.blob)
        return self.workers[w]  # type: ignore[return-value]

    def pids(self) -> list[int | None]:
        return [w.proc.pid if w is not None else None for w in self.workers]

    def _restart(self, w: int) -> None:
        old = self.workers[w]
        if old is not None:
            try:
                old.proc.kill()
            except Exception:  # noqa: BLE001
                pass
            old.proc.join(5)
            old.conn.close()
        self.workers[w] = None
        self.counters["faults_survived"] += 1

    def _dispatch(self, batches: dict[int, list[tuple]]) -> dict[int, list[Any]]:
        replies: dict[int, list[Any]] = {}
        pending = dict(batches)
        for _attempt in range(self.max_restarts + 1):
            sent: list[int] = []
            for w, ops in pending.items():
                try:
                    self.worker(w).conn.send(ops)
                    sent.append(w)
                except (OSError, ValueError):
                    self._restart(w)
            for w in sent:
                worker = self.worker(w)
                conn = worker.conn
                try:
                    if self.timeout_s is not None:
                        limit = self.timeout_s if worker.answered else max(self.timeout_s, self.startup_timeout_s)
                        if not conn.poll(limit):
                            self.counters["hangs"] += 1
                            self._restart(w)
                            continue
                    replies[w] = conn.recv()
                    worker.answered = True
                except (EOFError, OSError):
                    self._restart(w)
            pending = {w: ops for w, ops in pending.items() if w not in replies}
            if not pending:
                return replies
        raise EnvWorkerError(f"env worker(s) {sorted(pending)} kept dying or hanging ({self.max_restarts} restarts "
                             f"within one call, timeout {self.timeout_s}s): the environment itself is failing; "
                             "the run can be resumed once it is fixed")

    def close(self) -> None:
        for w in self.workers:
            if w is not None:
                w.stop()
        self.workers = [None] * self.n_workers
        self.history.clear()
