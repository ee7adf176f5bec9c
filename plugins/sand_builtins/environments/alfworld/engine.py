"""alfworld's TextWorld engine, imported on first use, and a cache for its PDDL-to-SAS translation.

A fresh TextWorld PDDL reset translates the game's PDDL to SAS in Python twice
(1.7-3 s per reset on a loaded 2-core machine), and branching resets the same
game over and over. TextWorld offers no way to pass a translator in:
``PddlState`` calls the module global ``fast_downward.pddl2sas`` of
``textworld.envs.pddl.logic``. So :func:`translations_cached` swaps that global
for a memoizing proxy *for the duration of a call* (a reset or a game load)
and puts the original back when the last such call in the process returns;
between calls TextWorld is exactly as installed.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
import types
from collections import OrderedDict
from typing import Any, Iterator

from sand_framework.errors import EnvironmentUnavailable, install_hint

INSTALL_HINT = install_hint("alfworld")


def import_engine() -> types.SimpleNamespace:
    """alfworld's wrappers and TextWorld; EnvironmentUnavailable with the install command when missing."""
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    except ImportError as exc:
        raise EnvironmentUnavailable(
            f"alfworld: the 'alfworld' package is not installed ({exc}); {INSTALL_HINT}"
        ) from exc
    return types.SimpleNamespace(textworld=textworld, AlfredDemangler=AlfredDemangler, AlfredInfos=AlfredInfos)


class TranslationCache:
    """Memoizes ``fast_downward.pddl2sas`` by (domain, problem, options): a pure, costly function.

    Stands in for the ``fast_downward`` module (everything but ``pddl2sas`` is forwarded).
    """

    def __init__(self, module: Any, size: int):
        self._module = module
        self.size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self.hits = self.misses = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def pddl2sas(self, domain: str, problem: str, *args: Any, **kwargs: Any) -> Any:
        key = (domain, problem, args, tuple(sorted(kwargs.items())))
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
        value = self._module.pddl2sas(domain, problem, *args, **kwargs)
        with self._lock:
            self.misses += 1
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value


_LOCK = threading.Lock()
_CACHE: TranslationCache | None = None
"""One process-wide cache, so every instance and clone shares the translations."""
_ACTIVE = 0
"""Calls inside :func:`translations_cached` right now (threads may overlap); the global is restored at 0."""


@contextlib.contextmanager
def translations_cached(games: int) -> Iterator[None]:
    """Within the block, TextWorld's PDDL translation goes through the cache (sized for ``games`` games; 0 = off)."""
    global _CACHE, _ACTIVE
    if games <= 0:
        yield
        return
    logic = importlib.import_module("textworld.envs.pddl.logic")
    with _LOCK:
        if _ACTIVE == 0:
            original = logic.fast_downward
            if _CACHE is None or _CACHE._module is not original:
                _CACHE = TranslationCache(original, 0)
            logic.fast_downward = _CACHE
        _CACHE.size = max(_CACHE.size, 2 * games)  # two translations per game (plain + optimized)
        _ACTIVE += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                logic.fast_downward = _CACHE._module
