"""Run directories, atomic files and resumable unit logs."""

from sand_framework.store.files import UnitLog, atomic_write_json, atomic_write_text, read_json
from sand_framework.store.layout import RunLayout
from sand_framework.store.rundir import RunDir

__all__ = ["RunDir", "RunLayout", "UnitLog", "atomic_write_json", "atomic_write_text", "read_json"]
