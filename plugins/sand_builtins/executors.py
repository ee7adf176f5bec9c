"""Rollout executors: restore step t, execute a candidate, let the agent play on, record the outcome."""

from __future__ import annotations

from dataclasses import dataclass

from sand_framework import hookimpl
from sand_framework.components import Environment, Executor, Policy, RolloutRequest
from sand_framework.engine.envpool import EnvPool
from sand_framework.engine.episodes import Episode, act, run_lockstep
from sand_framework.errors import ReplayMismatch
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Rollout, SamplingParams


class InProcessExecutor(Executor):
    """All requested rollouts advance together in this process, one batched model call per depth.

    Each branch gets its own warm environment from a pool; the prefix is
    replayed and checked against the expert's recorded observations, so a
    rollout always starts from exactly the expert's state at step t.
    """

    name = "in_process"
    description = "lock-step batched rollouts on warm environments in this process"

    @dataclass
    class Params:
        temperature: float = 1.0
        """Decoding of the agent's continuation (paper: 1.0)."""
        max_new_tokens: int = 64
        max_rollout_steps: int | None = None
        """Cap on steps after the candidate (null: the environment's own cap)."""
        verify_replay: bool = True
        max_parallel: int = 8
        """Environments (branches) advanced together; more requests run in successive waves."""

    def __init__(self, params=None):
        super().__init__(params)
        self._pools: dict[int, EnvPool] = {}

    def _pool(self, env: Environment) -> EnvPool:
        if id(env) not in self._pools:
            self._pools[id(env)] = EnvPool(env)
        return self._pools[id(env)]

    def start(self, req: RolloutRequest, env: Environment) -> Episode:
        """Position ``env`` at the request's step, execute the candidate, return the live episode."""
        traj, t = req.trajectory, req.step_index
        prefix = traj.steps[:t]
        expected = [s.observation for s in prefix] if self.params.verify_replay else None
        env.replay(traj.task_id, [s.action for s in prefix], expected)
        cap = req.max_steps - t
        if self.params.max_rollout_steps is not None:
            cap = min(cap, self.params.max_rollout_steps + 1)
        episode = Episode(env=env, chat=trajectory_chat(traj, upto=t), steps_left=max(1, cap))
        act(episode, req.candidate.thought, req.candidate.action, valid=bool(req.candidate.action))
        return episode

    def run(self, requests, env, policy: Policy, seed=None) -> list[Rollout]:
        out: list[Rollout] = []
        wave = max(1, self.params.max_parallel)
        for i in range(0, len(requests), wave):
            out += self._run_wave(requests[i:i + wave], env, policy, None if seed is None else seed + i)
        return out

    def _run_wave(self, requests, env, policy: Policy, seed) -> list[Rollout]:
        envs = self._pool(env).take(len(requests))
        episodes, rollouts = [], []
        for req, e in zip(requests, envs):
            rollout = Rollout(task_id=req.trajectory.task_id, prefix_len=req.step_index, candidate=req.candidate.action)
            try:
                episodes.append(self.start(req, e))
            except ReplayMismatch as exc:
                rollout.error = str(exc)
                episodes.append(None)
            rollouts.append(rollout)
        live = [ep for ep in episodes if ep is not None]
        sp = SamplingParams(temperature=self.params.temperature, max_new_tokens=self.params.max_new_tokens, seed=seed)
        run_lockstep(live, policy, sp, role="agent")
        for rollout, ep in zip(rollouts, episodes):
            if ep is not None:
                rollout.steps, rollout.reward, rollout.success, rollout.done = ep.steps, ep.reward, ep.success, ep.done
        return rollouts

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


@hookimpl
def sand_register_executors(register):
    register(InProcessExecutor)
