"""Running a sweep: every (arm, seed) as its own resumable run directory, one subprocess each.

A subprocess per run keeps each run's memory (models, vLLM engines, JVMs) and
thread settings to itself, and a run that crashes costs only that run: the
sweep reports it, goes on with the runs that do not depend on it, and a later
``sand sweep`` of the same file resumes exactly where things stopped.

A stop (SIGTERM from ``kill``, ``timeout`` or a scheduler; SIGINT from Ctrl-C) is passed on to the run in
progress, which stops cleanly as ``sand run`` does; the sweep waits for it, starts no further run and exits
128 + the signal (:class:`SweepStop`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from sand_framework.app.fingerprint import differences
from sand_framework.app.resume_check import stages_needing_absent_weights
from sand_framework.app.reuse import reuse_stages
from sand_framework.app.runner import STOP_SIGNALS, create, reopen, resolve, stored_recipe
from sand_framework.errors import RunStopped, SandError
from sand_framework.logs import console_level
from sand_framework.store import RunDir, RunLayout
from sand_framework.stopping import REPEAT_S
from sand_framework.store.files import atomic_write_json, read_json
from sand_framework.sweep.spec import ArmSpec, SweepSpec, arm_overrides


def run_dir_of(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def finished(run_dir: Path) -> bool:
    state = read_json(run_dir / RunLayout.STATE, {}) or {}
    done = state.get(RunLayout.STATE_DONE, {}) if isinstance(state, dict) else {}
    return (run_dir / RunLayout.METRICS).is_file() and isinstance(done, dict) and RunLayout.EVAL in done


def start_missing(path: Path) -> bool:
    """The run finished its SFT start (``train/iter0``) and that stage's weights folder is not there (exported)."""
    return path.is_dir() and (path / RunLayout.STATE).is_file() and \
        RunDir(path).weights_missing(RunLayout.train_stage(0))


def needs_the_start(path: Path) -> bool:
    """A stage the run has still to compute reads its SFT start (a run not created yet will adopt it by reuse,
    which needs its weights; a run with the start's weights needs nothing more); True where the run's recipe
    cannot be read here."""
    if not start_missing(path):
        return True
    try:
        recipe = stored_recipe(RunDir(path))[0]
    except (SandError, OSError, yaml.YAMLError):
        return True
    return any(RunLayout.train_stage(0) in absent for _, absent in stages_needing_absent_weights(recipe, RunDir(path)))


@dataclass
class RunOutcome:
    arm: str
    seed: int
    run_dir: str
    status: str
    """``done`` (ran now), ``skipped`` (finished earlier), ``failed``, ``blocked`` (the arm it reuses failed),
    ``busy`` (another process, such as a second ``sand sweep --seed K``, is running it or the arm it reuses; a
    later sweep runs it) or ``until`` (ran up to ``--until STAGE`` as asked; a later sweep without it finishes
    it)."""
    seconds: float = 0.0
    message: str = ""


def prepare_run(spec: SweepSpec, arm: ArmSpec, seed: int, out: Path, plugin_dirs: list[str]) -> Path:
    """Create the arm's run directory (validated recipe, reused stages) unless it exists already."""
    path = run_dir_of(out, arm.name, seed)
    if (path / RunLayout.RECIPE).is_file():
        readopt_missing_weights(path, run_dir_of(out, arm.reuse, seed) if arm.reuse is not None else None,
                                arm.reuse_stages)
        return path
    source = run_dir_of(out, arm.reuse, seed) if arm.reuse is not None else None
    source_recipe = reopen(source, plugin_dirs)[0] if source is not None else None  # before anything is created
    recipe, plugins, registries, rd = create(spec.recipe_path(arm), arm_overrides(arm, seed), plugin_dirs, str(path))
    if source is not None:
        try:
            reuse_stages(rd, recipe, source, source_recipe, arm.reuse_stages, plugins, registries)
        except BaseException:
            # nothing is computed in it yet; kept, a later sweep would resume it as a run of its own, training an
            # SFT start of its own instead of the seed's one
            shutil.rmtree(path, ignore_errors=True)
            raise
    return path


def recipe_drift(spec: SweepSpec, arm: ArmSpec, seed: int, path: Path, plugin_dirs: list[str]) -> list[str]:
    """Where the recipe the sweep file gives the arm now differs from the one its run directory holds: one line per
    setting (``key: value in the run, value in the sweep file``). The run goes on with its own recipe (a run
    directory is one experiment), so a sweep file edited after a run began describes that run wrongly unless this
    is said. Empty when they agree or the run holds no recipe yet."""
    if not (path / RunLayout.RECIPE).is_file():
        return []
    try:
        now = resolve(spec.recipe_path(arm), arm_overrides(arm, seed), plugin_dirs)[0].raw
    except SandError as exc:
        return [f"(the sweep file's recipe for it no longer validates: {exc})"]
    held = yaml.safe_load((path / RunLayout.RECIPE).read_text()) or {}
    return differences(now, held, labels=("in the run", "in the sweep file"))


def readopt_missing_weights(path: Path, source: Path | None, stages: list[str]) -> list[str]:
    """Copy again from ``source`` the reused training stages whose weights a run stopped part way lacks (it was
    exported without them), when ``source`` has them for the same fingerprint: one ``--rebuild-weights`` of the
    SFT start then serves every arm of its seed. Returns the stages copied."""
    if source is None or not (source / RunLayout.STATE).is_file():
        return []
    rd, lender = RunDir(path), RunDir(source)
    copied = []
    for stage in stages:
        if not rd.weights_missing(stage) or not lender.stage_done(stage) or lender.weights_missing(stage) \
                or lender.fingerprint(stage) != rd.fingerprint(stage):
            continue
        rd.adopt(lender, stage, RunLayout.stage_folders(stage), rd.fingerprint(stage))
        copied.append(stage)
    rd.forget_exported_weights(copied)  # the run goes on from the copied weights
    return copied


def run_sweep(spec: SweepSpec, out: Path, arms: list[str] | None = None, plugin_dirs: list[str] = (),
              console: Console | None = None, seeds: list[int] | None = None, resume: str | None = None,
              rebuild_starts: bool = False, until: str | None = None) -> list[RunOutcome]:
    """Run (or resume) every selected (arm, seed); returns what happened to each.

    ``rebuild_starts`` (``--rebuild-starts``): before an arm that needs the SFT start of the arm it reuses, and
    that arm was exported without its weights, train that start again (``sand run --resume LENDER
    --rebuild-weights``, once per seed: the arms after it find the weights there). Without it such an arm fails,
    naming the flag and the command. ``until`` (``--until STAGE``): each run that has that stage computes up to
    it and stops (``sand run --until``); a run without it (an arm of no iterations and ``synth/iter1``) runs whole.

    Selecting seeds lets several sweeps of one file run side by side (one per seed): they never touch the
    same run directory. A stop signal raises :class:`RunStopped` once the run in progress has stopped (see
    :class:`SweepStop`); its message names that run and ``resume``, the command that continues the sweep
    (default ``sand sweep SWEEP_FILE``)."""
    console = console or Console(stderr=True)
    out.mkdir(parents=True, exist_ok=True)
    with SweepStop.installed() as stop:
        return _run_all(spec, out, arms, plugin_dirs, console, seeds, stop,
                        resume or f"sand sweep {spec.path}", rebuild_starts, until)


def _sand_run(run_dir: Path, plugin_dirs: list[str], *flags: str) -> list[str]:
    """The ``sand run --resume RUN_DIR`` command line a sweep starts for a run, in a subprocess of its own."""
    cmd = [sys.executable, "-m", "sand_framework.cli.main", "--log-level", console_level(), "run", "--resume",
           str(run_dir), *flags]
    for d in plugin_dirs:
        cmd += ["--plugins-dir", d]
    return cmd


def _iterations(run_dir: Path) -> int:
    """``run.iterations`` of the run's stored (resolved) recipe."""
    return int(yaml.safe_load((run_dir / RunLayout.RECIPE).read_text())["run"]["iterations"])


def _run_all(spec: SweepSpec, out: Path, arms: list[str] | None, plugin_dirs: list[str], console: Console,
             seeds: list[int] | None, stop: SweepStop, resume: str, rebuild_starts: bool = False,
             until: str | None = None) -> list[RunOutcome]:
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
            holder = RunDir(path).held_by()  # a second sweep process runs it: leave it, do not fail on its lock
            if holder is not None:
                outcomes.append(RunOutcome(arm.name, seed, str(path), "busy",
                                           message=f"another process (pid {holder}) is running it"))
                continue
            source = run_dir_of(out, arm.reuse, seed) if arm.reuse is not None else None
            holder = RunDir(source).held_by() if source is not None and (
                not finished(source) or start_missing(source)) else None  # running, or its start rebuilt
            if holder is not None:
                outcomes.append(RunOutcome(arm.name, seed, str(path), "busy", message=(
                    f"it reuses arm {arm.reuse}, which another process (pid {holder}) is still running")))
                continue
            if source is not None and not (source / RunLayout.RECIPE).is_file() and not path.is_dir():
                failed.add((arm.name, seed))
                message = (f"it reuses arm {arm.reuse}, whose run {source} is not here: run that arm first (`--arm "
                           f"{arm.reuse} --seed {seed}`), or copy its exported run there (`cp -r "
                           f"EXPORT/{arm.reuse}/seed{seed} {source}`, EXPORT being a folder `sand sweep --export` "
                           "wrote) and add `--rebuild-starts` to train its SFT start again")
                console.print(f"[red]arm {arm.name} seed {seed} not started[/]: {message}")
                outcomes.append(RunOutcome(arm.name, seed, str(path), "failed", message=message))
                continue
            if stop.signum is not None:
                raise stop.stopped(f"before arm {arm.name} seed {seed}", resume)
            console.rule(f"[bold]{spec.name}[/]: arm {arm.name}, seed {seed} -> {path}")
            drift = recipe_drift(spec, arm, seed, path, list(plugin_dirs))
            if drift:
                console.print(f"note: arm {arm.name} seed {seed} goes on with the recipe its run directory holds, "
                              "which differs from the sweep file's at\n  " + "\n  ".join(drift) + "\nTo run it as the "
                              f"file says: edit {path / RunLayout.RECIPE} to match, then `sand run --resume {path} "
                              "--redo-from STAGE` (the first stage that reads them).", soft_wrap=True, markup=False,
                              highlight=False)
            lacks_start = source is not None and start_missing(source) and needs_the_start(path)
            if lacks_start and rebuild_starts:
                console.print(f"--rebuild-starts: training the SFT start of {source} again first", soft_wrap=True,
                              markup=False, highlight=False)  # a path to copy, never folded
                rc = stop.run(_sand_run(source, plugin_dirs, "--rebuild-weights"), env=os.environ.copy())
                if stop.signum is not None:
                    raise stop.stopped(f"while rebuilding the SFT start of arm {arm.reuse} seed {seed} "
                                       f"({stop.how(rc)}, in {source})", resume)
                lacks_start = rc != 0
            t0 = time.time()
            rc = None
            try:
                prepare_run(spec, arm, seed, out, list(plugin_dirs))
                if stop.signum is not None:  # came while the run directory was prepared: it is not started
                    _record_wall_time(out, arm.name, seed, round(time.time() - t0, 1))
                    raise stop.stopped(f"before arm {arm.name} seed {seed}", resume)
                stops = until is not None and until in RunLayout.stages(_iterations(path))
                rc = stop.run(_sand_run(path, plugin_dirs, *(["--until", until] if stops else [])),
                              env=os.environ.copy())
                status, message = ("done", "") if rc == 0 else ("failed", f"`sand run` exited with {rc}")
                if rc == 0 and stops and not finished(path):
                    status, message = "until", f"computed up to {until} (--until)"
            except SandError as exc:
                status, message = "failed", str(exc)
            if status == "failed" and lacks_start:
                message += (f" (it needs the SFT start of {source}, exported without weights: "
                            + ("`--rebuild-starts` could not train it again)" if rebuild_starts else
                               "add `--rebuild-starts`, or run `sand run --resume "
                               f"{source} --rebuild-weights` first)"))
            seconds = round(time.time() - t0, 1)
            if stop.signum is not None and rc is not None:
                _record_wall_time(out, arm.name, seed, seconds)
                raise stop.stopped(f"during arm {arm.name} seed {seed} ({stop.how(rc)}, in {path})", resume)
            if status == "failed":
                failed.add((arm.name, seed))
                console.print(f"[red]arm {arm.name} seed {seed} failed[/]: {message}; its run directory is kept, "
                              f"a later `sand sweep` resumes it")
            outcomes.append(RunOutcome(arm.name, seed, str(path), status, seconds, message))
            _record_wall_time(out, arm.name, seed, seconds)
    return outcomes


POLL_S = 0.1
"""How often the sweep checks, while a run goes on, for a signal to pass on to it."""


class SweepStop:
    """SIGTERM and SIGINT while ``sand sweep`` runs: passed on to the ``sand run`` in progress, nothing more started.

    Each run is started in a process group of its own, so a signal sent to the sweep's group (Ctrl-C in a
    terminal, ``timeout``) reaches the run once, passed on by the sweep, never twice. The handler only notes
    the signal; the sweep's main loop passes it on (every :data:`POLL_S` while a run goes on), so a signal
    that comes while a run is being started still reaches it. The run stops cleanly (its finished units
    kept, its workers shut down, its lock released: ``sand run``'s own stop) and the sweep then raises
    :class:`RunStopped`. A further signal (over :data:`REPEAT_S` later) is passed on again, which ends a run
    already stopping at once; one more kills it (SIGKILL)."""

    def __init__(self) -> None:
        self.received: list[tuple[int, float]] = []
        self._taken = 0
        self._last: float | None = None

    @classmethod
    @contextmanager
    def installed(cls) -> Iterator[SweepStop]:
        stop = cls()
        if threading.current_thread() is not threading.main_thread():
            yield stop
            return
        old = {s: signal.signal(s, stop._note) for s in STOP_SIGNALS}
        try:
            yield stop
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def _note(self, signum: int, frame: Any) -> None:
        self.received.append((signum, time.monotonic()))

    @property
    def signum(self) -> int | None:
        """The first stop signal received, if any."""
        return self.received[0][0] if self.received else None

    def _new(self) -> list[int]:
        """The stops received since the last call, a repeat within :data:`REPEAT_S` of the previous one left out."""
        batch = self.received[self._taken:]
        self._taken += len(batch)
        out = []
        for signum, at in batch:
            if self._last is None or at - self._last >= REPEAT_S:
                out.append(signum)
                self._last = at
        return out

    def run(self, cmd: list[str], env: dict[str, str]) -> int:
        """Run ``cmd`` to its end, passing on the stops that come meanwhile; its exit code."""
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, process_group=0)
        passed = 0
        while True:
            for signum in self._new():
                passed += 1
                if proc.poll() is None:
                    with suppress(ProcessLookupError):
                        proc.send_signal(signum if passed <= 2 else signal.SIGKILL)
            try:
                return proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                continue

    def how(self, rc: int) -> str:
        if rc == 0:
            return "its run had just finished"
        if rc == 128 + (self.signum or 0):
            return "its run stopped cleanly and resumes from its last finished unit"
        if rc < 0:
            return f"its run was killed by {signal.Signals(-rc).name}; it resumes from its last finished unit"
        return f"its run ended with exit code {rc}"

    def stopped(self, where: str, resume: str) -> RunStopped:
        name = signal.Signals(self.signum).name
        return RunStopped(self.signum, f"sand sweep stopped by {name} {where}; no further run was started; "
                                       f"continue with `{resume}`")


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
