"""From a recipe reference to a finished run: plugins, validation, run directory, pipeline."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from sand_framework.accelerator import impossible_plans
from sand_framework.app.fingerprint import fingerprint
from sand_framework.app.resume_check import (
    check_resume,
    older_format_note,
    rebuilt_start_note,
    redo_from as redo_stages,
    unknown_note,
    unreadable_note,
    unrecorded_files_note,
    versions_note,
)
from sand_framework.config import Recipe, load_recipe, validate
from sand_framework.config.load import merge, parse_overrides, settle_swaps
from sand_framework.config.preflight import recipe_node, require_machine
from sand_framework.engine.context import RunContext, cache_dir
from sand_framework.engine.pipeline import Pipeline
from sand_framework.errors import DiskFullError, InferenceEngineDied, RecipeError, RunDirError, RunStopped, SandError
from sand_framework.logs import run_log
from sand_framework.stopping import wait_for_safe_point
from sand_framework.plugins import PluginSet, load_plugins
from sand_framework.registry import Registries
from sand_framework.store import RunDir, RunLayout

log = logging.getLogger(__name__)


def _plugin_lists(data: dict[str, Any], extra_dirs: list[str]) -> tuple[list[str], list[str]]:
    section = data.get("plugins") or {}
    modules = list(section.get("modules") or []) if isinstance(section, dict) else []
    dirs = list(section.get("dirs") or []) if isinstance(section, dict) else []
    return modules, dirs + list(extra_dirs)


def prepare(data: dict[str, Any], plugin_dirs: list[str] = (), source: str | None = None
            ) -> tuple[Recipe, PluginSet, Registries]:
    """Load the plugins a recipe needs, then validate the recipe against their components.

    A component swapped in by the recipe or an override keeps the inherited settings its ``Params`` declare
    (:func:`~sand_framework.config.load.settle_swaps`); what was kept and dropped is in ``recipe.notes``.
    """
    modules, dirs = _plugin_lists(data, list(plugin_dirs))
    plugins = load_plugins(modules, dirs)
    registries = plugins.registries()
    data, notes = settle_swaps(data, registries)
    recipe = validate(data, registries, source)
    recipe.notes = notes + recipe.notes
    return recipe, plugins, registries


def resolve(recipe_ref: str, overrides: list[str] = (), plugin_dirs: list[str] = ()
            ) -> tuple[Recipe, PluginSet, Registries]:
    data, path = load_recipe(recipe_ref, overrides, settle=False)  # settled once the plugins are loaded
    return prepare(data, plugin_dirs, str(path))


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during: libraries wrap the error that tells what happened."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def disk_full(exc: BaseException, path: Path, min_free: int = 1 << 20) -> bool:
    """Did ``exc`` come from a full disk? Libraries wrap ENOSPC (torch.save raises a RuntimeError), so look
    through the exception chain, then at the free space left where the run writes."""
    if any(isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) for e in exception_chain(exc)):
        return True
    try:
        return shutil.disk_usage(path).free < min_free
    except OSError:
        return False


ENGINE_DEATHS = ("EngineDeadError",)
"""Exceptions an inference engine raises once its own process is gone, matched by class name: vLLM is optional
and has moved its exception classes between releases."""


def engine_died(exc: BaseException) -> bool:
    """Did ``exc`` come from an inference engine whose process died (anywhere in the exception chain)?"""
    return any(type(e).__name__ in ENGINE_DEATHS for e in exception_chain(exc))


_WORKER_FAILED = re.compile(r"Worker failed with error '(.+)', please check")
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


def engine_failure_cause(log: Path, tail: int = 400) -> str | None:
    """The error an engine process printed before it died, from the end of ``log`` (the run's ``run.log``, where
    engine processes print: :func:`sand_framework.logs.children_output_to_run_log`): the client's exception only
    says "see stack trace (above)", and that trace is in another process. None when the log has none."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()[-tail:]
    except OSError:
        return None
    for line in reversed(lines):
        if (failed := _WORKER_FAILED.search(line)) is not None:
            return failed.group(1)
        if (match := _EXCEPTION_LINE.match(line.strip())) and match.group(1).rsplit(".", 1)[-1] not in ENGINE_DEATHS:
            return f"{match.group(1)}: {match.group(2)}"
    return None


def stopped_because(exc: BaseException, path: Path, continue_with: str) -> SandError | None:
    """The user's error for a run or evaluation at ``path`` stopped by its machine rather than by SAND (a full
    disk, a dead inference engine), saying how to continue (``continue_with``); None for anything else."""
    if disk_full(exc, path):
        return DiskFullError(
            f"no space left on the disk of {path} ({type(exc).__name__}: {str(exc)[:200]}). Every unit finished "
            f"before is kept; free some space (`df -h {path}`) and continue with `{continue_with}`")
    if engine_died(exc):
        log = Path(path) / RunLayout.LOG
        cause = engine_failure_cause(log)
        said = (f"Before it died it printed: {cause[:300]} (the traceback is in {log}). If that is not the cause, "
                "the next suspect" if cause else "The usual cause")
        return InferenceEngineDied(
            f"the policy's inference engine stopped: its process died ({type(exc).__name__}). {said} is memory: the "
            "kernel's OOM killer (`dmesg | grep -i oom`); run fewer processes at once or lower "
            "policy.kv_cache_space_gb. Another: the run was paused (SIGSTOP) longer than vLLM waits for its worker "
            "(VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, 300 s). Every unit finished before is kept; continue with "
            f"`{continue_with}`")
    return None


def check_model_plan(recipe: Recipe, registries: Registries, ctx: RunContext) -> None:
    """The plan's checks of the model (a ``max_model_len`` it holds, heads a tensor-parallel size splits), as
    ``sand validate`` makes them, before the first stage; for an alias (``model.base: tiny-random``) on the folder
    it names, whose config ``sand validate`` cannot read: a plugin builds it only when a run needs it."""
    resolved = ctx.plugins.resolve_alias(recipe.model.base, cache_dir())
    if resolved is not None:
        ctx.base_model_path = resolved
    node = dataclasses.replace(recipe_node(recipe, registries, 0, None), base_model=resolved or recipe.model.base)
    problems = impossible_plans(recipe.slots, registries, node)
    if problems:
        raise RecipeError([f"{p} (model.base {recipe.model.base!r})" for p in problems])


def check_splits(recipe: Recipe, ctx: RunContext) -> None:
    """Ask the environment for the tasks of every split the run uses (``data.split`` when the expert data comes
    from it, each of ``eval.splits``) before the first stage. An environment raises ``ValueError`` there for a
    recipe it cannot serve (TextWorld-Express: ``n_train + n_seen`` over its train fold), which ``sand validate``
    cannot see without starting the simulator; before, an evaluation split failed so after the training, hours in,
    as an unexpected failure."""
    env = ctx.component("environment")
    splits = ([recipe.data.split] if recipe.data.source == "env" else []) + list(recipe.eval.splits)
    problems = []
    for split in dict.fromkeys(splits):
        try:
            env.tasks(split)
        except ValueError as exc:
            problems.append(f"environment[{env.name}]: the tasks of split {split!r}: {exc}")
    if problems:
        raise RecipeError(problems)


def create(recipe_ref: str, overrides: list[str] = (), plugin_dirs: list[str] = (), run_dir: str | None = None
           ) -> tuple[Recipe, PluginSet, Registries, RunDir]:
    """Validate a recipe and make its run directory (holding the resolved recipe), without running it."""
    recipe, plugins, registries = resolve(recipe_ref, overrides, plugin_dirs)
    require_machine(recipe, registries)
    rd = RunDir.create_at(run_dir) if run_dir else RunDir.create(recipe.run.output_dir, recipe.run.name)
    rd.write_text(RunLayout.RECIPE, yaml.safe_dump(recipe.raw, sort_keys=False))
    return recipe, plugins, registries, rd


def reopen(path: str | Path, plugin_dirs: list[str] = ()) -> tuple[Recipe, PluginSet, Registries, RunDir]:
    """An existing run directory with its stored recipe validated again (plugins as it ran with)."""
    rd = RunDir.open_existing(path)
    recipe, plugins, registries = stored_recipe(rd, plugin_dirs)
    require_machine(recipe, registries)
    return recipe, plugins, registries, rd


def stored_recipe(rd: RunDir, plugin_dirs: list[str] = ()) -> tuple[Recipe, PluginSet, Registries]:
    """A run's stored recipe validated again with the plugins it ran with, without checking that this machine has
    its components' packages (:func:`reopen` does; reading what a run will compute needs none of them)."""
    data = yaml.safe_load((rd.path / RunLayout.RECIPE).read_text())
    stored_dirs = (rd.read_json(RunLayout.PLUGINS, {}) or {}).get("plugin_dirs", [])
    return prepare(data, list(plugin_dirs) or stored_dirs, str(rd.path / RunLayout.RECIPE))


class UntilReached(Exception):
    """The run reached the first stage after ``--until STAGE`` that it would compute: it stops there, cleanly."""

    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""What a cluster scheduler, ``timeout`` and Ctrl-C send first: a run that gets one stops cleanly (exit 128 + N)."""


RAISE_AGAIN_S = 1.0
"""A stop raised where Python ignores exceptions (a finalizer: py4j's objects release their JVM side from
``__del__``) is lost; until the runner has caught one, the signal is raised again this often."""


class _Stop:
    """The stop in progress: the signal received, and whether the runner has caught its :class:`RunStopped`."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.caught = threading.Event()

    def handler(self, signum: int, frame: Any) -> None:
        if self.signum is None and wait_for_safe_point(signum):  # a training step ends, saves, then stops
            return
        if self.caught.is_set():  # a signal during the shutdown (a race with SIG_DFL being set): stop at once
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.signum is None:
            self.signum = signum
            threading.Thread(target=self._again, name="sand-stop", daemon=True).start()
        raise RunStopped(self.signum)

    def _again(self) -> None:
        while not self.caught.wait(RAISE_AGAIN_S):
            os.kill(os.getpid(), self.signum)

    def catch(self) -> None:
        """The runner has the stop: shut down; a further signal now acts at once (the default)."""
        self.caught.set()
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)


_STOP: _Stop | None = None


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs, SIGTERM and SIGINT raise :class:`RunStopped` in the main thread: the unit in progress
    is abandoned (unit logs and state files are written whole or not at all), and the ``finally`` blocks shut
    the run's workers and engines down and release its lock. A second signal during that shutdown acts at once."""
    global _STOP
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STOP = stop = _Stop()
    old = {s: signal.signal(s, stop.handler) for s in STOP_SIGNALS}
    old_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_stop_in_finalizer(old_hook)
    try:
        yield
    finally:
        stop.caught.set()
        for s, handler in old.items():
            signal.signal(s, handler)
        sys.unraisablehook = old_hook
        _STOP = None


def _quiet_stop_in_finalizer(hook: Any) -> Any:
    """A stop raised inside a finalizer (py4j's and TextWorld-Express's ``__del__``) is lost and raised again
    (:data:`RAISE_AGAIN_S`), so Python's "Exception ignored in ..." traceback for it is noise on the console of a
    run that stops cleanly: drop that one kind, pass every other unraisable exception on."""

    def quiet(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, RunStopped):
            log.debug("stop raised inside %r: raised again outside it", unraisable.object)
            return
        hook(unraisable)

    return quiet


def _caught(exc: RunStopped) -> RunStopped:
    if _STOP is not None:
        _STOP.catch()
    return exc


def stopped_message(exc: RunStopped, stage: str | None, path: Path) -> str:
    where = f"during {stage}" if stage else "before its first stage"
    return (f"stopped by {exc.signame} {where}: every finished unit is kept, the one in progress is redone; "
            f"continue with `sand run --resume {path}`")


def run(recipe_ref: str | None, overrides: list[str] = (), plugin_dirs: list[str] = (),
        resume: str | None = None, run_dir: str | None = None, redo_from: str | None = None,
        rebuild_weights: bool = False, until: str | None = None) -> tuple[dict[str, Any] | None, Path]:
    """Run a recipe in a new run directory, or continue the one at ``resume`` (discarding ``redo_from`` and the
    stages after it first, when given; with ``rebuild_weights``, only train the SFT start's weights again where
    an export left them out, keeping every result: :meth:`Pipeline.rebuild_weights`).

    ``until`` (``--until STAGE``): compute up to and including that stage of the run, then stop, as a stop
    signal would between two stages, and return no metrics (None); ``sand run --resume`` goes on from there. A
    sweep on machines that do not outlive a session uses it to compute, while a seed's SFT start is on the
    machine, only the stages that read it (``--until synth/iter1``; the training after it retrains from base).

    Before any stage, every stage the run holds is checked against its fingerprint
    (:func:`~sand_framework.app.resume_check.check_resume`): a changed recipe or data file is refused, a new
    plugin version is said."""
    if redo_from is not None and resume is None:
        raise RunDirError("--redo-from STAGE continues a run: give it with --resume RUN_DIR")
    if rebuild_weights and (resume is None or redo_from is not None or until is not None):
        raise RunDirError("--rebuild-weights trains an exported run's SFT start again: give it with --resume "
                          "RUN_DIR and without --redo-from or --until")
    if until is not None and RunLayout.parse_stage(until) is None:
        raise RecipeError([f"--until {until!r}: not a stage name (expert, train/iterK, synth/iterK, eval)"])
    if resume is not None:
        if overrides:
            raise RunDirError("overrides cannot change a run being resumed; start a new run instead")
        recipe, plugins, registries, rd = reopen(resume, plugin_dirs)
    else:
        if recipe_ref is None:
            raise RunDirError("give a recipe to run, or --resume RUN_DIR")
        recipe, plugins, registries, rd = create(recipe_ref, overrides, plugin_dirs, run_dir)
    if until is not None and until not in RunLayout.stages(recipe.run.iterations):
        raise RecipeError([f"--until {until!r}: not a stage of this run (its stages: "
                           f"{', '.join(RunLayout.stages(recipe.run.iterations))})"])
    with stop_on_signals():
        rd.lock()
        try:
            dirs = list(plugin_dirs) or (rd.read_json(RunLayout.PLUGINS, {}) or {}).get("plugin_dirs", [])
            rd.write_json(RunLayout.PLUGINS, {"plugins": [dataclasses.asdict(i) for i in plugins.info.values()],
                                      "plugin_dirs": [str(Path(d).resolve()) for d in dirs]})
            ctx = RunContext(recipe=recipe, run_dir=rd, plugins=plugins, registries=registries)
            check_model_plan(recipe, registries, ctx)
            ctx.console.print(f"[bold]run directory[/]: {rd.path}")
            for note in recipe.notes:
                ctx.console.print(f"note: {note}", markup=False, highlight=False)
            def before_stage(stage: str) -> None:
                if until is not None and RunLayout.stage_rank(stage) > RunLayout.stage_rank(until):
                    raise UntilReached(stage)
                rd.record_fingerprint(stage, fingerprint(recipe, rd, registries, plugins, stage))

            pipeline = Pipeline(ctx, before_stage=before_stage)
            try:
                with run_log(rd.path / RunLayout.LOG):
                    try:
                        if redo_from is not None:
                            stages, removed = redo_stages(recipe, rd, redo_from)
                            said = (f"--redo-from {redo_from}: discarded {', '.join(stages)} (removed "
                                    f"{', '.join(removed) or 'nothing'})")
                            log.info(said)
                            ctx.console.print(said, markup=False, highlight=False)
                        found = check_resume(recipe, rd, registries, plugins,
                                             [RunLayout.EXPERT, RunLayout.train_stage(0)] if rebuild_weights else None)
                        for stages, note in ((found.unknown, unknown_note), (found.older_format, older_format_note),
                                             (found.unreadable, unreadable_note),
                                             (found.unrecorded_files, unrecorded_files_note),
                                             (found.rebuilt_start, lambda st: rebuilt_start_note(rd, st))):
                            if stages:
                                log.info(note(stages))
                                ctx.console.print(f"note: {note(stages)}", markup=False, highlight=False)
                        if found.new_versions:
                            # once: the console's log handler shows it as "warning: ...", run.log keeps it
                            log.warning(versions_note(rd, found.new_versions))
                        if rebuild_weights:
                            rebuilt = pipeline.rebuild_weights()
                            said = (f"--rebuild-weights: trained {', '.join(rebuilt)} again; every result is kept"
                                    if rebuilt else "--rebuild-weights: the SFT start's weights are there; "
                                    "nothing to rebuild")
                            later = [s for s in pipeline.missing_weights() if s != RunLayout.train_stage(0)]
                            if later:
                                said += (f" (the weights of {', '.join(later)} stay missing: no arm reuses them; "
                                         f"`--redo-from {later[0]}` computes them again, with the stages after)")
                            log.info(said)
                            ctx.console.print(said, markup=False, highlight=False)
                            metrics = rd.read_json(RunLayout.METRICS, None) or {"eval": {}}
                        else:
                            check_splits(recipe, ctx)
                            metrics = pipeline.run()
                    except UntilReached as reached:
                        said = (f"--until {until}: stopped before {reached.stage}, as asked; `sand run --resume "
                                f"{rd.path}` goes on from there")
                        log.info(said)
                        ctx.console.print(said, markup=False, highlight=False)
                        metrics = None
                    except RunStopped as exc:
                        _caught(exc)
                        raise RunStopped(exc.signum, stopped_message(exc, pipeline.stage, rd.path)) from None
                    except Exception as exc:
                        stop = next((e for e in exception_chain(exc) if isinstance(e, RunStopped)), None)
                        if stop is None:
                            raise
                        _caught(stop)  # a library wrapped the stop in an error of its own
                        raise RunStopped(stop.signum, stopped_message(stop, pipeline.stage, rd.path)) from None
                    finally:
                        ctx.close()
            except Exception as exc:  # run.log keeps the machine's own error, the console gets what to do
                if (known := stopped_because(exc, rd.path, f"sand run --resume {rd.path}")) is not None:
                    raise known from exc
                raise
        finally:
            rd.unlock()
    return metrics, rd.path


__all__ = ["create", "merge", "parse_overrides", "prepare", "reopen", "resolve", "run", "stored_recipe"]
