"""A sweep's results without its weights: what outlives the machine the sweep ran on.

Everything a sweep reports (the table, the paired tests, the cost columns, ``sand report`` of one run) is read
from each run's recipe, state, metrics and unit logs: a few MB for the CPU Table 1. The weights are tens of MB
per run and are rebuilt by rerunning. ``sand sweep FILE --export DIR`` copies every finished run without its
weights into ``DIR/<arm>/seed<k>`` and writes ``DIR``'s results, so the results can be committed beside the
experiment file; ``--table-only`` and ``--compare`` with ``-o DIR`` read them as they read the sweep's own folder.

Each exported run keeps the digest of its weights' tensors (:data:`EXPORTED_WEIGHTS`), so the paired
comparisons can still check that two runs of a seed come from the same SFT start. An exported run cannot lend
its weights to an arm that reuses them: the reuse is refused with a :class:`~sand_framework.errors.RunDirError`
naming the missing output (:meth:`RunDir.adopt`), never adopted half, until ``sand run --resume RUN
--rebuild-weights`` has trained its SFT start again.

A run stopped part way (some stages done, no live process holding it) is exported too, with its finished
stages and units: an arm longer than one machine's life (IPR's exploration and its DPO) then continues on the
next machine after ``--rebuild-weights`` (:func:`~sand_framework.app.resume_check.check_resume` keeps, and says,
what was computed from the start before it was rebuilt). The tables and tests read finished runs only.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sand_framework.app.digests import MISSING, tensors_digest
from sand_framework.errors import RunDirError
from sand_framework.store import RunDir, RunLayout
from sand_framework.store.files import atomic_write_json, read_json
from sand_framework.sweep.runner import finished, run_dir_of
from sand_framework.sweep.spec import SweepSpec

LEFT_OUT = (RunLayout.WEIGHTS, RunLayout.LOCK, RunLayout.DISCARDED)
"""What an exported run leaves out: its weights (rebuilt by rerunning), its lock and a half-discarded stage."""
EXPORTED_WEIGHTS = RunLayout.EXPORTED_WEIGHTS
"""The :func:`~sand_framework.app.fingerprint.tensors_digest` of each training stage's weights, kept in an exported
run so that the runs' SFT starts can still be told apart (:func:`weights_digests`)."""


@dataclass
class Exported:
    runs: list[str] = field(default_factory=list)
    """``arm/seedK`` of every run copied."""
    stopped: list[str] = field(default_factory=list)
    """``arm/seedK`` of runs copied although they have not finished: stopped part way, some stages done."""
    unfinished: list[str] = field(default_factory=list)
    """``arm/seedK`` of runs not copied: not started, or running in a live process (copy it once stopped)."""
    bytes: int = 0


def export_results(spec: SweepSpec, out: Path, dest: Path) -> Exported:
    """Copy every finished or stopped run of ``spec`` under ``out`` into ``dest`` without :data:`LEFT_OUT` (a run
    already there is replaced whole, so a re-export never mixes two versions of one run)."""
    if dest.resolve() == out.resolve():
        raise RunDirError(f"--export {dest}: that is the sweep's own folder; export into another folder")
    done = Exported()
    for arm in spec.arms:
        for seed in spec.seeds_of(arm):
            src, name = run_dir_of(out, arm.name, seed), f"{arm.name}/seed{seed}"
            if not finished(src):
                started = bool((read_json(src / RunLayout.STATE, {}) or {}).get(RunLayout.STATE_DONE))
                if not started or RunDir(src).held_by() is not None:
                    done.unfinished.append(name)
                    continue
                done.stopped.append(name)
            else:
                done.runs.append(name)
            target = run_dir_of(dest, arm.name, seed)
            tmp = target.with_name(target.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp, ignore=_left_out(src))
            atomic_write_json(tmp / EXPORTED_WEIGHTS, weights_digests(src))
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
            done.bytes += sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    return done


def weights_digests(run: Path) -> dict[str, str]:
    """``weights/iterK`` -> tensors digest of the weights every finished training stage of the run gave the
    stages after it: read from :data:`EXPORTED_WEIGHTS` where an export recorded it (the run's results were
    computed from those weights, even once ``sand run --rebuild-weights`` has trained the folder again), else
    computed from the weights there. ``--redo-from`` a training stage drops its record: the stages after it are
    computed again from the new weights, which count from then on."""
    exported = read_json(run / EXPORTED_WEIGHTS, {}) or {}
    rd, out = RunDir(run), {}
    for stage in (read_json(run / RunLayout.STATE, {}) or {}).get(RunLayout.STATE_DONE, {}):
        parsed = RunLayout.parse_stage(stage)
        result = rd.stage_result(stage) if parsed and parsed[0] == "train" else None
        if isinstance(result, dict) and result.get("weights"):
            folder = RunLayout.weights(parsed[1])
            digest = exported.get(folder) or tensors_digest(result["weights"])
            if digest != MISSING:
                out[folder] = digest
    return out


def _left_out(run: Path):
    """``copytree``'s ignore: :data:`LEFT_OUT` at the top of the run directory only (a unit log named like one
    deeper down is data)."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n in LEFT_OUT] if Path(folder) == run else []

    return ignore


__all__ = ["EXPORTED_WEIGHTS", "LEFT_OUT", "Exported", "export_results", "weights_digests"]
