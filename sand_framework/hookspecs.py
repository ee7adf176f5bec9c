"""Every extension point of SAND, in one place.

A plugin is any module (or object) with functions decorated by
``sand_framework.hookimpl`` whose names match the specs below. The built-in
components in ``plugins/sand_builtins`` are registered through exactly these
hooks, so a third-party package has the same power as the core.

Two groups:

* **Registration hooks** (``sand_register_<kind>``) are called once at
  start-up with a ``register`` callback; call it with each component class the
  plugin provides. A component class has a ``name`` and a ``Params`` dataclass
  (see ``sand_framework.components``). The recipe picks one component per
  slot by name, and the engine calls that one directly, so plugin order never
  changes an ablation's meaning.
* **Lifecycle hooks** observe a run (logging, dashboards, notifications). They
  receive a frozen :class:`~sand_framework.lifecycle.RunInfo` and copies of
  plain data, so they cannot change what the engine does; a failing one is
  reported and the run goes on.

The kinds and their hook names are declared in
:mod:`sand_framework.components.declared`; each ``sand_register_<kinds>`` spec
below is that table's ``Kind.hook`` (a test holds them equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    from sand_framework.lifecycle import RunInfo
    from sand_framework.types import DeliberationRecord

hookspec = pluggy.HookspecMarker("sand")

Register = Callable[[type], None]

# --------------------------------------------------------------------------
# Registration: one hook per component kind
# --------------------------------------------------------------------------


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
    agent (SAND's deliberations, RFT's successful explorations, ETO's and IPR's preference pairs)."""


@hookspec
def sand_register_trainers(register: Register) -> None:
    """Register :class:`~sand_framework.components.Trainer` classes: fine-tuning on trajectories."""


@hookspec
def sand_register_preference_trainers(register: Register) -> None:
    """Register :class:`~sand_framework.components.PreferenceTrainer` classes: fine-tuning on preference pairs."""


@hookspec
def sand_register_evaluators(register: Register) -> None:
    """Register :class:`~sand_framework.components.Evaluator` classes: scoring a model on held-out tasks."""


# --------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------


@hookspec(firstresult=True)
def sand_resolve_model(ref: str, cache_dir: str) -> str | None:
    """Turn a model reference from a recipe into a local path or hub id.

    Return ``None`` to let the next plugin try; the first non-``None`` answer
    wins. Unresolved references are passed to transformers unchanged. The
    built-ins resolve ``smollm2-135m`` (the offline GGUF copy) and
    ``tiny-random`` (a locally built test model).
    """


# --------------------------------------------------------------------------
# Lifecycle: observe, never steer
#
# Called during `sand run`, in the main process, with a frozen RunInfo and copies
# of the summaries, records and metrics (see sand_framework.lifecycle). A failing
# observer is reported as one warning naming the plugin and the hook, and the run
# goes on; the other observers are still called.
# --------------------------------------------------------------------------


@hookspec
def sand_run_start(run: RunInfo) -> None:
    """A run (new or resumed) is about to execute its first unfinished stage; no component is built yet."""


@hookspec
def sand_stage_end(run: RunInfo, stage: str, summary: dict[str, Any]) -> None:
    """A stage (``expert``, ``train/iterK``, ``synth/iterK``, ``eval``) finished and was recorded as done."""


@hookspec
def sand_step_deliberated(run: RunInfo, record: DeliberationRecord) -> None:
    """A step was deliberated and its thought synthesized (before its trajectory is recorded)."""


@hookspec
def sand_iteration_end(run: RunInfo, iteration: int, summary: dict[str, Any]) -> None:
    """A SAND iteration (synthesis + training) finished; ``summary`` is its ``synth/iterK`` summary."""


@hookspec
def sand_run_end(run: RunInfo, metrics: dict[str, Any]) -> None:
    """A run finished; ``metrics`` is what was written to ``metrics.json``."""
