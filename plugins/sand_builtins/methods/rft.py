"""RFT: rejection-sampling fine-tuning (STaR / ReST / RFT style) as a method.

Each training task is explored ``k`` times by the current agent at temperature
``temperature`` from the reset; the explorations that reach the goal (distinct
action sequences only, at most ``max_per_task`` per task) join the expert data,
and the iteration is SFT on both. The expert data itself is carried over
unchanged to the next iteration (only the agent's weights improve).

Cost per task: ``k`` agent episodes (each up to the environment's step cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import IterationData, MethodTools
from sand_framework.rollout import ExploreRequest
from sand_framework.types import Trajectory

from sand_builtins.methods.common import ExploringMethod, task_seed


class RftMethod(ExploringMethod["RftMethod.Params"]):
    """The agent's own successful explorations of the training tasks join the expert data (SFT)."""

    name = "rft"
    description = ("explore each training task k times (temperature T); successful distinct trajectories join "
                   "the SFT data")
    produces = "sft"

    @dataclass
    class Params:
        k: Annotated[int, Ge(1)] = 4
        """Explorations per training task (each a whole episode from the reset)."""
        temperature: Annotated[float, Ge(0.0)] = 1.0
        """Sampling temperature of the explorations (0 = greedy: every exploration of a task is the same)."""
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of each agent turn while exploring (as the evaluator's)."""
        max_per_task: Annotated[int, Ge(1)] | None = None
        """Most successful explorations kept per task, first sampled first (null: every distinct one, so at
        most ``k``)."""
        include_expert: bool = True
        """Train on the expert trajectories too (the expert data plus the successes); false = the successes
        only (tasks the agent never solves then drop out of the iteration's SFT data)."""
        cross_task_batching: bool = False
        """Seed the explorations of all the batch's tasks as one group (a unit then depends on which tasks share
        its batch). By default each task's ``k`` explorations are seeded from the task, so a unit does not depend
        on its batch (a resume that redoes part of a batch gives the same units); with a policy that seeds per
        chat (every built-in one: ``Policy.seeds_per_chat``) they still share the model calls, so this is no
        longer faster (before 0.3.6 it was); without one, each task is sampled apart."""

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        p = self.params
        requests = [ExploreRequest(t, prefix=0, seed=task_seed(seed, t, "rft"))
                    for t in trajectories for _ in range(p.k)]
        found = self.explore(requests, tools, p.temperature)
        units = []
        for i, traj in enumerate(trajectories):
            mine = found[i * p.k:(i + 1) * p.k]
            kept, seen = [], set()
            duplicates = rejected_invalid = 0
            for n, ex in enumerate(mine):
                if not (ex.ok and ex.trajectory.success):
                    continue
                if ex.invalid_replies:  # a reply that did not parse is not what the agent should learn to write
                    rejected_invalid += 1
                    continue
                actions = tuple(ex.trajectory.actions)
                if actions in seen:
                    duplicates += 1
                    continue
                seen.add(actions)
                if p.max_per_task is None or len(kept) < p.max_per_task:
                    t = ex.trajectory
                    t.meta = {"source": "rft", "exploration": n, "iteration": tools.iteration}
                    kept.append(t.to_dict())
            units.append({
                "task_id": traj.task_id,
                "explorations": [{"actions": e.trajectory.actions, "reward": e.trajectory.reward,
                                  "success": e.trajectory.success, "invalid_replies": e.invalid_replies,
                                  "error": e.error} for e in mine],
                "kept": kept,
                "stats": {"explorations": len(mine), "successes": sum(e.trajectory.success for e in mine),
                          "kept": len(kept), "duplicates": duplicates, "rejected_invalid": rejected_invalid,
                          "replay_errors": sum(not e.ok for e in mine),
                          "agent_steps": sum(len(e.agent_steps) for e in mine),
                          "solved": int(bool(kept))},
            })
        return units

    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        """SFT data: per task, the expert trajectory (``include_expert``) then its kept explorations; the next
        iteration explores the same tasks from the same expert data."""
        data: list[Trajectory] = []
        for traj, unit in zip(trajectories, units):
            if self.params.include_expert:
                data.append(traj)
            data += [Trajectory.from_dict(d) for d in unit["kept"]]
        return IterationData(next_expert=list(trajectories), trajectories=data)


@hookimpl
def sand_register_methods(register):
    register(RftMethod)
