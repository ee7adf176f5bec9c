"""What lifecycle observers receive, and how they are called: they observe a run and cannot steer it.

An observer gets a frozen :class:`RunInfo` and copies of the stage summaries,
deliberation records and metrics, never the live components, registries or
plugin manager, so nothing it does can change what the engine computes or
writes. A failing observer is reported (one warning naming the plugin and the
hook) and the run goes on: a dashboard that lost its network must not cost a
day of training. Every observer is called on its own, so one failing does not
silence the others.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sand_framework.errors import PluginLoadError


@dataclass(frozen=True)
class RunInfo:
    """The run a lifecycle hook observes (a snapshot taken when the hook is called)."""

    name: str
    """``run.name`` of the recipe (the run folder is ``run.output_dir/NAME-STAMP``)."""
    path: Path
    """The run directory (see docs/concepts.md for what is inside)."""
    recipe: dict[str, Any]
    """The resolved recipe as plain data, as stored in the run's ``recipe.yaml`` (a copy: changing it changes
    nothing)."""
    iteration: int
    """The SAND iteration the run is in: 0 for the expert stage and behavior-initialization SFT, K during
    ``synth/iterK`` and ``train/iterK``, the last iteration during evaluation."""
    iterations: int
    """How many SAND iterations the recipe runs (``run.iterations``)."""
    resumed: bool
    """Some stage was already finished when this session started (``sand run --resume``, or adopted stages)."""
    started: float
    """When this session started (seconds since the epoch)."""


Warn = Callable[[str], None]


def notify(hook: Any, hook_name: str, run: RunInfo, warn: Warn, /, **kwargs: Any) -> None:
    """Call every implementation of lifecycle hook ``hook_name`` with ``run`` and copies of ``kwargs``.

    ``hook`` is the plugin manager's ``pm.hook``. Implementations run in pluggy's
    order (last registered first); an exception from one is passed to ``warn``
    and the next one still runs.
    """
    caller = getattr(hook, hook_name)
    for impl in reversed(caller.get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue  # wrappers cannot observe a call made per implementation (see docs/hooks.md)
        args = {"run": run, **copy.deepcopy(kwargs)}
        try:
            impl.function(**{name: args[name] for name in impl.argnames})
        except Exception as exc:  # noqa: BLE001 - an observer's failure is reported, never the run's
            said = str(exc) if isinstance(exc, PluginLoadError) else (
                f"plugin {impl.plugin_name!r} failed in its {hook_name} hook: {type(exc).__name__}: {exc}")
            warn(f"{said} (an observer: the run goes on)")
