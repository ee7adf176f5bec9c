"""Agent episodes advanced in lock-step: one batched model call per step for all live episodes.

(:mod:`sand_framework.rollout.asynchronous` runs the same episodes asynchronously; both send each turn with
its own seed, :func:`turn_seed`, so they give the same episodes.)

Rollout executors and evaluators both need "let the agent act until done";
doing it here once keeps their behaviour identical (same parsing, same
treatment of invalid actions, same step caps, same token accounting). A recorded
episode is checked by replaying it (:func:`replay_outcome`, used on import).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from sand_framework.components import Environment, Policy
from sand_framework.prompting import format_observation, format_turn, parse_turn
from sand_framework.types import Chat, Role, SamplingParams, Step, StepResult, Trajectory

INVALID_FEEDBACK = "Invalid reply: answer with one line 'Thought: ...' and one line 'Action: <a valid action>'."


def derive_seed(*parts: object) -> int:
    """A 32-bit seed from any parts (a batch seed, a task id, a step index): stable across processes."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def turn_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed of an episode's turn ``turn`` (0 = its first agent turn, counting the steps it holds):
    one per request, so a sampled turn depends on its own chat and seed, never on what shares its batch."""
    return derive_seed(episode_seed, "turn", turn)


@dataclass
class Episode:
    """A live episode: its environment (already positioned), chat so far and bookkeeping."""

    env: Environment | Any
    """The environment, or the handle of a pooled one (see :mod:`sand_framework.rollout.pool`)."""
    chat: Chat
    steps_left: int
    steps: list[Step] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    done: bool = False
    invalid_actions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seed: int | None = None
    """The episode's sampling seed (each turn's is :func:`turn_seed` of it); None = derived from the call's
    ``sampling.seed`` and the episode's position in the call (:func:`assign_seeds`)."""

    def record(self, thought: str, action: str, observation: str) -> None:
        self.steps.append(Step(thought=thought, action=action, observation=observation))
        self.chat.append({"role": "assistant", "content": format_turn(thought, action)})
        self.chat.append({"role": "user", "content": format_observation(observation)})
        self.steps_left -= 1
        if self.steps_left <= 0:
            self.done = True


class _Direct:
    """Steps handles that are environments, one after another (what a local :class:`EnvPool` does)."""

    @staticmethod
    def step_all(pairs: list[tuple[Any, str]]) -> list[StepResult]:
        return [env.step(action) for env, action in pairs]


def apply(episode: Episode, thought: str, action: str, result: StepResult | None) -> None:
    """Record one agent turn whose environment step (``result``) is known; ``None`` = invalid reply, no step."""
    if result is None:
        episode.invalid_actions += 1
        episode.record(thought, action, INVALID_FEEDBACK)
        return
    episode.reward = max(0.0, min(1.0, result.reward))
    episode.success = episode.success or result.success
    episode.record(thought, action, result.observation)
    if result.valid is False:
        episode.invalid_actions += 1
    if result.done:
        episode.done = True


def act_all(episodes: list[Episode], turns: list[tuple[str, str, bool]], pool: Any = None) -> None:
    """Apply one turn ``(thought, action, valid)`` to each episode, stepping all their environments in one
    ``pool.step_all`` call (in parallel where the pool's environments live in workers)."""
    stepped = [(ep, turn) for ep, turn in zip(episodes, turns) if turn[2]]
    stepper = _Direct if pool is None else pool
    results = stepper.step_all([(ep.env, turn[1]) for ep, turn in stepped]) if stepped else []
    by_episode = {id(ep): res for (ep, _), res in zip(stepped, results)}
    for ep, (thought, action, valid) in zip(episodes, turns):
        apply(ep, thought, action, by_episode[id(ep)] if valid else None)


def assign_seeds(episodes: list[Episode], sampling: SamplingParams) -> None:
    """Give each episode without a seed ``derive_seed(sampling.seed, i)`` (``i``: its position in the call); no-op
    for greedy decoding or without ``sampling.seed``."""
    if sampling.seed is None or sampling.temperature is None or sampling.temperature <= 0:
        return
    for i, ep in enumerate(episodes):
        if ep.seed is None:
            ep.seed = derive_seed(sampling.seed, "episode", i)


def run_lockstep(episodes: list[Episode], policy: Policy, sampling: SamplingParams, role: Role = "agent",
                 pool: Any = None) -> None:
    """Advance every episode until done: per depth, one batched ``generate`` for all live chats, then one
    ``pool.step_all`` for all their environments (``pool=None``: the episodes hold environments, stepped here).

    Sampled turns carry one seed each (``SamplingParams.seeds``: :func:`turn_seed` of the episode's seed), so
    an episode does not depend on which others share its calls; greedy turns carry none."""
    assign_seeds(episodes, sampling)
    greedy = sampling.temperature is None or sampling.temperature <= 0
    step = 0
    while True:
        live = [e for e in episodes if not e.done]
        if not live:
            return
        seeds = None if greedy or any(e.seed is None for e in live) else [
            turn_seed(e.seed, len(e.steps)) for e in live]
        # Greedy calls keep the call's seed plus the depth (ignored by real backends; a scripted one may use it).
        seed = seeds[0] if seeds else (None if sampling.seed is None else sampling.seed + step)
        sp = SamplingParams(n=1, temperature=sampling.temperature, max_new_tokens=sampling.max_new_tokens,
                            seed=seed, seeds=seeds)
        outputs = policy.generate([e.chat for e in live], sp, role=role)
        turns = []
        for episode, (completion, *_) in zip(live, outputs):
            episode.prompt_tokens += completion.prompt_tokens
            episode.completion_tokens += completion.completion_tokens
            turn = parse_turn(completion.text)
            turns.append((turn.thought, turn.action, turn.valid))
        act_all(live, turns, pool)
        step += 1


def replay_outcome(env: Environment, traj: Trajectory, check_observations: bool = True) -> tuple[float, bool]:
    """Reset and replay ``traj``'s actions; return (reward, success). Raises ReplayMismatch on divergence."""
    expected: list[str | None] | None = None
    if check_observations:
        expected = [s.observation for s in traj.steps]
        if expected and not expected[-1]:
            expected[-1] = None  # ShareGPT files end on the agent's turn: the last observation is not stored
    results = env.replay(traj.task_id, traj.actions, expected=expected)
    if not results:
        return 0.0, False
    return results[-1].reward, results[-1].success
