"""A stop that waits for a safe point: a training stage saves a checkpoint at its next step end, then stops.

``sand run`` turns SIGTERM and SIGINT into :class:`~sand_framework.errors.RunStopped` at once
(:func:`sand_framework.app.runner.stop_on_signals`): the unit in progress is abandoned and redone on resume.
For most stages that unit is one task; for a training stage it is every step since the last checkpoint
(``save_steps`` apart: up to 49 of the CPU miniature's 80 steps, about 25 minutes, lost each time a sweep is
stopped at the end of a working day). A component that can stop cleanly between steps opens
:func:`stop_at_safe_point` around its loop: the run's first stop signal is then only noted in the
:class:`StopRequest`; the component reaches its safe point, saves, and raises ``RunStopped`` itself. A
further signal (over :data:`REPEAT_S` after the first) stops at once, as without a safe point.

This module holds only the request, so that plugins (the TRL trainers) and the runner's signal handler can
share it without importing each other.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sand_framework.errors import RunStopped

REPEAT_S = 1.0
"""A stop signal this soon after the previous one is the same stop delivered twice (``timeout`` signals its
command and then the command's process group), not a second signal."""


@dataclass
class StopRequest:
    """The stop a safe point waits for: the first signal's number, once one came."""

    signum: int | None = None
    _at: float | None = None

    def note(self, signum: int) -> bool:
        """Note a stop signal; True when it waits for the safe point (the first, or a repeat of it), False when
        it is a further stop that must act at once."""
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._at = signum, now
            return True
        return self._at is not None and now - self._at < REPEAT_S


_WAITING: StopRequest | None = None


@contextmanager
def stop_at_safe_point() -> Iterator[StopRequest]:
    """While the block runs, the run's first stop signal sets ``request.signum`` instead of raising; the block
    checks it at its safe points, saves and returns, and the stop is raised as
    :class:`~sand_framework.errors.RunStopped` when the block ends (never lost, even if the block finished its
    work meanwhile)."""
    global _WAITING
    outer, _WAITING = _WAITING, StopRequest()
    request = _WAITING
    try:
        yield request
    finally:
        _WAITING = outer
    if request.signum is not None:
        raise RunStopped(request.signum)


def stop_requested() -> bool:
    """A stop signal came and waits for the safe point of the block in progress: code that blocks inside such a
    block (an observer holding the run, a long wait) returns so that the block reaches its safe point."""
    return _WAITING is not None and _WAITING.signum is not None


def wait_for_safe_point(signum: int) -> bool:
    """For the runner's signal handler: True when a safe point takes this stop (the handler then returns
    without raising), False when it should stop the run at once."""
    return _WAITING is not None and _WAITING.note(signum)
