"""A sweep's results without its weights: what outlives the machine the sweep ran on.

Everything a sweep reports (the table, the paired tests, the cost columns, ``sand report`` of one run) is read
from each run's recipe, state, metrics and unit logs: a few MB for the CPU Table 1. The weights are tens of MB
per run and are rebuilt by rerunning. ``sand sweep FILE --export DIR`` copies every finished run without its
weights into ``DIR/<arm>/seed<k>`` and writes ``DIR``'s results, so the results can be committed beside the
experiment file; ``--table-only`` and ``--compare`` with ``-o DIR`` read them as they read the sweep's own folder.

An exported run cannot lend its weights to an arm that reuses them: the reuse is refused with a
:class:`~sand_framework.errors.RunDirError` naming the missing output (:meth:`RunDir.adopt`), never adopted
half. Runs that have not finished are not exported: they cannot be resumed without the weights they start from.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sand_framework.errors import RunDirError
from sand_framework.store import RunLayout
from sand_framework.sweep.runner import finished, run_dir_of
from sand_framework.sweep.spec import SweepSpec

LEFT_OUT = (RunLayout.WEIGHTS, RunLayout.LOCK, RunLayout.DISCARDED)
"""What an exported run leaves out: its weights (rebuilt by rerunning), its lock and a half-discarded stage."""


@dataclass
class Exported:
    runs: list[str] = field(default_factory=list)
    """``arm/seedK`` of every run copied."""
    unfinished: list[str] = field(default_factory=list)
    """``arm/seedK`` of runs not copied because they have not finished (or not started)."""
    bytes: int = 0


def export_results(spec: SweepSpec, out: Path, dest: Path) -> Exported:
    """Copy every finished run of ``spec`` under ``out`` into ``dest`` without :data:`LEFT_OUT` (a run already
    there is replaced whole, so a re-export never mixes two versions of one run)."""
    if dest.resolve() == out.resolve():
        raise RunDirError(f"--export {dest}: that is the sweep's own folder; export into another folder")
    done = Exported()
    for arm in spec.arms:
        for seed in spec.seeds_of(arm):
            src, name = run_dir_of(out, arm.name, seed), f"{arm.name}/seed{seed}"
            if not finished(src):
                done.unfinished.append(name)
                continue
            target = run_dir_of(dest, arm.name, seed)
            tmp = target.with_name(target.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp, ignore=_left_out(src))
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
            done.runs.append(name)
            done.bytes += sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    return done


def _left_out(run: Path):
    """``copytree``'s ignore: :data:`LEFT_OUT` at the top of the run directory only (a unit log named like one
    deeper down is data)."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n in LEFT_OUT] if Path(folder) == run else []

    return ignore


__all__ = ["LEFT_OUT", "Exported", "export_results"]
