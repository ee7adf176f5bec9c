"""Crash-safe files: atomic whole-file writes and checksummed append-only unit logs.

A run can be killed at any instant (SIGKILL, OOM, power). Whole files are
written to a temp file and renamed, so a reader sees the old or the new
version, never half of one. Per-unit results go to JSONL logs whose every line
carries a checksum of its unit id and payload, so a line torn by a crash or
damaged on disk is detected on resume, reported, and only that unit is redone.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from sand_framework.errors import RunDirError

_UMASK_LOCK = threading.Lock()
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (other threads may be creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _file_mode(path: Path) -> int:
    """The mode a rewritten file gets: the old file's, else what ``open()`` would give a new one (0666 - umask).

    ``mkstemp`` creates its file 0600 whatever the umask, which made
    atomically written files private while unit logs next to them were not.
    """
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


def not_writable(path: str | os.PathLike, exc: OSError) -> RunDirError:
    """The error for a file SAND cannot write because of permissions or a read-only file system."""
    return RunDirError(f"cannot write {path}: {exc.strerror or exc}. Make the folder writable "
                       f"(chmod -R u+w {Path(path).parent}) or copy the run to a writable place and resume the copy")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            raise not_writable(path, exc) from exc
        raise
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: str | os.PathLike, default: Any = None, fix: str = "") -> Any:
    """A JSON file's content (``default`` if it does not exist).

    A file that exists but cannot be read or parsed (empty, truncated, binary)
    raises :class:`RunDirError` naming it and ``fix`` (what to do about it).
    """
    path = Path(path)
    if not path.exists():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)[:200]
        raise RunDirError(f"{path} is unreadable ({'empty file' if _empty(path) else reason}). "
                          f"{fix or 'Restore it from a copy of the run, or delete it if SAND can rebuild it.'}"
                          ) from None


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def _digest(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def unit_digest(unit: str, payload: str) -> str:
    """The checksum of one unit-log line: the unit id *and* its payload (a damaged id must not pass)."""
    return _digest(json.dumps(unit, ensure_ascii=False) + "\n" + payload)


LOG_VERSION = 2
"""Lines carry ``"v": 2`` and :func:`unit_digest`; lines without ``v`` (written before ids were covered) are
checked against their payload only, so older runs resume without redoing their units."""


@dataclass
class UnitLog:
    """Append-only JSONL of finished units: ``{"unit": id, "sha": ..., "v": 2, "data": ...}`` per line.

    ``load()`` keeps the last valid record per unit and collects the line
    numbers of torn or corrupt lines in ``corrupt`` so the caller can report
    them; those units simply count as not done, and callers redo every unit
    they expect that is missing (:meth:`missing`), never only the ones at the end.
    """

    path: Path
    records: dict[str, Any] = field(default_factory=dict)
    corrupt: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.load()

    def load(self) -> None:
        self.records.clear()
        self.corrupt.clear()
        if not self.path.exists():
            return
        try:
            f = open(self.path, "rb")
        except OSError as exc:
            raise RunDirError(f"{self.path} cannot be read ({exc.strerror or exc}); make it readable "
                              f"(chmod u+r {self.path}) and resume") from None
        with f:
            for lineno, raw in enumerate(f, 1):
                try:
                    rec = json.loads(raw.decode("utf-8"))
                    unit = rec["unit"]
                    if not isinstance(unit, str):
                        raise ValueError("unit id is not a string")
                    payload = json.dumps(rec["data"], sort_keys=True, ensure_ascii=False)
                    version = rec.get("v")
                    expected = unit_digest(unit, payload) if version == LOG_VERSION else (
                        _digest(payload) if version is None else None)
                    if rec["sha"] != expected:
                        raise ValueError("checksum mismatch")
                    self.records[unit] = rec["data"]
                except Exception:  # noqa: BLE001 - any unreadable line is a torn unit
                    self.corrupt.append(lineno)

    def __contains__(self, unit: str) -> bool:
        return unit in self.records

    def __len__(self) -> int:
        return len(self.records)

    def get(self, unit: str) -> Any:
        return self.records[unit]

    def missing(self, order: list[str]) -> list[str]:
        """The units of ``order`` that the log lacks (never done, torn or corrupt), in order, each once."""
        seen: set[str] = set()
        out = []
        for unit in order:
            if unit not in self.records and unit not in seen:
                seen.add(unit)
                out.append(unit)
        return out

    def append(self, unit: str, data: Any) -> None:
        """Durably record a finished unit (one line, flushed and fsynced)."""
        payload = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
        line = json.dumps({"unit": unit, "sha": unit_digest(unit, payload), "v": LOG_VERSION,
                           "data": json.loads(payload)}, ensure_ascii=False)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as f:
                # A previous crash may have left a torn last line; start on a fresh line.
                if f.tell() > 0:
                    with open(self.path, "rb") as r:
                        r.seek(-1, os.SEEK_END)
                        if r.read(1) != b"\n":
                            f.write(b"\n")
                f.write(line.encode("utf-8") + b"\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            if exc.errno in _NOT_WRITABLE:
                raise not_writable(self.path, exc) from exc
            raise
        self.records[unit] = json.loads(payload)

    def values(self, order: list[str] | None = None) -> Iterator[Any]:
        """Records in ``order`` (units missing from the log are skipped) or insertion order."""
        if order is None:
            yield from self.records.values()
        else:
            for unit in order:
                if unit in self.records:
                    yield self.records[unit]
