"""The run context: the validated recipe, its components, the run directory and the hooks."""

from __future__ import annotations

import copy
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from sand_framework.accelerator import hand_back
from sand_framework.components import Component
from sand_framework.config import Recipe
from sand_framework.errors import ComponentError
from sand_framework.lifecycle import RunInfo, notify
from sand_framework.plugins import PluginSet
from sand_framework.registry import Registries
from sand_framework.store import RunDir

log = logging.getLogger(__name__)


def cache_dir() -> str:
    """Where converted/built models live (``$SAND_CACHE``, default ``~/.cache/sand``)."""
    return os.environ.get("SAND_CACHE", str(Path.home() / ".cache" / "sand"))


@dataclass
class RunContext:
    recipe: Recipe
    run_dir: RunDir
    plugins: PluginSet
    registries: Registries
    console: Console = field(default_factory=lambda: Console(stderr=True))
    components: dict[str, Component] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    base_model_path: str = ""
    _policy_ready: bool = False
    _hand_back_due: bool = False
    resumed: bool = field(init=False)
    """Some stage was finished before this session (read once, when the context is made)."""

    def __post_init__(self) -> None:
        self.resumed = bool(self.run_dir.finished_stages())

    @property
    def hook(self) -> Any:
        return self.plugins.pm.hook

    def info(self, iteration: int) -> RunInfo:
        """What observers may know about the run now (a frozen snapshot; see :mod:`sand_framework.lifecycle`)."""
        return RunInfo(name=self.recipe.run.name, path=self.run_dir.path, recipe=copy.deepcopy(self.recipe.raw),
                       iteration=iteration, iterations=self.recipe.run.iterations, resumed=self.resumed,
                       started=self.started)

    def notify(self, hook_name: str, at_iteration: int, /, **kwargs: Any) -> None:
        """Call a lifecycle hook's observers; a failing one is reported and the run goes on."""
        notify(self.hook, hook_name, self.info(at_iteration),
               log.warning, **kwargs)

    def component(self, kind: str) -> Any:
        """The one component selected for ``kind`` by the recipe (built on first use)."""
        if kind not in self.components:
            if kind not in self.recipe.slots:
                method = self.recipe.slots["method"][0]
                raise ComponentError(f"the run asked for the {kind!r} component, but method {method!r} does not "
                                     f"use that slot (its slots: {', '.join(self.recipe.slots)}); a component "
                                     "that needs it must be declared in the method's `uses`")
            name, params = self.recipe.slots[kind]
            self.components[kind] = self.registries.build(kind, name, params)
        return self.components[kind]

    def base_model(self) -> str:
        """The recipe's base model resolved to a loadable path (plugins may build it on first use)."""
        if not self.base_model_path:
            self.base_model_path = self.plugins.resolve_model(self.recipe.model.base, cache_dir())
        return self.base_model_path

    def policy(self) -> Any:
        """The policy component with the base model loaded (loaded once per process)."""
        policy = self.component("policy")
        if not self._policy_ready:
            if self._hand_back_due:  # a training stage ran in this process: its cached device memory goes first
                hand_back("before the policy starts")
                self._hand_back_due = False
            # what the trainer will produce decides the engines' layout (LoRA or full)
            policy.expect_agent_weights(self.trained_weights_kind())
            policy.setup(self.base_model())
            self._policy_ready = True
        return policy

    def trained_weights_kind(self) -> str | None:
        """``adapter`` or ``full``: what the recipe's trainer writes (its ``weights_kind(params)``); None = unknown."""
        slot = self.recipe.slots.get("trainer")
        if slot is None:
            return None
        try:
            trainer = self.registries["trainer"].get(slot[0])
        except KeyError:
            return None
        return trainer.weights_kind(slot[1])

    def release_policy(self) -> None:
        """Free the policy's model memory (before training); the next :meth:`policy` call sets it up again."""
        self._hand_back_due = True
        policy = self.components.get("policy")
        if os.environ.get("SAND_KEEP_POLICY_RESIDENT") == "1":  # only for benchmarks/run_memory.py's baseline
            return
        if policy is not None and self._policy_ready:
            policy.release()
            self._policy_ready = False

    def close(self) -> None:
        for comp in reversed(list(self.components.values())):
            try:
                comp.close()
            except Exception as exc:  # noqa: BLE001 - closing must not hide the run's own outcome
                log.warning("closing %s %r failed: %s", comp.kind, comp.name, exc)
        self.components.clear()
