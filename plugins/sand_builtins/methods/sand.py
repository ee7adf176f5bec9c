"""SAND's own method: self-consistency sampling, execution-guided critique, deliberation synthesis.

The work is done by the recipe's detector, sampler, executor, critic and synthesizer slots
(:func:`sand_framework.engine.synthesis.synthesize_batch`); this method only wires them into the
iteration's units, so the ablations (w/o SAS, w/o EAC) stay component swaps of those slots.
"""

from __future__ import annotations

from typing import Any

from sand_framework import hookimpl
from sand_framework.components import IterationData, Method, MethodTools, NoParams
from sand_framework.synthesis import Components, RolloutCache, synthesize_batch
from sand_framework.types import DeliberationRecord, Trajectory


class SandMethod(Method[NoParams]):
    """Deliberation synthesis at the steps where the agent's sampled actions disagree (the paper's steps 2-4)."""

    name = "sand"
    description = "sample N actions per expert step; where they disagree roll out, critique, synthesize a deliberation"
    produces = "sft"
    uses = ("detector", "sampler", "executor", "critic", "synthesizer")
    unit_shape = "deliberation"

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        cache = tools.shared.setdefault("rollout_cache", RolloutCache())  # identical branches run once per iteration
        comps = Components.of_slots(tools.component, rollout_cache=cache)
        return [{"trajectory": out.trajectory.to_dict(), "records": [r.to_dict() for r in out.records],
                 "failed": [r.to_dict() for r in out.failed], "stats": out.stats}
                for out in synthesize_batch(trajectories, comps, seed)]

    def deliberations(self, unit: dict[str, Any]) -> list[DeliberationRecord]:
        """The unit's deliberated steps (``records``; the failed syntheses in ``failed`` are not deliberations)."""
        return [DeliberationRecord.from_dict(r) for r in unit.get("records", [])]

    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        """The deliberation trajectories are both what is trained on and the next iteration's expert data
        (the paper's D_exp <- D_delib)."""
        new = [Trajectory.from_dict(u["trajectory"]) for u in units]
        return IterationData(next_expert=new, trajectories=new)


@hookimpl
def sand_register_methods(register):
    register(SandMethod)
