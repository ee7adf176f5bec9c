"""The JVM-backed environments' (TextWorld-Express, ScienceWorld) shared shutdown step."""

from __future__ import annotations

from typing import Any


def reap_java(proc: Any) -> None:
    """Wait for a py4j gateway's java process to exit (kill it after 5 s) and close its pipes, so no JVM or
    file descriptor outlives the environment instance. ``None`` (no process) is fine."""
    if proc is None:
        return
    try:
        proc.wait(timeout=5)
    except Exception:  # noqa: BLE001 - still running: a JVM that ignores the gateway shutdown
        proc.kill()
        proc.wait(timeout=5)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if stream is not None:
                stream.close()
        except Exception:  # noqa: BLE001
            pass
