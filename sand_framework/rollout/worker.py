"""The worker side of a remote pool: environments rebuilt from a spec, positioned on demand.

A worker (a local process or a Ray actor) holds one :class:`EnvHost`. It
receives plain tuples, so requests cross process and Ray boundaries, and it
may be a fresh worker that lost every environment: each step request carries
its episode's history, which the host replays before stepping.
"""

from __future__ import annotations

import importlib
import inspect
import uuid
from pathlib import Path
from typing import Any

from sand_framework.components import Environment


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
