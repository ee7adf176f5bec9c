"""SAND's own method: self-consistency sampling, execution-guided critique, deliberation synthesis.

The work is done by the recipe's detector, sampler, executor, critic and synthesizer slots
(:func:`sand_framework.engine.synthesis.synthesize_batch`); this method only wires them into the
iteration's units, so the ablations (w/o SAS, w/o EAC) stay component swaps of those slots. With
``run.batches_in_flight`` above 1 it streams the phases across batches (:meth:`SandMethod.build_stream`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from sand_framework import hookimpl
from sand_framework.components import IterationData, Method, MethodTools, NoParams
from sand_framework.streaming import stream
from sand_framework.synthesis import (
    PHASES,
    BatchInProgress,
    Components,
    RolloutCache,
    SerialPolicy,
    SynthesisOutput,
    synthesize_batch,
)
from sand_framework.types import DeliberationRecord, Trajectory


class SandMethod(Method[NoParams]):
    """Deliberation synthesis at the steps where the agent's sampled actions disagree (the paper's steps 2-4)."""

    name = "sand"
    description = "sample N actions per expert step; where they disagree roll out, critique, synthesize a deliberation"
    produces = "sft"
    uses = ("detector", "sampler", "executor", "critic", "synthesizer")
    unit_shape = "deliberation"

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        return [self._unit(out) for out in synthesize_batch(trajectories, self._components(tools), seed)]

    def build_stream(self, batches: Iterable[tuple[list[Trajectory], int]], tools: MethodTools,
                     depth: int = 1) -> Iterator[list[dict[str, Any]]]:
        """The batches through :data:`~sand_framework.synthesis.PHASES`; with ``depth`` > 1 as a stream, one
        thread per phase, so the agent engine samples and rolls out batch k+1 while the base engine critiques
        batch k. Every call keeps its batch's seed, so the units are those of the chunked loop."""
        comps = self._components(tools)
        if depth > 1 and not comps.policy.concurrent_generate:  # the phases' threads take turns on the model
            comps = dataclasses.replace(comps, policy=SerialPolicy(comps.policy))
        work = (BatchInProgress(trajs, comps, seed) for trajs, seed in batches)
        stages = stream(work, PHASES, depth)
        try:
            for done in stages:
                yield [self._unit(out) for out in done.outputs]
        finally:
            stages.close()

    @staticmethod
    def _components(tools: MethodTools) -> Components:
        cache = tools.shared.setdefault("rollout_cache", RolloutCache())  # identical branches run once per iteration
        return Components.of_slots(tools.component, rollout_cache=cache)

    @staticmethod
    def _unit(out: SynthesisOutput) -> dict[str, Any]:
        return {"trajectory": out.trajectory.to_dict(), "records": [r.to_dict() for r in out.records],
                "failed": [r.to_dict() for r in out.failed], "stats": out.stats}

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
