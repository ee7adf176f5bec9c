"""Warm environment instances handed out as handles: the pool interface, and the local pool.

Starting an environment can cost a JVM launch (TextWorld-Express,
ScienceWorld) or a PDDL translation (ALFWorld); resetting one is cheap. A pool
hands out ``k`` independent environments as *handles* and keeps them for reuse.

Every loop that plays episodes on a pool's environments (an executor's
rollouts, a method's explorations) runs through :meth:`EnvPool.run_episodes`,
which counts its agent turns and seconds in the pool's :attr:`~EnvPool.stats`
beside its environment steps: one set of counters, whoever played.

Everything the engine does to pooled environments goes through two batched
calls, so that a pool whose environments live in other processes (or on other
machines) can run them in parallel while model calls stay batched in the
driver:

* :meth:`EnvPool.replay_all` — position several environments at an action
  prefix (reset + replay, checked against recorded observations);
* :meth:`EnvPool.step_all` — one action in each of several environments (one
  lock-step depth of :func:`sand_framework.rollout.episodes.run_lockstep`).

:class:`EnvPool` is the local pool: handles are the environments themselves and
both calls are a sequential loop. Pools whose environments live elsewhere
build on :class:`~sand_framework.rollout.remote.RemotePool` (the driver side),
:class:`~sand_framework.rollout.worker.EnvHost` (the worker side) and run as
local processes (:mod:`sand_framework.rollout.processes`) or Ray actors
(:mod:`sand_framework.rollout.raypool`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sand_framework.components import Environment
from sand_framework.errors import ReplayMismatch
from sand_framework.rollout.asynchronous import AsyncStats, run_episodes
from sand_framework.types import Role, SamplingParams, StepResult

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
    owns_prototype: bool = False
    """The prototype is this pool's own (a clone made for it, :meth:`of_clone`), closed with the pool."""

    @classmethod
    def of_clone(cls, env: Environment) -> EnvPool:
        """A pool that never steps ``env`` itself: its first environment is a clone of it, closed with the pool. Two
        callers that play at the same time (a method's two phases in flight) each need such a pool, because a pool
        hands the same environments to every caller (:meth:`take`)."""
        return cls(env.clone(), owns_prototype=True)

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

    def run_episodes(self, episodes: list[Any], policy: Any, sampling: SamplingParams, role: Role = "agent",
                     mode: str = "lockstep", max_concurrency: int = 32) -> AsyncStats:
        """Play ``episodes`` (on this pool's handles) with :func:`~sand_framework.rollout.asynchronous.run_episodes`
        and count what it did in :attr:`stats`: ``agent_turns`` (model turns, unparsable replies included) and
        ``rollout_seconds`` (wall seconds in the loop). The executors' rollouts and the methods' explorations
        (:func:`~sand_framework.rollout.explore.explore`) both play here, so an executor's ``stats`` (the sum of
        its pools') counts both, and a ``synth/iterK`` stage's batch costs do whichever the method plays."""
        ran = run_episodes(episodes, policy, sampling, role=role, pool=self, mode=mode,
                           max_concurrency=max_concurrency)
        self.counters["agent_turns"] = self.counters.get("agent_turns", 0) + ran.agent_turns
        self.counters["rollout_seconds"] = self.counters.get("rollout_seconds", 0.0) + ran.wall_seconds
        return ran

    @property
    def stats(self) -> dict[str, int]:
        return dict(self.counters)

    def close(self) -> None:
        """Close the clones; the prototype belongs to whoever passed it in (unless :attr:`owns_prototype`)."""
        for env in self.instances:
            if env is not self.prototype or self.owns_prototype:
                env.close()
        self.instances = [self.prototype]
