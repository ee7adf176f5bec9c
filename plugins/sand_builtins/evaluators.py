"""Greedy evaluation on held-out tasks: one action per step, no search (the ETO/MPO protocol)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sand_framework import hookimpl
from sand_framework.components import Environment, Evaluator, Policy, TaskResult
from sand_framework.deliberation import is_deliberation
from sand_framework.engine.envpool import EnvPool
from sand_framework.engine.episodes import Episode, run_lockstep
from sand_framework.prompting import trajectory_chat
from sand_framework.types import SamplingParams, Trajectory


class GreedyEvaluator(Evaluator):
    """Greedy rollouts of the agent; metrics as the paper reports them."""

    name = "greedy"
    description = "greedy decoding, benchmark step caps; reward x100, success, deliberation rate, tokens"

    @dataclass
    class Params:
        max_new_tokens: int = 96
        max_steps: int | None = None
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
                     SamplingParams(temperature=0.0, max_new_tokens=self.params.max_new_tokens), role="agent")
        results = []
        for traj, ep in episodes:
            for s in ep.steps:
                s.deliberated = is_deliberation(s.thought)
            traj.steps, traj.reward, traj.success = ep.steps, ep.reward, ep.success
            traj.meta = {"invalid_actions": ep.invalid_actions}
            results.append(TaskResult(traj, ep.prompt_tokens, ep.completion_tokens))
        return results

    def aggregate(self, results: list[TaskResult]) -> dict:
        return aggregate_results(results)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def aggregate_results(results: list[TaskResult]) -> dict:
    """Average reward x100, success rate, deliberation rates and tokens per task over a split."""
    n = len(results)
    if n == 0:
        return {"tasks": 0}
    steps = [s for r in results for s in r.trajectory.steps]
    per_traj = [sum(s.deliberated for s in r.trajectory.steps) / max(1, len(r.trajectory.steps)) for r in results]
    return {
        "tasks": n,
        "avg_reward": round(100 * statistics.fmean(r.trajectory.reward for r in results), 2),
        "success_rate": round(100 * statistics.fmean(float(r.trajectory.success) for r in results), 2),
        "avg_steps": round(statistics.fmean(len(r.trajectory.steps) for r in results), 2),
        "deliberation_rate_step": round(sum(s.deliberated for s in steps) / max(1, len(steps)), 4),
        "deliberation_rate_traj": round(statistics.fmean(per_traj), 4),
        "invalid_actions_per_task": round(statistics.fmean(r.trajectory.meta.get("invalid_actions", 0) for r in results), 2),
        "prompt_tokens_per_task": round(statistics.fmean(r.prompt_tokens for r in results), 1),
        "completion_tokens_per_task": round(statistics.fmean(r.completion_tokens for r in results), 1),
    }


@hookimpl
def sand_register_evaluators(register):
    register(GreedyEvaluator)
