"""Every extension point of SAND, in one place (plugin contract ``sand_framework.CONTRACT_VERSION``).

A plugin is any module (or object) with functions decorated by
``sand_framework.hookimpl`` whose names match the specs below. The built-in
components in ``plugins/sand_builtins`` are registered through exactly these
hooks, so a third-party package has the same power as the core. Each spec's
docstring says when it is called, with what, in which order and what its
result means; ``help(sand_framework.hookspecs.sand_run_end)`` shows it.

An implementation may take any subset of a spec's arguments, by name (pluggy
passes only those it asks for). Three groups:

* **Registration hooks** (``sand_register_<kind>``): called once per process,
  when components are needed, with a ``register`` callback.
* **Resolution hook** (``sand_resolve_model``): ``firstresult``, asked until an
  implementation answers.
* **Lifecycle hooks** (``sand_run_start`` ... ``sand_run_end``): observers of a
  ``sand run``, called through pluggy (so ``wrapper=True`` / ``hookwrapper=True``
  implementations wrap them), never able to steer it.

Renamed arguments keep working for at least one minor release: the lifecycle
hooks still accept the 0.1 name ``context`` (a read-only stand-in, see
:class:`~sand_framework.lifecycle.LegacyContext`) with a ``DeprecationWarning``
at load naming ``run``; it is kept in 0.3 and removed in 0.4
(:data:`CONTEXT_REMOVED_IN`).

The kinds and their hook names are declared in
:mod:`sand_framework.components.declared`; each ``sand_register_<kinds>`` spec
below is that table's ``Kind.hook`` (a test holds them equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    from sand_framework.lifecycle import LegacyContext, RunInfo
    from sand_framework.types import DeliberationRecord

hookspec = pluggy.HookspecMarker("sand")

Register = Callable[[type], None]

CONTEXT_REMOVED_IN = "0.4"
"""The contract without the deprecated lifecycle argument ``context`` (0.2.0 announced 0.3; 0.3 kept it, so that a
plugin written for 0.1 still runs). docs/hooks.md, "Versions and deprecations", says the same (a test holds them)."""

CONTEXT_RENAMED = ("the lifecycle hooks' argument `context` was renamed `run` in sand-framework 0.2 (a frozen "
                   "sand_framework.lifecycle.RunInfo: name, path, recipe, iteration, iterations, resumed, started); "
                   f"`context` is a read-only stand-in, kept in 0.3 and removed in {CONTEXT_REMOVED_IN}: rename the "
                   "argument to `run`")
"""The deprecation every lifecycle implementation that asks for ``context`` is warned with, at load."""

DEPRECATED_ARGS: dict[str, str] = {"context": "run"}
"""Lifecycle hook argument -> the name that replaced it (both are passed; ``context`` goes in
:data:`CONTEXT_REMOVED_IN`)."""


def _lifecycle() -> Any:
    return hookspec(warn_on_impl_args={"context": DeprecationWarning(CONTEXT_RENAMED)})


# --------------------------------------------------------------------------
# Registration: one hook per component kind
# --------------------------------------------------------------------------

_REGISTRATION_RULES = """

    :param register: call it once per component class the plugin provides:
        ``register(MyComponent)``. The class must subclass the kind's base class,
        have a non-empty ``name`` and a ``Params`` dataclass; a second class of the
        same kind and name, from any plugin, is ``DuplicateComponentError`` (exit 2).

    Called once per process, when components are first needed (``sand run``,
    ``validate``, ``config``, ``components``, ``sweep``, ``eval``), in load order
    (built-ins, entry points, plugin modules and folders); the order never decides
    which component runs (the recipe names it). The return value is ignored. An
    exception (or ``sys.exit()``) stops the command with exit 2, naming the plugin
    and the hook.
    """


@hookspec
def sand_register_environments(register: Register) -> None:
    """Register :class:`~sand_framework.components.Environment` classes (tasks, step, reset, branch, expert)."""


@hookspec
def sand_register_policies(register: Register) -> None:
    """Register :class:`~sand_framework.components.Policy` classes: LLM backends that sample and greedy-decode."""


@hookspec
def sand_register_detectors(register: Register) -> None:
    """Register :class:`~sand_framework.components.Detector` classes: deliberation triggers over sampled actions."""


@hookspec
def sand_register_samplers(register: Register) -> None:
    """Register :class:`~sand_framework.components.Sampler` classes: how candidate actions are proposed at a step."""


@hookspec
def sand_register_executors(register: Register) -> None:
    """Register :class:`~sand_framework.components.Executor` classes: how candidate rollouts are run."""


@hookspec
def sand_register_critics(register: Register) -> None:
    """Register :class:`~sand_framework.components.Critic` classes: how each candidate is judged."""


@hookspec
def sand_register_synthesizers(register: Register) -> None:
    """Register :class:`~sand_framework.components.Synthesizer` classes: candidate+critique pairs to one thought."""


@hookspec
def sand_register_methods(register: Register) -> None:
    """Register :class:`~sand_framework.components.Method` classes: what each iteration builds from the current
    agent (SAND's deliberations, RFT's successful explorations, ETO's and IPR's preference pairs). New in 0.2."""


@hookspec
def sand_register_trainers(register: Register) -> None:
    """Register :class:`~sand_framework.components.Trainer` classes: fine-tuning on trajectories."""


@hookspec
def sand_register_preference_trainers(register: Register) -> None:
    """Register :class:`~sand_framework.components.PreferenceTrainer` classes: fine-tuning on preference pairs.
    New in 0.2."""


@hookspec
def sand_register_evaluators(register: Register) -> None:
    """Register :class:`~sand_framework.components.Evaluator` classes: scoring a model on held-out tasks."""


for _name, _fn in list(globals().items()):
    if _name.startswith("sand_register_"):
        _fn.__doc__ = (_fn.__doc__ or "").rstrip() + _REGISTRATION_RULES

# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------


@hookspec
def sand_add_commands(cli: Any) -> None:
    """Add subcommands to ``sand``.

    :param cli: a ``click.Group``; each function decorated with ``@cli.command()`` becomes ``sand NAME``.

    Called once per ``sand`` process, only when it meets a command name it does not have or lists its commands
    (``sand --help``), for the plugins installed as packages (the ``sand`` entry-point group: ``--plugins-dir``
    folders are named per command, too late to add one). A command named like one of SAND's own is ignored with
    a warning naming the plugin; a plugin that fails to load costs only its commands (a warning), never the
    built-in ones. The command runs in the ``sand`` process with the logging SAND configured; to fail cleanly,
    raise a :class:`~sand_framework.errors.SandError` subclass or ``click.ClickException``. New in 0.3.1 (the
    counterpart of llm's ``register_commands``).
    """


# --------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------


@hookspec(firstresult=True)
def sand_resolve_model(ref: str, cache_dir: str) -> str | None:
    """Turn a model reference from a recipe into a local path or hub id.

    :param ref: the recipe's ``model.base`` (an alias, a hub id or a folder).
    :param cache_dir: ``$SAND_CACHE`` (default ``~/.cache/sand``): build anything you make under it, into a
        temporary folder renamed into place under a file lock (several processes may resolve at once).
    :returns: a loadable path or hub id, or ``None`` to let the next plugin try.

    ``firstresult``: implementations are asked last-registered first (so an entry-point or plugin-folder
    implementation is asked before the built-ins and can take over an alias) and the first non-``None`` answer
    wins; an unresolved reference is checked (a missing folder, or a hub id not cached while
    ``HF_HUB_OFFLINE=1``, is exit 4) and passed to transformers unchanged. Called lazily, the first time a run
    needs the base model, once per process. An exception stops the command with exit 2, naming the plugin. The
    built-ins resolve ``smollm2-135m`` (the offline GGUF copy) and ``tiny-random`` (a locally built test model).
    """


# --------------------------------------------------------------------------
# Lifecycle: observe, never steer
# --------------------------------------------------------------------------

_LIFECYCLE_RULES = """

    :param run: a frozen :class:`~sand_framework.lifecycle.RunInfo` taken when the hook is called.
    :param context: deprecated (0.1's name of ``run``): a read-only stand-in; asking for it warns at load.
        Kept in 0.3, removed in 0.4.

    Called during ``sand run``, in the main process, through pluggy: plain implementations last-registered
    first (third-party plugins before the built-ins), inside any ``wrapper=True`` / ``hookwrapper=True``
    implementation. Every argument but ``run`` is a copy, a fresh one for each implementation, so nothing an
    observer does changes what the engine computes or writes. The return value is ignored. An exception (or
    ``sys.exit()``) is reported as one warning naming the plugin and the hook and the run goes on; the other
    observers are still called. An implementation whose arguments this spec does not have is disabled at load
    with a warning (the plugin's other hooks load).
    """


@_lifecycle()
def sand_run_start(run: RunInfo, context: LegacyContext) -> None:
    """A run (new or resumed) is about to execute its first unfinished stage.

    The run directory exists, is locked and holds ``recipe.yaml`` and ``plugins.json``; no component is built
    yet. First of a session's lifecycle calls; called again on every ``sand run --resume``.
    """


@_lifecycle()
def sand_stage_end(run: RunInfo, stage: str, summary: dict[str, Any], context: LegacyContext) -> None:
    """A stage finished and was recorded as done in the run directory's ``state.json``.

    :param stage: ``expert``, ``train/iterK`` (``K=0``: behavior-initialization SFT), ``synth/iterK`` or ``eval``.
    :param summary: what the stage recorded: ``expert`` (``trajectories``, ``successful``), ``train/iterK``
        (``weights``, ``trajectories``, ``seconds``), ``synth/iterK`` (``method`` and the method's totals:
        ``steps``, ``deliberated``, ``rollouts`` ... for ``sand``), ``eval`` (``models``, ``splits``; the metrics
        come with :func:`sand_run_end`).

    Stages already finished when a resumed session starts are not re-emitted, except ``eval``.
    """


@_lifecycle()
def sand_unit_saved(run: RunInfo, stage: str, unit: str, context: LegacyContext) -> None:
    """A piece of a stage's work was written durably: a resume will not compute it again.

    :param stage: the stage computing it (names as in :func:`sand_stage_end`).
    :param unit: the unit's id in its unit log (``expert``: a task id, or ``expert`` for a file read whole;
        ``synth/iterK``: the input trajectory's task id; ``eval``: a task id), or ``checkpoint-N`` when a
        training stage saved its checkpoint after optimizer step ``N`` (trainers that report them: the built-in
        TRL trainers, in a single-process run).

    Called right after the write is flushed, before the stage moves on: an observer that blocks holds the run at a
    point where a kill loses nothing (the fault-injection tests use that). Units already on disk when a resumed
    session starts are not re-emitted.
    """


@_lifecycle()
def sand_step_deliberated(run: RunInfo, record: DeliberationRecord, context: LegacyContext) -> None:
    """A step was deliberated and its thought synthesized.

    :param record: the task id, step index, expert action and thought, the distinct candidates, their rollouts
        and critiques, the ``SynthesisResult`` and the detector's score.

    Called for each record of a trajectory right after its synthesis batch, before the trajectory is appended to
    ``iterK/synthesis.units.jsonl``; records of units already on disk (a resume) are not re-emitted.
    """


@_lifecycle()
def sand_iteration_end(run: RunInfo, iteration: int, summary: dict[str, Any], context: LegacyContext) -> None:
    """A SAND iteration (``synth/iterK`` and ``train/iterK``) finished.

    :param iteration: ``K``, counting from 1.
    :param summary: the ``synth/iterK`` stage summary (see :func:`sand_stage_end`).

    Called after ``train/iterK``, for each iteration this session trained.
    """


@_lifecycle()
def sand_run_end(run: RunInfo, metrics: dict[str, Any], context: LegacyContext) -> None:
    """A run finished: the last lifecycle call of a session.

    :param metrics: what was just written to ``metrics.json``: ``run``, ``recipe``, ``eval``
        (``{model: {split: evaluator.aggregate(...)}}``), ``synthesis`` (per iteration), ``weights``, ``backend``
        (the policy's ``stats``) and ``wall_seconds_this_session``.

    Components are still open (they are closed right after).
    """


LIFECYCLE_HOOKS: tuple[str, ...] = ("sand_run_start", "sand_unit_saved", "sand_stage_end",
                                    "sand_step_deliberated", "sand_iteration_end", "sand_run_end")
"""The observer hooks, in the order a run calls them first."""

for _name in LIFECYCLE_HOOKS:
    globals()[_name].__doc__ = globals()[_name].__doc__.rstrip() + _LIFECYCLE_RULES
del _name, _fn
