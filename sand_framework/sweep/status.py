"""Where a long sweep stands: every run finished, running, stopped part way or not started, and how far it got.

A sweep of tens of hours runs across days and machines; before resuming it (or deciding what to cut) one wants
the state of every (arm, seed) at a glance, without opening state files. ``sand sweep FILE --status`` reads it
from each run directory alone: the stages done, the stage in progress (started: its fingerprint is recorded,
but not done) with its finished units or newest training checkpoint, whether a live process holds the run's
lock, and the wall seconds sweeps have spent on it. It writes nothing and starts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sand_framework.report.tables import markdown_table
from sand_framework.store import RunDir, RunLayout, UnitLog
from sand_framework.store.files import read_json
from sand_framework.sweep.runner import finished, needs_the_start, run_dir_of, start_missing, wall_seconds
from sand_framework.sweep.spec import SweepSpec

@dataclass
class RunStatus:
    arm: str
    seed: int
    state: str
    """``finished``, ``running (pid N)``, ``stopped`` (started, not finished, no live process) or ``not started``."""
    done: list[str]
    """The stages finished, in order."""
    current: str | None
    """The stage started and not finished, if any."""
    progress: str
    """How far ``current`` got: its finished units, or its newest checkpoint."""
    wall_seconds: float | None


def sweep_status(spec: SweepSpec, out: Path) -> list[RunStatus]:
    """The status of every (arm, seed) of ``spec`` under ``out``, in the order the sweep runs them."""
    rows = []
    lenders = {arm.reuse for arm in spec.arms if arm.reuse is not None}
    for seed in sorted({s for arm in spec.arms for s in spec.seeds_of(arm)}):
        for arm in spec.arms:
            if seed in spec.seeds_of(arm):
                row = run_status(arm.name, seed, run_dir_of(out, arm.name, seed))
                waiting = [a.name for a in spec.arms if a.reuse == arm.name and seed in spec.seeds_of(a)
                           and not finished(run_dir_of(out, a.name, seed))
                           and needs_the_start(run_dir_of(out, a.name, seed))]
                if arm.name in lenders and waiting and start_missing(run_dir_of(out, arm.name, seed)):
                    row.progress = (f"its SFT start's weights are not here (exported); before {', '.join(waiting)} "
                                    f"can reuse it: `sand run --resume {run_dir_of(out, arm.name, seed)} "
                                    "--rebuild-weights`")
                elif row.state == "stopped" and start_missing(run_dir_of(out, arm.name, seed)) \
                        and needs_the_start(run_dir_of(out, arm.name, seed)):
                    lender = run_dir_of(out, arm.reuse, seed) if arm.reuse is not None else None
                    row.progress += ("; " if row.progress else "") + (
                        f"its SFT start's weights are not here: the sweep copies them from {lender} once that has "
                        "them" if lender is not None else "its SFT start's weights are not here: "
                        "`--rebuild-weights` first")
                rows.append(row)
    return rows


def run_status(arm: str, seed: int, path: Path) -> RunStatus:
    state = (read_json(path / RunLayout.STATE, {}) or {}) if path.is_dir() else {}
    state = state if isinstance(state, dict) else {}
    done = _stages(state.get(RunLayout.STATE_DONE))
    started = [s for s in _stages(state.get(RunLayout.STATE_FINGERPRINTS)) if s not in done]
    current = min(started, key=RunLayout.stage_rank) if started else None
    holder = RunDir(path).held_by() if path.is_dir() else None
    if finished(path):
        what = "finished"
    elif holder is not None:
        what = f"running (pid {holder})"
    elif done or current:
        what = "stopped"
    else:
        what = "not started"
    return RunStatus(arm, seed, what, done, current, stage_progress(path, current) if current else "",
                     wall_seconds(path) if path.is_dir() else None)


def _stages(recorded: object) -> list[str]:
    """The stage names among a state.json entry's keys: a hand-edited file may hold others (or no mapping), which
    the status shows nothing of instead of failing on them; the run itself refuses such a file when resumed."""
    return [s for s in recorded if isinstance(s, str) and RunLayout.parse_stage(s) is not None] \
        if isinstance(recorded, dict) else []


def stage_progress(path: Path, stage: str) -> str:
    """Finished units of ``stage``'s unit logs, or the newest checkpoint of a training stage."""
    kind, k = RunLayout.parse_stage(stage) or ("", 0)
    if kind == "train":
        checkpoints = path / RunLayout.weights(k) / RunLayout.CHECKPOINTS
        names = sorted((p.name for p in checkpoints.glob("checkpoint-*") if p.is_dir()),
                       key=lambda n: int(n.rsplit("-", 1)[-1]) if n.rsplit("-", 1)[-1].isdigit() else -1)
        return f"newest checkpoint: {names[-1]}" if names else "no checkpoint yet"
    logs = sorted(log for folder in RunLayout.stage_folders(stage)
                  for log in (path / folder).rglob(f"*{RunLayout.UNITS}"))
    counts = [(log.relative_to(path).as_posix(), len(UnitLog(log))) for log in logs]
    return "; ".join(f"{n} units in {rel}" for rel, n in counts) or "no unit finished yet"


def status_markdown(rows: list[RunStatus]) -> str:
    table = markdown_table(
        ["run", "state", "stages done", "in progress", "progress", "wall s"],
        [[f"{r.arm}/seed{r.seed}", r.state, ", ".join(r.done) or "–", r.current or "–", r.progress or "–",
          f"{r.wall_seconds:.0f}" if r.wall_seconds is not None else "–"] for r in rows], "llllll")
    counts: dict[str, int] = {}
    for r in rows:
        key = r.state.split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    return table + "\n\n" + f"{len(rows)} runs: " + ", ".join(f"{n} {k}" for k, n in counts.items())


__all__ = ["RunStatus", "run_status", "status_markdown", "sweep_status"]
