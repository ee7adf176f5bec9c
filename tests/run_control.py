"""Stopping a live ``sand run`` where it is aimed: the pause plugin, waiting on what the run writes, signalling
it, and checking that nothing it started is left (the graceful-stop, sweep, pipeline, fault-injection and
bad-input tests share these)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

PAUSE_PLUGIN = Path(__file__).resolve().parent / "data" / "pause_plugin"
"""Holds the run at a chosen unit (``SAND_PAUSE_AT``) until the stop comes, so the signal lands in the stage it
aims at on a machine of any speed (a stage that outran a delay used to take it in the next one)."""


def state(run: Path) -> dict:
    try:
        return json.loads((run / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def started(stage: str):
    return lambda run: stage in state(run).get("fingerprints", {})


def held(marker: Path):
    """``ready`` for :func:`stop_when`: the pause plugin holds the run (it wrote ``marker``)."""
    return lambda run: marker.is_file() and bool(marker.read_text())


def stop_when(cmd: list[str], run: Path, ready, log: Path, signum=signal.SIGTERM, timeout: float = 300,
              env: dict[str, str] | None = None):
    """Start ``cmd`` (with ``env``), wait for ``ready(run)``, note its descendant processes and send ``signum``;
    returns (exit code, stderr, the descendants)."""
    with open(log, "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.time() + timeout
        while not ready(run):
            assert proc.poll() is None and time.time() < deadline, f"never ready:\n{log.read_text()[-3000:]}"
            time.sleep(0.02)
        children = descendants(proc.pid)
        os.kill(proc.pid, signum)
        rc = proc.wait(timeout=120)
        err.seek(0)
        return rc, err.read(), children


def descendants(pid: int) -> list[psutil.Process]:
    """The process tree below ``pid``, each with its name noted now (``.noted``: it may end before it is read)."""
    for _ in range(20):  # a process may end while the tree is walked
        try:
            found = psutil.Process(pid).children(recursive=True)
            break
        except psutil.NoSuchProcess:
            time.sleep(0.01)
    else:
        return []
    for p in found:
        try:
            p.noted = p.name()
        except psutil.NoSuchProcess:
            p.noted = "?"
    return found


def running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_no_orphans(children: list[psutil.Process]) -> None:
    deadline = time.time() + 15
    alive = children
    while alive and time.time() < deadline:
        alive = [c for c in alive if running(c)]
        time.sleep(0.1)
    assert not alive, f"left running after the stop: {[(c.pid, c.noted) for c in alive]}"


def assert_unlocked(run: Path) -> None:
    fd = os.open(run / "run.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
    finally:
        os.close(fd)
