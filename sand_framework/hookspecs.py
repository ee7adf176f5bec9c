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
  receive plain data and cannot change what the engine does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    from sand_framework.engine.context import RunContext
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
def sand_register_trainers(register: Register) -> None:
    """Register :class:`~sand_framework.components.Trainer` classes: fine-tuning on trajectories."""


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
# --------------------------------------------------------------------------


@hookspec
def sand_run_start(context: RunContext) -> None:
    """A run (new or resumed) is about to execute its first unfinished stage."""


@hookspec
def sand_stage_end(context: RunContext, stage: str, summary: dict[str, Any]) -> None:
    """A stage (expert loading, sft, synthesis, training, evaluation) finished."""


@hookspec
def sand_step_deliberated(context: RunContext, record: DeliberationRecord) -> None:
    """A step was deliberated and its thought synthesized."""


@hookspec
def sand_iteration_end(context: RunContext, iteration: int, summary: dict[str, Any]) -> None:
    """A SAND iteration (synthesis + training) finished."""


@hookspec
def sand_run_end(context: RunContext, metrics: dict[str, Any]) -> None:
    """A run finished; ``metrics`` is what was written to ``metrics.json``."""


KINDS: dict[str, str] = {
    "environment": "sand_register_environments",
    "policy": "sand_register_policies",
    "detector": "sand_register_detectors",
    "sampler": "sand_register_samplers",
    "executor": "sand_register_executors",
    "critic": "sand_register_critics",
    "synthesizer": "sand_register_synthesizers",
    "trainer": "sand_register_trainers",
    "evaluator": "sand_register_evaluators",
}
"""Component kind (the recipe slot name) -> its registration hook."""
