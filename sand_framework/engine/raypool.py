"""Env-worker pool on Ray: actors holding warm environments (``pip install 'sand-framework[ray]'``).

Ray is imported only when a pool is created, so this module (and the ``ray``
executor) import without it. Each actor wraps an
:class:`~sand_framework.engine.envpool.EnvHost`; Ray restarts a lost actor
(``max_restarts``) and retries the call that was running on it
(``max_task_retries``). Every step request carries its episode's history, so
the restarted actor replays the episode before stepping; the driver sees a new
actor incarnation and counts it in ``faults_survived``.
"""

from __future__ import annotations

import os
from typing import Any

from sand_framework.components import Environment
from sand_framework.engine.envpool import EnvHost, RemotePool


def _require_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("executor 'ray' needs Ray: pip install 'sand-framework[ray]'") from exc
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


class RayEnvPool(RemotePool):
    def __init__(self, prototype: Environment, num_workers: int = 2, address: str | None = None,
                 num_cpus: float = 1.0, max_restarts: int = 3, max_task_retries: int = 3,
                 actor_options: dict[str, Any] | None = None, init_options: dict[str, Any] | None = None):
        super().__init__(prototype, num_workers)
        ray = self.ray = _require_ray()
        self.owns_ray = False
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **(init_options or {}))
            self.owns_ray = address is None
        options = {"num_cpus": num_cpus, "max_restarts": max_restarts, "max_task_retries": max_task_retries,
                   **(actor_options or {})}
        actor_cls = ray.remote(_EnvActor).options(**options)
        self.actors = [actor_cls.remote(self.blob) for _ in range(self.n_workers)]
        self.incarnations: list[str | None] = [None] * self.n_workers

    def pids(self) -> list[int]:
        return self.ray.get([a.pid.remote() for a in self.actors])

    def _dispatch(self, batches: dict[int, list[tuple]]) -> dict[int, list[Any]]:
        refs = {w: self.actors[w].run.remote(ops) for w, ops in batches.items()}
        replies: dict[int, list[Any]] = {}
        for w, (incarnation, results) in zip(refs, self.ray.get(list(refs.values()))):
            if self.incarnations[w] is not None and self.incarnations[w] != incarnation:
                self.counters["faults_survived"] += 1
            self.incarnations[w] = incarnation
            replies[w] = results
        return replies

    def close(self) -> None:
        for actor in getattr(self, "actors", []):
            try:
                self.ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a dead actor has nothing left to close
                pass
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.actors = []
        self.history.clear()
        if self.owns_ray:
            self.ray.shutdown()
            self.owns_ray = False
