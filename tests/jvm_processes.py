"""What the environment tests look up about the JVMs their environments start: whether a process still runs, and
which Java processes this test process started."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, i.e. exited but unreaped, counts as alive: it leaked)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def java_children() -> list[int]:
    """Java processes whose parent is this test process (other workers' JVMs are not ours)."""
    me, found = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == me and comm == "java":
            found.append(int(d))
    return found
