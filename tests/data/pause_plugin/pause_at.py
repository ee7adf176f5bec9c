"""A test observer that holds a live run at a chosen point, so that a test's signal lands there on any machine.

Tests that kill or stop a running ``sand run`` used to aim by time (a delay after a stage began), and a fast
machine finished the short stages before the signal came. Loaded with ``--plugins-dir`` (a run keeps its plugin
folders on ``--resume``), this plugin reads two environment variables:

* ``SAND_PAUSE_AT``: ``start`` (at ``sand_run_start``: nothing computed yet) or ``STAGE`` or ``STAGE#N`` (at the
  N-th ``sand_unit_saved`` of that stage in this session, 1 when not given). Unset: the plugin does nothing.
* ``SAND_PAUSE_FILE``: written with ``STAGE UNIT`` when the run is held; the test waits for it, then signals.

Held means sleeping in the hook: the unit is already on disk, so a SIGKILL loses nothing a resume would not redo,
and a SIGTERM interrupts the sleep as it would interrupt the stage. Inside a training stage a SIGTERM waits for the
step's end (a safe point): the hold then lets go, so the trainer saves and stops as it would unheld.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sand_framework import hookimpl

_seen: dict[str, int] = {}


def _hold(where: str) -> None:
    from sand_framework.stopping import stop_requested

    Path(os.environ["SAND_PAUSE_FILE"]).write_text(where, encoding="utf-8")
    while not stop_requested():
        time.sleep(0.05)


@hookimpl
def sand_run_start(run):
    if os.environ.get("SAND_PAUSE_AT") == "start":
        _hold("start -")


@hookimpl
def sand_unit_saved(run, stage, unit):
    target = os.environ.get("SAND_PAUSE_AT", "")
    want, _, nth = target.partition("#")
    if stage != want:
        return
    _seen[stage] = _seen.get(stage, 0) + 1
    if _seen[stage] == int(nth or 1):
        _hold(f"{stage} {unit}")
