"""Running a sweep: every (arm, seed) as its own resumable run directory, one subprocess each.

A subprocess per run keeps each run's memory (models, vLLM engines, JVMs) and
thread settings to itself, and a run that crashes costs only that run: the
sweep reports it, goes on with the runs that do not depend on it, and a later
``sand sweep`` of the same file resumes exactly where things stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from sand_framework.app.reuse import reuse_stages
from sand_framework.app.runner import create, reopen
from sand_framework.errors import SandError
from sand_framework.logs import console_level
from sand_framework.store import RunLayout
from sand_framework.store.files import atomic_write_json, read_json
from sand_framework.sweep.spec import ArmSpec, SweepSpec, arm_overrides


def run_dir_of(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def finished(run_dir: Path) -> bool:
    done = (read_json(run_dir / RunLayout.STATE, {}) or {}).get("done", {})
    return (run_dir / RunLayout.METRICS).is_file() and RunLayout.EVAL in done


@dataclass
class RunOutcome:
    arm: str
    seed: int
    run_dir: str
    status: str
    """``done`` (ran now), ``skipped`` (finished earlier), ``failed``, or ``blocked`` (the arm it reuses failed)."""
    seconds: float = 0.0
    message: str = ""


def prepare_run(spec: SweepSpec, arm: ArmSpec, seed: int, out: Path, plugin_dirs: list[str]) -> Path:
    """Create the arm's run directory (validated recipe, reused stages) unless it exists already."""
    path = run_dir_of(out, arm.name, seed)
    if (path / RunLayout.RECIPE).is_file():
        return path
    recipe, plugins, registries, rd = create(spec.recipe_path(arm), arm_overrides(arm, seed), plugin_dirs, str(path))
    if arm.reuse is not None:
        source = run_dir_of(out, arm.reuse, seed)
        source_recipe = reopen(source, plugin_dirs)[0]
        reuse_stages(rd, recipe, source, source_recipe, arm.reuse_stages, plugins, registries)
    return path


def run_sweep(spec: SweepSpec, out: Path, arms: list[str] | None = None, plugin_dirs: list[str] = (),
              console: Console | None = None, seeds: list[int] | None = None) -> list[RunOutcome]:
    """Run (or resume) every selected (arm, seed); returns what happened to each.

    Selecting seeds lets several sweeps of one file run side by side (one per seed): they never touch the
    same run directory."""
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    outcomes: list[RunOutcome] = []
    failed: set[tuple[str, int]] = set()
    all_seeds = sorted({s for arm in spec.arms for s in spec.seeds_of(arm)})
    for seed in all_seeds:
        for arm in spec.arms:
            if seed not in spec.seeds_of(arm) or (arms and arm.name not in arms) or (seeds and seed not in seeds):
                continue
            path = run_dir_of(out, arm.name, seed)
            if finished(path):
                outcomes.append(RunOutcome(arm.name, seed, str(path), "skipped"))
                continue
            if arm.reuse is not None and (arm.reuse, seed) in failed:
                failed.add((arm.name, seed))
                outcomes.append(RunOutcome(arm.name, seed, str(path), "blocked", message=f"arm {arm.reuse} failed"))
                continue
            console.rule(f"[bold]{spec.name}[/]: arm {arm.name}, seed {seed} -> {path}")
            t0 = time.time()
            try:
                prepare_run(spec, arm, seed, out, list(plugin_dirs))
                cmd = [sys.executable, "-m", "sand_framework.cli.main", "--log-level", console_level(), "run",
                       "--resume", str(path)]
                for d in plugin_dirs:
                    cmd += ["--plugins-dir", d]
                rc = subprocess.call(cmd, env=os.environ.copy())
                status, message = ("done", "") if rc == 0 else ("failed", f"`sand run` exited with {rc}")
            except SandError as exc:
                status, message = "failed", str(exc)
            seconds = round(time.time() - t0, 1)
            if status == "failed":
                failed.add((arm.name, seed))
                console.print(f"[red]arm {arm.name} seed {seed} failed[/]: {message}; its run directory is kept, "
                              f"a later `sand sweep` resumes it")
            outcomes.append(RunOutcome(arm.name, seed, str(path), status, seconds, message))
            _record_wall_time(out, arm.name, seed, seconds)
    return outcomes


WALL_FILE = "sweep_wall_seconds.json"
"""In each run directory: wall seconds spent on it, summed over every ``sand sweep`` that worked on it
(kept per run so that several ``sand sweep --seed K`` processes can share one output folder)."""


def wall_seconds(run_dir: Path) -> float | None:
    return (read_json(run_dir / WALL_FILE, {}) or {}).get("seconds")


def _record_wall_time(out: Path, arm: str, seed: int, seconds: float) -> None:
    path = run_dir_of(out, arm, seed) / WALL_FILE
    if path.parent.is_dir():
        atomic_write_json(path, {"seconds": round((wall_seconds(path.parent) or 0.0) + seconds, 1)})


def outcomes_json(outcomes: list[RunOutcome]) -> str:
    return json.dumps([o.__dict__ for o in outcomes], indent=2)
