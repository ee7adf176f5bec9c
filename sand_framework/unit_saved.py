"""Where a stage says that a piece of its work is saved for good, so that observers hear of it as it happens.

A stage's work is kept in pieces a resume never redoes: a unit of a unit log (an expert trajectory, a built
trajectory, an evaluated task), or a training checkpoint. The engine's unit loops and the trainers' checkpoint
callbacks live on different floors (a trainer is a plugin the engine must not know), so this module holds only
the current listener, which the pipeline installs for a run (:func:`listening`) and turns into the
``sand_unit_saved`` lifecycle hook; the loops and the trainers call :func:`unit_saved` and import nothing else,
as :mod:`sand_framework.stopping` does for stops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str], None]

_LISTENER: Listener | None = None


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """While the block runs, :func:`unit_saved` calls ``listener`` (the outer listener is restored after)."""
    global _LISTENER
    outer, _LISTENER = _LISTENER, listener
    try:
        yield
    finally:
        _LISTENER = outer


def unit_saved(unit: str) -> None:
    """Say that ``unit`` (a unit id, or ``checkpoint-N`` for a training step saved) was written durably: call it
    only after the write is flushed, since an observer may take it as the moment a kill loses nothing."""
    if _LISTENER is not None:
        _LISTENER(unit)
