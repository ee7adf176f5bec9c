"""The agent plays whole episodes on training tasks, from a reset or from a replayed prefix.

Exploration-based methods (RFT's rejection sampling, ETO's failure collection,
IPR's step-level Monte Carlo estimates) all need the same thing: position an
environment at a known state — a reset, or the expert's first ``j`` actions
(replayed and checked against their recorded observations), optionally with
one more step of someone else's — and let the agent play on with given
:class:`~sand_framework.types.SamplingParams` until the episode ends. Doing it
here once keeps them identical to the executors and the evaluator: the same
lock-step loop (:func:`~sand_framework.rollout.episodes.run_lockstep`: one
batched model call per depth, one parallel ``step_all`` on the pool), the same
parsing, step caps and token accounting; and the same counters: the episodes
play through :meth:`~sand_framework.rollout.pool.EnvPool.run_episodes`, so their
agent turns and seconds count in the pool's (the executor's) ``stats`` as the
executor's own rollouts do.

Sampling seeds and batching: every sampled turn carries its own seed (the
episode's seed, ``derive_seed(group seed, "episode", i)`` for the ``i``-th
request of its seed group, and the turn index: :func:`~sand_framework.rollout.episodes.turn_seed`).
With ``group_by_seed`` (the default) the requests that carry the same ``seed``
form a seed group, and an episode's seed is its place in its group. A policy
whose samples depend only on each chat's own seed (``Policy.seeds_per_chat``:
every built-in one) plays all the groups in shared waves of ``max_parallel`` (when set)
and shared model calls (IPR's Monte Carlo rollouts of every state at once,
not five at a time); any other plays each group apart, so that the call's seed
is the group's. Either way an episode's result depends
only on its own request and its seed group — not on which other tasks happen
to be in the batch (what makes a method's units identical after a resume that
redoes part of a batch) — and, for backends that seed per request
(``SamplingParams.seeds``), neither on the rollout mode (``mode="async"``,
:func:`~sand_framework.rollout.asynchronous.run_async`, gives the same
episodes as lock-step) nor on ``max_parallel``: a group larger than a wave is
played in several waves, but an episode's seed is its position in the group,
not in its wave, so the waves change only how many episodes run at once (up to
a batched forward's float rounding). Greedy decoding (``temperature == 0``)
ignores seeds and is always played in one group.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from sand_framework.components import Environment, Policy
from sand_framework.errors import ReplayMismatch
from sand_framework.prompting import trajectory_chat
from sand_framework.rollout.episodes import INVALID_FEEDBACK, Episode, derive_seed
from sand_framework.rollout.pool import EnvPool
from sand_framework.types import Role, SamplingParams, Step, Trajectory


@dataclass
class ExploreRequest:
    """One episode to play: the task, the steps replayed before the agent acts, and its sampling seed."""

    trajectory: Trajectory
    """The task (``task_id``, instruction, task text) and, in ``steps``, the steps to replay."""
    prefix: int = 0
    """How many of ``trajectory.steps`` are replayed (reset + their actions, each observation checked when
    recorded) before the agent continues; 0 = the agent plays from the reset. A replayed step whose
    observation is the invalid-reply feedback was never sent to the environment and is not replayed."""
    seed: int | None = None
    """This episode's sampling seed (requests sharing a seed are played together, see the module notes);
    None = ``sampling.seed``."""
    max_steps: int | None = None
    """Cap on the whole episode, prefix included; None = the environment's cap for the task."""


@dataclass
class Exploration:
    """What one :class:`ExploreRequest` produced."""

    trajectory: Trajectory
    """The prefix steps (observations as replayed) then the agent's steps; ``reward``/``success`` at the end."""
    prefix: int
    done: bool = False
    """The environment ended the episode (goal or failure) rather than the step cap; an episode that fails on
    the very step that reaches the cap counts as capped."""
    error: str | None = None
    """Why the episode could not start (the prefix's replay diverged); the trajectory then holds no steps."""
    invalid_replies: int = 0
    """Agent replies that did not parse as ``Thought:/Action:`` (never sent to the environment)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    env_steps: int = 0
    """Environment steps spent: the replayed prefix plus the agent's steps."""

    @property
    def agent_steps(self) -> list[Step]:
        return self.trajectory.steps[self.prefix:]

    @property
    def ok(self) -> bool:
        return self.error is None

    def cost(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "env_steps": self.env_steps}


def replayable(steps: list[Step]) -> list[Step]:
    """The steps that reached the environment (an unparsable reply got feedback, not a step)."""
    return [s for s in steps if s.observation != INVALID_FEEDBACK]


def explore(requests: list[ExploreRequest], env: Environment, policy: Policy, sampling: SamplingParams,
            pool: EnvPool | None = None, role: Role = "agent", max_parallel: int | None = None,
            verify_replay: bool = True, group_by_seed: bool = True, mode: str = "lockstep",
            max_concurrency: int | None = None) -> list[Exploration]:
    """Play every request to its end; results in request order.

    ``pool`` holds the environments (an executor's pool, so its workers step them; None = a local pool of
    ``env`` made for this call and closed after it). At most ``max_parallel`` episodes run together (None:
    a whole seed group); ``sampling`` gives temperature, ``max_new_tokens`` and the default seed. ``mode``:
    ``lockstep`` or ``async`` (each wave's episodes on their own, at most ``max_concurrency`` at a time; None =
    the whole wave).
    """
    own_pool = pool is None
    pool = pool if pool is not None else EnvPool(env)
    out: list[Exploration | None] = [None] * len(requests)
    sampled = sampling.temperature > 0
    try:
        groups: dict[Any, list[int]] = {}
        for i, req in enumerate(requests):
            key = (req.seed if req.seed is not None else sampling.seed) if group_by_seed and sampled else 0
            groups.setdefault(key, []).append(i)
        # each request's episode seed: its position in its seed group, whatever wave it plays in
        seeds: list[int | None] = [None] * len(requests)
        for idx in groups.values():
            group_seed = requests[idx[0]].seed if requests[idx[0]].seed is not None else sampling.seed
            for pos, i in enumerate(idx):
                seeds[i] = None if group_seed is None else derive_seed(group_seed, "episode", pos)
        shared = group_by_seed and sampled and bool(max_parallel) and bool(getattr(policy, "seeds_per_chat", False))
        # a policy that seeds per chat makes each episode independent of its batch: the groups share waves (and
        # model calls); otherwise each group plays apart, so that its call seed is its own
        waves = [[i for idx in groups.values() for i in idx]] if shared else list(groups.values())
        for idx in waves:
            call_seed = sampling.seed if shared else (
                requests[idx[0]].seed if requests[idx[0]].seed is not None else sampling.seed)
            wave = len(idx) if not max_parallel else max(1, max_parallel)
            for w in range(0, len(idx), wave):
                part = idx[w:w + wave]
                for i, res in zip(part, _play([requests[i] for i in part], env, policy, sampling,
                                              [seeds[i] for i in part], call_seed, pool, role, verify_replay,
                                              mode, max_concurrency)):
                    out[i] = res
    finally:
        if own_pool:
            pool.close()
    return [o for o in out if o is not None]


def _play(requests: list[ExploreRequest], env: Environment, policy: Policy, sampling: SamplingParams,
          seeds: list[int | None], call_seed: int | None, pool: EnvPool, role: Role, verify: bool,
          mode: str = "lockstep", max_concurrency: int | None = None) -> list[Exploration]:
    """One wave: request ``k`` plays with episode seed ``seeds[k]`` (its place in its seed group, see
    :func:`explore`); ``call_seed`` seeds what has no episode seed (greedy turns)."""
    handles = pool.take(len(requests))
    prefixes = [replayable(r.trajectory.steps[:r.prefix]) for r in requests]
    positioned = pool.replay_all([
        (h, r.trajectory.task_id, [s.action for s in steps],
         [s.observation or None for s in steps] if verify else None)
        for r, h, steps in zip(requests, handles, prefixes)])
    results: list[Exploration] = []
    live: list[tuple[Exploration, Episode]] = []
    for k, (req, h, steps, res) in enumerate(zip(requests, handles, prefixes, positioned)):
        t = req.trajectory
        traj = Trajectory(task_id=t.task_id, env=t.env, instruction=t.instruction, task=t.task)
        ex = Exploration(trajectory=traj, prefix=req.prefix)
        results.append(ex)
        if isinstance(res, ReplayMismatch):
            ex.error = str(res)
            continue
        observed = iter(r.observation for r in res)
        traj.steps = [Step(s.thought, s.action, s.observation if s.observation == INVALID_FEEDBACK
                           else next(observed), s.deliberated) for s in t.steps[:req.prefix]]
        ex.env_steps = len(steps)
        last = res[-1] if res else None
        if last is not None:
            traj.reward, traj.success = max(0.0, min(1.0, last.reward)), bool(last.success)
        cap = req.max_steps if req.max_steps is not None else env.max_steps(t.task_id)
        if last is not None and last.done:
            ex.done = True
            continue
        if cap - req.prefix <= 0:
            continue
        episode = Episode(env=h, chat=trajectory_chat(traj, upto=len(traj.steps)), steps_left=cap - req.prefix,
                          reward=traj.reward, success=traj.success, seed=seeds[k])
        live.append((ex, episode))
    if live:
        sp = SamplingParams(temperature=sampling.temperature, max_new_tokens=sampling.max_new_tokens, seed=call_seed)
        pool.run_episodes([ep for _, ep in live], policy, sp, role=role, mode=mode,
                          max_concurrency=max_concurrency or len(live))  # counted in the pool's stats
    for ex, ep in live:
        ex.trajectory.steps += ep.steps
        ex.trajectory.reward, ex.trajectory.success = ep.reward, ep.success
        ex.done = ep.success or (ep.done and ep.steps_left > 0)
        ex.invalid_replies = sum(s.observation == INVALID_FEEDBACK for s in ep.steps)
        ex.env_steps += len(ep.steps) - ex.invalid_replies
        ex.prompt_tokens, ex.completion_tokens = ep.prompt_tokens, ep.completion_tokens
    return results


@dataclass
class PoolSource:
    """Where a method's explorations get environments: the recipe executor's pool when it has one."""

    executor: Any = None
    local: dict[tuple[int, str | None], EnvPool] = field(default_factory=dict)

    def pool(self, env: Environment, phase: str | None = None) -> EnvPool:
        """The executor's pool of ``env``, or a local one without an executor. ``phase`` (None: the default pool)
        asks for a pool of its own, for work that plays while another phase plays on the default pool; an
        executor whose ``pool`` takes no ``phase`` (a third-party one) gets it from a local pool, which starts
        from a clone of ``env`` (its steps are then not in the executor's ``stats``)."""
        get = getattr(self.executor, "pool", None)
        if callable(get) and (phase is None or "phase" in inspect.signature(get).parameters):
            return get(env) if phase is None else get(env, phase=phase)
        key = (id(env), phase)
        if key not in self.local:
            self.local[key] = EnvPool(env) if phase is None else EnvPool.of_clone(env)
        return self.local[key]

    @property
    def max_parallel(self) -> int | None:
        return getattr(getattr(self.executor, "params", None), "max_parallel", None)

    @property
    def rollout_mode(self) -> str:
        """The executor's ``rollout_mode`` (``lockstep`` without one): methods play their episodes the same way."""
        return getattr(getattr(self.executor, "params", None), "rollout_mode", "lockstep")

    @property
    def max_concurrency(self) -> int | None:
        return getattr(getattr(self.executor, "params", None), "max_concurrency", None)
