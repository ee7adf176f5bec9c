"""An iteration method from outside SAND: train again on the expert trajectories that still replay to the goal.

``successful_replay`` replays every input trajectory in the environment (SAND's public rollout helper,
:func:`sand_framework.rollout.explore`, positioned at the whole trajectory: reset, then each action, every
observation checked) and keeps those whose replay reaches ``min_reward``; the iteration is SFT on them and
the next iteration starts from them. It calls no model, so it is also the cheapest "one more epoch on the
expert data" control a comparison can run as a method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from annotated_types import Interval

from sand_framework.components import IterationData, Method, MethodTools
from sand_framework.rollout import ExploreRequest, explore
from sand_framework.types import SamplingParams, Trajectory


class SuccessfulReplayMethod(Method):
    """SFT on the input trajectories whose replay in the environment still reaches the goal."""

    name = "successful_replay"
    description = "replay each expert trajectory; SFT on those that still reach min_reward (no model calls)"
    produces = "sft"
    uses = ()  # no slot besides the environment and policy every method gets: a critic change keeps its stages

    @dataclass
    class Params:
        min_reward: Annotated[float, Interval(ge=0.0, le=1.0)] = 1.0
        """Keep a trajectory when its replay ends with at least this reward (1.0: it reaches the goal)."""

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        # The whole trajectory as the prefix and as the step cap: replayed and checked, never continued.
        requests = [ExploreRequest(t, prefix=len(t.steps), max_steps=len(t.steps)) for t in trajectories]
        replays = explore(requests, tools.env, tools.policy, SamplingParams(temperature=0.0))
        return [{"task_id": t.task_id, "reward": r.trajectory.reward, "error": r.error,
                 "kept": r.ok and r.trajectory.reward >= self.params.min_reward,
                 "stats": {"replayed": 1, "kept": int(r.ok and r.trajectory.reward >= self.params.min_reward),
                           "replay_errors": int(not r.ok)}}
                for t, r in zip(trajectories, replays)]

    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        kept = [t for t, u in zip(trajectories, units) if u["kept"]]
        return IterationData(next_expert=kept, trajectories=kept)
