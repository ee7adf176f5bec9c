"""One resumable stage's units: the one way the expert, data-building and evaluation stages keep their work.

Each of those stages does a list of units (a task's expert trajectory, a trajectory's built data, an evaluated
task) and appends each to its unit log as it finishes, so a stop loses at most the units in flight. They share
three rules, which this module holds so no stage writes them again: a damaged line is reported and its unit
redone (never dropped), a finished unit is never redone, and a stage whose units are not all there is never
finished (a resume could not tell what is missing).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from sand_framework.errors import IncompleteStageError
from sand_framework.store import UnitLog
from sand_framework.unit_saved import unit_saved


@dataclass
class StageUnits:
    """The units a stage must hold (``ids``, in order) and its log of those it holds."""

    stage: str
    log: UnitLog
    ids: list[str]
    resume_hint: str
    """What redoes the missing units (``sand run --resume RUN``), quoted when the stage is refused as unfinished."""
    _advance: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, stage: str, log: UnitLog, ids: list[str], resume_hint: str, console: Console | None = None,
             finished: bool = False) -> StageUnits:
        """The stage's units. Told on ``console``: the log's damaged lines, and units missing from a stage that
        was recorded ``finished``, each with what happens to them (they are redone)."""
        units = cls(stage, log, list(ids), resume_hint)
        todo = units.todo
        if console is not None and log.corrupt:
            console.print(f"[yellow]{log.path}: {len(log.corrupt)} damaged record(s) (lines {log.corrupt}); "
                          + (f"redoing the {len(todo)} unit(s) without an intact record" if todo else
                             "every unit still has an intact record"))
        elif console is not None and finished and todo:
            console.print(f"[yellow]{log.path}: {len(todo)} unit(s) of the finished stage have no record; "
                          "redoing them")
        return units

    @property
    def todo(self) -> list[str]:
        """The units still to do, in order: never done, or only in a damaged line."""
        return self.log.missing(self.ids)

    @property
    def done(self) -> int:
        return len(self.ids) - len(self.todo)

    def __contains__(self, unit: str) -> bool:
        return unit in self.log

    @contextmanager
    def progress(self, progress: Any, label: str) -> Iterator[None]:
        """While the block runs, each :meth:`save` advances a bar ``label`` of the rich ``progress`` (None: no bar)."""
        if progress is None:
            yield
            return
        with progress as prog:
            bar = prog.add_task(label, total=len(self.ids), completed=self.done)
            self._advance = lambda: prog.advance(bar)
            try:
                yield
            finally:
                self._advance = None

    def save(self, unit: str, data: Any) -> None:
        """Keep one finished unit for good (flushed to disk), then tell observers (``sand_unit_saved``)."""
        self.log.append(unit, data)
        unit_saved(unit)
        if self._advance is not None:
            self._advance()

    def values(self) -> list[Any]:
        """Every unit's data, in order; refused (:class:`IncompleteStageError`) while any is missing, so a stage
        is never recorded done without every unit."""
        missing = self.todo
        if missing:
            raise IncompleteStageError(f"{self.stage}: {len(missing)} unit(s) got no record ({missing[:3]}); the "
                                       f"stage is not recorded as done, `{self.resume_hint}` redoes them")
        return list(self.log.values(self.ids))
