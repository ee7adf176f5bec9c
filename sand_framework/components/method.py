"""What an iteration builds from the current agent: SAND's deliberations, or a baseline's data.

SAND's claim is comparative (the paper's Table 1 sets it beside RFT-, ETO- and
IPR-style methods), so the step "turn the current agent and the expert data
into this iteration's training data" is a component kind of its own. The
engine never names a method: it cuts the iteration's input trajectories into
units (one per trajectory), asks the recipe's method to :meth:`Method.build`
each batch of them, stores every unit durably, and hands the finished units
back to :meth:`Method.assemble`, which says what to train on and what the
next iteration starts from. The kind of data a method produces
(:attr:`Method.produces`) picks the trainer slot that consumes it
(:data:`TRAINER_SLOT`), so a preference method trains with the
``preference_trainer`` slot while the behavior-initialization SFT, shared by
every arm of a comparison, stays with ``trainer``.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from sand_framework.components.base import Component, P
from sand_framework.components.environment import Environment
from sand_framework.components.policy import Policy
from sand_framework.types import DeliberationRecord, PreferencePair, Trajectory

DataKind = Literal["sft", "preference"]
"""What a method's iteration trains on: SFT trajectories, or preference pairs."""

TRAINER_SLOT: dict[str, str] = {"sft": "trainer", "preference": "preference_trainer"}
"""The recipe slot whose trainer consumes each kind of data (declared once; validation and the engine read it)."""

REFERENCES = ("init", "sft", "base")
"""What a preference trainer's reference model may be: the weights training starts from (ETO: the current
agent), the behavior-initialization SFT weights (IPR), or the base model."""


@dataclass
class MethodTools:
    """What a method may use while it builds one batch of units.

    ``component(slot)`` gives the recipe-selected component of any slot
    (``executor``, ``sampler``, ``critic`` ...), built once per run;
    ``policy`` already serves the current agent (``role="agent"``) and the
    frozen base model (``role="base"``). A method that samples from other
    weights (IPR's Monte Carlo rollouts from the SFT model) calls
    ``policy.set_agent_weights(weights["sft"])`` and restores
    ``weights["agent"]`` before it returns.
    """

    env: Environment
    policy: Policy
    component: Callable[[str], Any]
    iteration: int
    """The iteration being built (1 = the first after behavior initialization)."""
    weights: dict[str, str | None]
    """``agent`` (the current agent: the previous iteration's weights), ``sft`` (behavior initialization) and
    ``base`` (None: the base model itself)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """State the method keeps across the batches of one iteration in this process (a rollout cache); lost on
    resume, so nothing in it may change a unit's result."""


@dataclass
class IterationData:
    """What :meth:`Method.assemble` makes of an iteration's finished units."""

    next_expert: list[Trajectory]
    """The next iteration's input trajectories (SAND: the deliberation trajectories; RFT/ETO/IPR: the expert
    data, unchanged)."""
    trajectories: list[Trajectory] = field(default_factory=list)
    """SFT data for this iteration's training (``produces == "sft"``)."""
    pairs: list[PreferencePair] = field(default_factory=list)
    """Preference pairs for this iteration's training (``produces == "preference"``)."""
    reference: str = "init"
    """The preference trainer's reference model, one of :data:`REFERENCES`."""


class Method(Component[P], abc.ABC):
    """Builds one iteration's training data from the current agent (SAND's steps 2-4, or a baseline's).

    Required: :meth:`build`, :meth:`assemble`. Provided: :meth:`inputs`, :meth:`summarize`.

    A unit is one input trajectory (an expert trajectory, or the trajectory of
    one training task): :meth:`build` returns one JSON-serializable ``dict``
    per trajectory, which the engine stores as soon as the batch returns and
    never recomputes on ``--resume``. With the same seed, inputs and weights
    the units must be the same, so kill -9 at any point resumes to identical
    units. A unit's ``"stats"`` mapping (numbers) is summed over the stage by
    :meth:`summarize`; the engine adds the batch's cost (wall seconds,
    backend tokens, environment steps) to the first unit of each batch.
    """

    kind: ClassVar[str] = "method"
    produces: ClassVar[DataKind] = "sft"
    """The data its iterations train on: picks the trainer slot (:data:`TRAINER_SLOT`)."""
    uses: ClassVar[tuple[str, ...] | None] = None
    """The synthesis slots, besides ``environment`` and ``policy`` (every method is given both), whose
    components it calls through ``tools.component`` (SAND: detector, sampler, executor, critic, synthesizer;
    RFT/ETO/IPR: executor; a method that calls none: ``()``). Its stages' fingerprints (what ``sand run
    --resume`` checks and ``sand sweep`` reuse compares) cover these slots and no other synthesis slot, so a
    change to a slot the method never calls (the critic, for ETO) neither blocks a resume nor stops a reuse;
    in return ``tools.component`` refuses an undeclared synthesis slot (``ComponentError``). ``None`` (not
    declared): every synthesis slot is fingerprinted and may be called
    (:func:`~sand_framework.components.declared.method_slots`)."""

    unit_shape: ClassVar[Literal["deliberation", "generic"]] = "generic"
    """How ``sand view`` shows this method's units: ``deliberation`` (SAND's shape: the unit's ``trajectory``, its
    ``records`` and ``failed`` deliberation records, step by step beside the rendered training target) or
    ``generic`` (each unit kept whole, shown as a tree). The viewer asks the method instead of guessing from a
    unit's keys."""

    @abc.abstractmethod
    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        """Required. One unit (a JSON-serializable dict, with a ``"stats"`` dict of numbers) per trajectory."""

    def build_stream(self, batches: Iterable[tuple[list[Trajectory], int]], tools: MethodTools,
                     depth: int = 1) -> Iterator[list[dict[str, Any]]]:
        """Provided (override to overlap the work of consecutive batches): the units of each ``(trajectories,
        seed)`` batch, yielded batch by batch in order, each exactly what :meth:`build` returns for it.

        ``depth`` is ``run.batches_in_flight``: how many batches may be in progress at once (1: one after
        another). The engine stores each yielded batch before it asks for the next, and closes the iterator on a
        stop or a failure, so an override must give up its in-flight work when closed. Default: :meth:`build`
        per batch, whatever ``depth`` (``sand validate`` notes a ``depth`` above 1 that a method cannot use)."""
        for trajectories, seed in batches:
            yield self.build(trajectories, tools, seed)

    @abc.abstractmethod
    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        """Required. The iteration's training data from every unit, in the order of ``trajectories``.

        A pure function of its arguments: it runs again on every resume.
        """

    def inputs(self, trajectories: list[Trajectory], train_tasks: list[str],
               gold: Callable[[str], Trajectory]) -> list[Trajectory]:
        """Provided (override to build from more than the iteration's input): the trajectories the iteration
        builds from, one unit each, in order; :meth:`build` and :meth:`assemble` receive these.

        ``trajectories`` are the iteration's input (the expert data, or the previous iteration's
        ``next_expert``); ``train_tasks`` the task ids of the recipe's training split (``data.split``) and
        ``gold(task_id)`` the environment expert's trajectory of one, for a method that explores more tasks than
        the agent was trained on (ETO and IPR explore every training task). Called again on every resume, so it
        must be deterministic. Default: ``trajectories`` unchanged."""
        return list(trajectories)

    def summarize(self, units: list[dict[str, Any]]) -> dict[str, Any]:
        """Provided: :func:`unit_totals` of the units."""
        return unit_totals(units)

    def deliberations(self, unit: dict[str, Any]) -> list[DeliberationRecord]:
        """Provided (override when a unit holds deliberated steps): the deliberated steps of one stored unit,
        which the engine tells observers of (``sand_step_deliberated``) as the unit is saved. Default: none, except
        for a unit with SAND's ``records`` key: until 0.3.1 the engine read that key of every method's units, so
        those are still returned, with a ``DeprecationWarning`` (0.4 returns none: override this instead)."""
        if type(self).deliberations is Method.deliberations and unit.get("records"):
            warnings.warn(f"method {self.name!r}: the engine read `records` of its units as deliberated steps until "
                          "SAND 0.3.1; override Method.deliberations(unit) to keep telling sand_step_deliberated "
                          "observers of them (0.4 reads no unit key)", DeprecationWarning, stacklevel=2)
            return [DeliberationRecord.from_dict(r) for r in unit["records"]]
        return []


def unit_totals(units: list[dict[str, Any]]) -> dict[str, Any]:
    """The sum of each stat over a stage's units, ``trajectories`` (the unit count) and, where the units count
    ``steps`` and ``deliberated``, the ``deliberation_rate`` (what :meth:`Method.summarize` provides; ``sand report``
    totals an unfinished stage's units with it)."""
    total: dict[str, Any] = {}
    for u in units:
        for k, v in u.get("stats", {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] = round(total.get(k, 0) + v, 2)
    total["trajectories"] = len(units)
    if total.get("steps"):
        total["deliberation_rate"] = round(total.get("deliberated", 0) / total["steps"], 4)
    return total
