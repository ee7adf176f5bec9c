"""The run directory: one folder per run holding everything needed to audit and resume it.

Layout::

    RUN/
      recipe.yaml          resolved recipe (the exact config that ran)
      plugins.json         loaded plugins with versions and hooks
      state.json           finished stages, in order
      run.lock             held (flock) by the process running it
      expert/trajectories.units.jsonl
      iter1/synthesis.units.jsonl   one unit per expert trajectory
      iter1/deliberation.sharegpt.json, iter1/deliberation.messages.jsonl
      weights/iter0/ ...   trainer output (checkpoints/, final/)
      eval/<model>/<split>.units.jsonl
      metrics.json
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand_framework.errors import RunDirError
from sand_framework.store.files import UnitLog, atomic_write_json, atomic_write_text, read_json


@dataclass
class RunDir:
    path: Path
    _lock_fd: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    # -- creation ----------------------------------------------------------

    @classmethod
    def create(cls, root: str | os.PathLike, name: str) -> "RunDir":
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(root) / f"{name}-{stamp}"
        path, i = base, 1
        while path.exists():
            path, i = Path(f"{base}-{i}"), i + 1
        path.mkdir(parents=True)
        return cls(path)

    @classmethod
    def create_at(cls, path: str | os.PathLike) -> "RunDir":
        """Use exactly ``path`` (must not already hold a run; resume those with --resume)."""
        path = Path(path)
        if (path / "recipe.yaml").exists():
            raise RunDirError(f"{path} already holds a run; continue it with `sand run --resume {path}`")
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @classmethod
    def open_existing(cls, path: str | os.PathLike) -> "RunDir":
        path = Path(path)
        if not (path / "recipe.yaml").exists():
            raise RunDirError(
                f"{path} is not a SAND run directory (no recipe.yaml). Pass the folder `sand run` printed, "
                "e.g. runs/quickstart-20260101-120000."
            )
        return cls(path)

    # -- locking -----------------------------------------------------------

    def lock(self) -> None:
        """Take the run's exclusive lock; refuse if a live process holds it.

        ``flock`` is released by the kernel when its holder dies, so a lock
        file left by a killed run never blocks a resume (a stale lock).
        """
        lock_path = self.path / "run.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Path(lock_path).read_text().strip() or "another process"
            os.close(fd)
            raise RunDirError(f"{self.path} is in use by pid {holder}; wait for it or stop it first.") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- files ---------------------------------------------------------------

    def file(self, *parts: str) -> Path:
        p = self.path.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def units(self, *parts: str) -> UnitLog:
        return UnitLog(self.file(*parts))

    def write_json(self, rel: str, data: Any) -> None:
        atomic_write_json(self.file(rel), data)

    def write_text(self, rel: str, text: str) -> None:
        atomic_write_text(self.file(rel), text)

    def read_json(self, rel: str, default: Any = None) -> Any:
        return read_json(self.path / rel, default)

    # -- stage bookkeeping ---------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return self.read_json("state.json", {"done": {}})

    def stage_done(self, stage: str) -> bool:
        return stage in self._state()["done"]

    def stage_result(self, stage: str) -> Any:
        return self._state()["done"].get(stage)

    def mark_done(self, stage: str, result: Any = None) -> None:
        state = self._state()
        state["done"][stage] = result
        self.write_json("state.json", state)

    def adopt(self, source: "RunDir", stage: str, folders: list[str]) -> None:
        """Take a finished ``stage`` from another run: copy its folders, then mark it done here.

        Paths inside the stage's result that point into ``source`` are rewritten
        to the copies, so this run never depends on the other folder again. The
        done mark is written last: a crash mid-copy leaves the stage undone and
        it is simply recomputed on resume.
        """
        if not source.stage_done(stage):
            raise RunDirError(f"cannot reuse stage {stage!r} from {source.path}: it has not finished there")
        for rel in folders:
            src = source.path / rel
            if src.exists():
                shutil.copytree(src, self.path / rel, dirs_exist_ok=True)
        result = source.stage_result(stage)
        for old in {str(source.path.resolve()), str(source.path)}:
            result = _rebase(result, old, str(self.path.resolve()))
        if isinstance(result, dict):
            result = {**result, "reused_from": str(source.path)}
        self.mark_done(stage, result)


def _rebase(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str) and (value == old or value.startswith(old + os.sep)):
        return new + value[len(old):]
    if isinstance(value, dict):
        return {k: _rebase(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebase(v, old, new) for v in value]
    return value
