"""Greedy evaluation on held-out tasks: one action per step, no search (the ETO/MPO protocol)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import Environment, Evaluator, Policy, TaskResult
from sand_framework.deliberation import is_deliberation
from sand_framework.metrics import aggregate_results
from sand_framework.rollout import EnvPool, Episode, run_lockstep
from sand_framework.prompting import trajectory_chat
from sand_framework.types import SamplingParams, Trajectory


class GreedyEvaluator(Evaluator):
    """Greedy rollouts of the agent; metrics as the paper reports them."""

    name = "greedy"
    description = "greedy decoding, benchmark step caps; reward x100, success, deliberation rate, tokens"

    @classmethod
    def agent_token_budget(cls, params):
        return ("max_new_tokens", params.max_new_tokens)

    @dataclass
    class Params:
        max_new_tokens: Annotated[int, Ge(1)] = 96
        max_steps: Annotated[int, Ge(1)] | None = None
        """Override the environment's per-task step cap (null: the benchmark's)."""

    def __init__(self, params=None):
        super().__init__(params)
        self._pools: dict[int, EnvPool] = {}

    def pool(self, env: Environment) -> EnvPool:
        """The warm copies of ``env`` this evaluator steps (kept across calls, closed by :meth:`close`)."""
        if id(env) not in self._pools:
            self._pools[id(env)] = EnvPool(env)
        return self._pools[id(env)]

    def play(self, task_ids: list[str], env: Environment, policy: Policy, sampling: SamplingParams
             ) -> list[TaskResult]:
        """One episode per entry of ``task_ids`` (an id may repeat: independent episodes of one task), all
        advanced in lock-step with ``sampling``; shared by the greedy and the Best-of-N evaluators."""
        pool = self.pool(env)
        episodes = [start_episode(task_id, e, env.name, self.params.max_steps)
                    for task_id, e in zip(task_ids, pool.take(len(task_ids)))]
        run_lockstep([ep for _, ep in episodes], policy, sampling, role="agent", pool=pool)
        return [finish_episode(traj, ep) for traj, ep in episodes]

    def evaluate(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        return self.play(task_ids, env, policy,
                         SamplingParams(temperature=0.0, max_new_tokens=self.params.max_new_tokens))

    def aggregate(self, results: list[TaskResult]) -> dict:
        """The paper's split metrics, as defined in :mod:`sand_framework.metrics`."""
        return aggregate_results(results)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def start_episode(task_id: str, env, env_name: str, max_steps: int | None) -> tuple[Trajectory, Episode]:
    """Reset ``env`` (an environment or a pooled handle's environment) to ``task_id``: the trajectory to fill and
    its live episode (step cap: ``max_steps``, else the benchmark's for the task)."""
    task = env.reset(task_id)
    traj = Trajectory(task_id=task_id, env=env_name, instruction=env.instruction(), task=task)
    cap = max_steps or env.max_steps(task_id)
    return traj, Episode(env=env, chat=trajectory_chat(traj, upto=0), steps_left=cap)


def finish_episode(traj: Trajectory, ep: Episode) -> TaskResult:
    """The evaluated task: the episode's steps (each flagged when its thought deliberates), reward, success,
    invalid actions and token counts."""
    for s in ep.steps:
        s.deliberated = is_deliberation(s.thought)
    traj.steps, traj.reward, traj.success = ep.steps, ep.reward, ep.success
    traj.meta = {"invalid_actions": ep.invalid_actions}
    return TaskResult(traj, ep.prompt_tokens, ep.completion_tokens)


@hookimpl
def sand_register_evaluators(register):
    register(GreedyEvaluator)
