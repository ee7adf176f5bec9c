"""Crash-safe files: atomic whole-file writes and checksummed append-only unit logs.

A run can be killed at any instant (SIGKILL, OOM, power). Whole files are
written to a temp file and renamed, so a reader sees the old or the new
version, never half of one. Per-unit results go to JSONL logs whose every line
carries a checksum of its payload, so a line torn by a crash is detected on
resume, reported, and only that unit is redone.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    path = Path(path)
    if not path.exists():
        return default
    return json.loads(path.read_text(encoding="utf-8"))


def _digest(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


@dataclass
class UnitLog:
    """Append-only JSONL of finished units: ``{"unit": id, "sha": ..., "data": ...}`` per line.

    ``load()`` keeps the last valid record per unit and collects the line
    numbers of torn or corrupt lines in ``corrupt`` so the caller can report
    them; those units simply count as not done.
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
        with open(self.path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    rec = json.loads(raw.decode("utf-8"))
                    payload = json.dumps(rec["data"], sort_keys=True, ensure_ascii=False)
                    if rec["sha"] != _digest(payload):
                        raise ValueError("checksum mismatch")
                    self.records[str(rec["unit"])] = rec["data"]
                except Exception:  # noqa: BLE001 - any unreadable line is a torn unit
                    self.corrupt.append(lineno)

    def __contains__(self, unit: str) -> bool:
        return unit in self.records

    def __len__(self) -> int:
        return len(self.records)

    def get(self, unit: str) -> Any:
        return self.records[unit]

    def append(self, unit: str, data: Any) -> None:
        """Durably record a finished unit (one line, flushed and fsynced)."""
        payload = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
        line = json.dumps({"unit": unit, "sha": _digest(payload), "data": json.loads(payload)}, ensure_ascii=False)
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
        self.records[unit] = json.loads(payload)

    def values(self, order: list[str] | None = None) -> Iterator[Any]:
        """Records in ``order`` (units missing from the log are skipped) or insertion order."""
        if order is None:
            yield from self.records.values()
        else:
            for unit in order:
                if unit in self.records:
                    yield self.records[unit]
