"""What lifecycle observers receive, and how they are called: they observe a run and cannot steer it.

An observer gets a frozen :class:`RunInfo` and copies of the stage summaries,
deliberation records and metrics, never the live components, registries or
plugin manager, so nothing it does can change what the engine computes or
writes. A failing observer is reported (one warning naming the plugin and the
hook) and the run goes on: a dashboard that lost its network must not cost a
day of training. The hook is called through pluggy, so wrappers
(``wrapper=True`` / ``hookwrapper=True``) wrap it; each plain observer is
guarded at load (:func:`observer`), so one failing does not silence the others.
"""

from __future__ import annotations

import copy
import functools
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


class _Failed:
    """What a guarded observer returns instead of raising: the warning to give."""

    def __init__(self, message: str):
        self.message = message


class _View:
    """Read-only attribute access to plain data (``context.recipe.run.name``), for :class:`LegacyContext`."""

    def __init__(self, data: Any):
        object.__setattr__(self, "_data", data)

    def __getattr__(self, name: str) -> Any:
        data = object.__getattribute__(self, "_data")
        if isinstance(data, dict) and name in data:
            value = data[name]
            return _View(value) if isinstance(value, dict) else value
        raise AttributeError(name)

    def __getitem__(self, key: Any) -> Any:
        return object.__getattribute__(self, "_data")[key]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a lifecycle observer cannot change the recipe")

    def __repr__(self) -> str:
        return f"View({object.__getattribute__(self, '_data')!r})"


@dataclass(frozen=True)
class _RunDirView:
    path: Path


class LegacyContext:
    """What a 0.1 observer gets as ``context`` (deprecated; kept in 0.3, removed in 0.4): read-only, never the live run.

    0.1 passed the live ``RunContext``. The stand-in keeps what an observer used to read: every
    :class:`RunInfo` field (``context.name``, ``context.path`` ...), ``context.run_dir.path`` and
    ``context.recipe`` (the resolved recipe, read as attributes: ``context.recipe.run.name``, or as a
    dict). The live parts (``plugins``, ``registries``, ``components``) are gone: asking for them raises
    ``AttributeError`` naming the replacement."""

    def __init__(self, run: RunInfo):
        object.__setattr__(self, "_run", run)

    @property
    def recipe(self) -> _View:
        return _View(self._run.recipe)

    @property
    def run_dir(self) -> _RunDirView:
        return _RunDirView(self._run.path)

    def __getattr__(self, name: str) -> Any:
        run = object.__getattribute__(self, "_run")
        if name in RunInfo.__dataclass_fields__:
            return getattr(run, name)
        raise AttributeError(f"{name!r}: since sand-framework 0.2 lifecycle observers get `run` (a frozen RunInfo: "
                             f"{', '.join(RunInfo.__dataclass_fields__)}), not the live run context; the "
                             "components, registries and plugin manager are not reachable from an observer")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a lifecycle observer cannot change the run")

    def __deepcopy__(self, memo: dict) -> LegacyContext:
        return self


def observer(function: Callable[..., Any], plugin: str, hook: str) -> Callable[..., Any]:
    """``function`` (a plain lifecycle implementation) guarded: it gets its own copy of every argument, and a
    failure (``SystemExit`` included) becomes a returned :class:`_Failed` that :func:`notify` reports."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        args = tuple(a if isinstance(a, RunInfo) else copy.deepcopy(a) for a in args)
        kwargs = {k: v if isinstance(v, RunInfo) else copy.deepcopy(v) for k, v in kwargs.items()}
        try:
            function(*args, **kwargs)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - an observer's failure is reported, never the run's
            said = str(exc) if isinstance(exc, PluginLoadError) else (
                f"plugin {plugin!r} failed in its {hook} hook: "
                + (f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else
                   f"{type(exc).__name__}: {exc}"))
            return _Failed(f"{said} (an observer: the run goes on)")
        return None

    guarded.sand_guarded = True  # type: ignore[attr-defined]
    return guarded


def notify(hook: Any, hook_name: str, run: RunInfo, warn: Warn, /, **kwargs: Any) -> None:
    """Call lifecycle hook ``hook_name`` through pluggy with ``run`` and copies of ``kwargs``.

    ``hook`` is the plugin manager's ``pm.hook``. Plain implementations run in pluggy's order (last registered
    first), each on its own copies; a failure of one is passed to ``warn`` and the next one still runs. Wrappers
    wrap the call; one that raises is reported the same way (the observers it wraps may then not have run).
    """
    caller = getattr(hook, hook_name)
    try:
        results = caller(run=run, context=LegacyContext(run), **copy.deepcopy(kwargs))
    except Exception as exc:  # noqa: BLE001 - a wrapper's failure (plain observers never raise)
        warn(f"{_wrapper_failure(caller, exc)} failed in its {hook_name} hook wrapper: {type(exc).__name__}: {exc} "
             "(an observer: the run goes on)")
        return
    for result in results or []:
        if isinstance(result, _Failed):
            warn(result.message)


def _wrapper_failure(caller: Any, exc: BaseException) -> str:
    """``plugin 'NAME'`` for the wrapper whose code raised ``exc`` (found in its traceback), else a plugin."""
    codes = {getattr(impl.function, "__code__", None): impl.plugin_name for impl in caller.get_hookimpls()
             if impl.hookwrapper or impl.wrapper}
    tb = exc.__traceback__
    name = None
    while tb is not None:
        name = codes.get(tb.tb_frame.f_code, name)
        tb = tb.tb_next
    return f"plugin {name!r}" if name else "a plugin"
