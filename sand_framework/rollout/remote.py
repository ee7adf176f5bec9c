"""The driver side of a pool whose environments live in workers (processes, Ray actors).

:class:`RemotePool` keeps, per handle, the task and the actions executed so
far; every request it sends carries that history, so a worker that lost its
state (a crashed process, a restarted Ray actor) replays the episode before
stepping and the driver never notices beyond the ``faults_survived``
statistic. Subclasses only say how operations reach the workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sand_framework.components import Environment
from sand_framework.errors import ReplayMismatch
from sand_framework.rollout.pool import EnvPool, Handle, ReplayItem
from sand_framework.rollout.worker import env_blob
from sand_framework.types import StepResult


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
