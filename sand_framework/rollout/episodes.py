"""Agent episodes advanced in lock-step: one batched model call per step for all live episodes.

Rollout executors and evaluators both need "let the agent act until done";
doing it here once keeps their behaviour identical (same parsing, same
treatment of invalid actions, same step caps, same token accounting). A recorded
episode is checked by replaying it (:func:`replay_outcome`, used on import).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sand_framework.components import Environment, Policy
from sand_framework.prompting import format_observation, format_turn, parse_turn
from sand_framework.types import Chat, Role, SamplingParams, Step, StepResult, Trajectory

INVALID_FEEDBACK = "Invalid reply: answer with one line 'Thought: ...' and one line 'Action: <a valid action>'."


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


def run_lockstep(episodes: list[Episode], policy: Policy, sampling: SamplingParams, role: Role = "agent",
                 pool: Any = None) -> None:
    """Advance every episode until done: per depth, one batched ``generate`` for all live chats, then one
    ``pool.step_all`` for all their environments (``pool=None``: the episodes hold environments, stepped here)."""
    sampling = SamplingParams(n=1, temperature=sampling.temperature, max_new_tokens=sampling.max_new_tokens,
                              seed=sampling.seed)
    step = 0
    while True:
        live = [e for e in episodes if not e.done]
        if not live:
            return
        if sampling.seed is not None:
            sampling.seed = sampling.seed + step
        outputs = policy.generate([e.chat for e in live], sampling, role=role)
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
