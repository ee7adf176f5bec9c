"""The ``sand`` command as the end-to-end tests run it: a subprocess of this interpreter."""

from __future__ import annotations

import subprocess
import sys

SAND = [sys.executable, "-m", "sand_framework.cli.main"]


def sand(*args, check=True, timeout=600, env=None, cwd=None):
    """``sand *args`` to its end (its output captured; ``env`` and ``cwd`` as subprocess takes them); with
    ``check``, an ``AssertionError`` carrying the end of its stderr when it exits other than 0. The one way the
    tests run the real command in a process of its own."""
    proc = subprocess.run([*SAND, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"sand {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc
