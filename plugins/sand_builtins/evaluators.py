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

    def evaluate(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        if id(env) not in self._pools:
            self._pools[id(env)] = EnvPool(env)
        envs = self._pools[id(env)].take(len(task_ids))
        episodes = []
        for task_id, e in zip(task_ids, envs):
            task = e.reset(task_id)
            traj = Trajectory(task_id=task_id, env=env.name, instruction=e.instruction(), task=task)
            cap = self.params.max_steps or e.max_steps(task_id)
            episodes.append((traj, Episode(env=e, chat=trajectory_chat(traj, upto=0), steps_left=cap)))
        run_lockstep([ep for _, ep in episodes], policy,
                     SamplingParams(temperature=0.0, max_new_tokens=self.params.max_new_tokens), role="agent",
                     pool=self._pools[id(env)])
        results = []
        for traj, ep in episodes:
            for s in ep.steps:
                s.deliberated = is_deliberation(s.thought)
            traj.steps, traj.reward, traj.success = ep.steps, ep.reward, ep.success
            traj.meta = {"invalid_actions": ep.invalid_actions}
            results.append(TaskResult(traj, ep.prompt_tokens, ep.completion_tokens))
        return results

    def aggregate(self, results: list[TaskResult]) -> dict:
        """The paper's split metrics, as defined in :mod:`sand_framework.metrics`."""
        return aggregate_results(results)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


@hookimpl
def sand_register_evaluators(register):
    register(GreedyEvaluator)
