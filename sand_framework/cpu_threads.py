"""How many CPU threads a local model should use: the cores that are actually free.

torch starts one thread per core. When another busy process shares those cores,
its threads wait on each other at every synchronisation point, and decoding was
measured 20x slower than on one thread per free core. So a policy or trainer
whose ``threads`` parameter is 0 (the default) asks :func:`cpu_threads` once at
set-up: the cores this process may run on (its CPU affinity) minus the ones other
processes keep busy, never fewer than 1. An explicit ``threads`` always wins.

"Busy" is measured, not guessed from the load average: the CPU time the allowed
cores spent over a short window (``/proc/stat``), minus this process's own. Work
of niced processes (``nice`` > 0) counts as free only where it really yields to
this process: this process is not niced and the kernel does not group processes
by session (``kernel.sched_autogroup_enabled``, on by default in desktop
distributions, makes a niced job in another terminal compete as an equal).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WINDOW_S = 0.25
"""How long the CPU counters are sampled: long enough to see a steadily busy process, short enough for set-up."""

PROC_STAT = Path("/proc/stat")
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def cpu_threads(requested: int = 0) -> int:
    """``requested`` when it is positive, else the cores free for this process (at least 1)."""
    if requested > 0:
        return requested
    allowed = sorted(os.sched_getaffinity(0))
    busy = busy_cores(allowed)
    return max(1, round(len(allowed) - busy))


def busy_cores(cpus: list[int], window: float = WINDOW_S) -> float:
    """Cores' worth of CPU time that processes other than this one used on ``cpus`` during ``window``.

    0 where ``/proc/stat`` cannot be read (not Linux): then every allowed core counts as free.
    """
    count_nice = os.getpriority(os.PRIO_PROCESS, 0) > 0 or _autogroups()
    before, own_before, t0 = _busy_ticks(cpus, count_nice), _own_seconds(), time.monotonic()
    if before is None:
        return 0.0
    time.sleep(window)
    after, own_after, t1 = _busy_ticks(cpus, count_nice), _own_seconds(), time.monotonic()
    if after is None:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    elapsed = max(t1 - t0, 1e-6)
    others = (after - before) / ticks - (own_after - own_before)
    return min(float(len(cpus)), max(0.0, others / elapsed))


def _busy_ticks(cpus: list[int], count_nice: bool) -> int | None:
    """Summed non-idle clock ticks of ``cpus`` (user, system, irq, softirq, steal; nice if ``count_nice``)."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{c}" for c in cpus}
    total = 0
    for line in lines:
        fields = line.split()
        if not fields or fields[0] not in wanted:
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
        total += user + system + irq + softirq + steal + (nice if count_nice else 0)
    return total


def _autogroups() -> bool:
    """Whether the scheduler shares CPU between sessions first (then ``nice`` orders only within one)."""
    try:
        return AUTOGROUP.read_text().strip() == "1"
    except OSError:
        return False


def _own_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system
