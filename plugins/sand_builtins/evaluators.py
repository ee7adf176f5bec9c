"""Greedy evaluation on held-out tasks: one action per step, no search (the ETO/MPO protocol)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from annotated_types import Ge, Interval

from sand_framework import hookimpl
from sand_framework.components import Environment, Evaluator, Policy, TaskResult
from sand_framework.components.environment import MAX_EPISODE_STEPS
from sand_framework.config.paramdoc import SCHEDULING
from sand_framework.deliberation import is_deliberation
from sand_framework.metrics import aggregate_results
from sand_framework.rollout import EnvPool, Episode, derive_seed, run_episodes
from sand_framework.prompting import trajectory_chat
from sand_framework.types import SamplingParams, Trajectory


class GreedyEvaluator(Evaluator["GreedyEvaluator.Params"]):
    """Greedy rollouts of the agent; metrics as the paper reports them."""

    name = "greedy"
    description = "greedy decoding, benchmark step caps; reward x100, success, deliberation rate, tokens"

    @classmethod
    def agent_token_budget(cls, params):
        return ("max_new_tokens", params.max_new_tokens)

    @dataclass
    class Params:
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of each agent turn (``sand validate`` checks it holds the longest trained thought plus an
        action)."""
        max_steps: Annotated[int, Interval(ge=1, le=MAX_EPISODE_STEPS)] | None = None
        """Override the environment's per-task step cap, at most 1000 (null: the benchmark's)."""
        rollout_mode: Annotated[Literal["lockstep", "async"], SCHEDULING] = "lockstep"
        """``lockstep``: per step one batched model call for all live episodes; ``async``: each episode submits
        its next turn as soon as its environment answers. Same results (docs/scaling.md, "Asynchronous
        rollouts")."""
        max_concurrency: Annotated[int, Ge(1), SCHEDULING] = 32
        """``async`` only: episodes in flight at once."""

    def __init__(self, params=None):
        super().__init__(params)
        self._pools: dict[int, EnvPool] = {}
        self.rollout_stats: dict[str, float] = {"agent_turns": 0, "rollout_seconds": 0.0, "prompt_tokens": 0,
                                                "completion_tokens": 0}
        """Agent turns, seconds in rollout loops and tokens over every :meth:`play` (for the run's metrics)."""

    def pool(self, env: Environment) -> EnvPool:
        """The warm copies of ``env`` this evaluator steps (kept across calls, closed by :meth:`close`)."""
        if id(env) not in self._pools:
            self._pools[id(env)] = EnvPool(env)
        return self._pools[id(env)]

    def play(self, task_ids: list[str], env: Environment, policy: Policy, sampling: SamplingParams,
             seeds: list[int] | None = None) -> list[TaskResult]:
        """One episode per entry of ``task_ids`` (an id may repeat: independent episodes of one task), advanced
        with ``sampling`` in the evaluator's ``rollout_mode``; shared by the greedy and the Best-of-N evaluators.
        Episode ``i`` samples with seed ``seeds[i]`` when ``seeds`` is given (one per entry of ``task_ids``), else
        ``derive_seed(sampling.seed, "episode", i)`` (per turn: ``turn_seed`` of it). Greedy turns carry no
        per-episode seed either way (the call's ``sampling.seed`` plus the depth, which real backends ignore)."""
        if seeds is not None and len(seeds) != len(task_ids):
            raise ValueError(f"play: {len(seeds)} seeds for {len(task_ids)} episodes")
        pool = self.pool(env)
        episodes = [start_episode(task_id, e, env.name, self.params.max_steps)
                    for task_id, e in zip(task_ids, pool.take(len(task_ids)))]
        for i, (_, ep) in enumerate(episodes):
            if seeds is not None:
                ep.seed = int(seeds[i])
            else:
                ep.seed = None if sampling.seed is None else derive_seed(sampling.seed, "episode", i)
        busy0 = _engine_busy(policy)
        ran = run_episodes([ep for _, ep in episodes], policy, sampling, role="agent", pool=pool,
                           mode=self.params.rollout_mode, max_concurrency=self.params.max_concurrency)
        for key, value in (("agent_turns", ran.agent_turns), ("rollout_seconds", ran.wall_seconds),
                           ("prompt_tokens", ran.prompt_tokens), ("completion_tokens", ran.completion_tokens)):
            self.rollout_stats[key] += value
        busy1 = _engine_busy(policy)
        if busy0 is not None and busy1 is not None:
            self.rollout_stats["engine_busy_seconds"] = self.rollout_stats.get("engine_busy_seconds", 0.0) + (
                busy1 - busy0)
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


def _engine_busy(policy: Policy) -> float | None:
    """The policy's engine busy seconds so far (``engine_busy_seconds``, else ``busy_seconds``; None without)."""
    stats = getattr(policy, "stats", None) or {}
    value = stats.get("engine_busy_seconds", stats.get("busy_seconds"))
    return float(value) if value is not None else None


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
