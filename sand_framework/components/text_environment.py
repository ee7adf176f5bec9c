"""A base for text environments that owns the episode bookkeeping every benchmark repeats.

Every text benchmark's ``step()`` has the same skeleton around one engine call:
refuse a step before ``reset``, answer a step after the episode ended without
touching the engine, count the step (invalid ones too) against the task's
cap, remember the action for restoring the episode later. Written once here,
the benchmarks cannot drift apart on those rules (an environment that forgot
to count invalid actions would give its agents free retries).

A subclass implements :meth:`TextEnvironment.start` (the engine's reset) and
:meth:`TextEnvironment.act` (the engine's step, returning an :class:`Outcome`);
:meth:`~sand_framework.components.Environment.reset` and ``step`` are the
templates around them. Plugins import it from here::

    from sand_framework.components.text_environment import EPISODE_OVER, Outcome, TextEnvironment
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

from sand_framework.components.base import P
from sand_framework.components.environment import Environment
from sand_framework.types import StepResult

EPISODE_OVER = "The episode is over."
"""The observation of a step taken after the episode ended (the engine is not called; ``valid=False``)."""


@dataclass(frozen=True)
class Outcome:
    """What the engine made of one action, before the step cap is applied.

    ``reward`` and ``success`` of ``None`` leave the episode's values as they
    were (an action the engine never saw changes nothing).
    """

    observation: str
    valid: bool
    reward: float | None = None
    success: bool | None = None
    ends: bool = False
    """The engine ended the episode (success, a failed task, a purchase)."""


@dataclass
class EpisodeState:
    """The running episode: its task, the actions given so far and where it stands."""

    task_id: str
    step_cap: int
    history: list[str] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    done: bool = False


class TextEnvironment(Environment[P]):
    """An :class:`Environment` whose ``reset``/``step`` are templates around :meth:`start` and :meth:`act`."""

    def __init__(self, params: Any = None):
        super().__init__(params)
        self.episode: EpisodeState | None = None
        """None before the first reset, after ``close()`` and while a reset is under way."""

    @abc.abstractmethod
    def start(self, task_id: str) -> str:
        """Reset the engine to ``task_id`` (and any per-episode state of the subclass); return the task text."""

    @abc.abstractmethod
    def act(self, action: str) -> Outcome:
        """Run one action of the running episode (``self.episode``, already counting this action)."""

    def reset(self, task_id: str) -> str:
        self.episode = None  # a failed start leaves no episode to step (or to restore after a crash)
        text = self.start(task_id)
        self.episode = EpisodeState(task_id, self.max_steps(task_id))
        return text

    def step(self, action: str) -> StepResult:
        ep = self.episode
        if ep is None:
            raise RuntimeError(f"{self.name}: step() before reset()")
        if ep.done:
            return StepResult(EPISODE_OVER, ep.reward, True, ep.success, valid=False)
        ep.history.append(action)
        outcome = self.act(action)
        if outcome.reward is not None:
            ep.reward = outcome.reward
        if outcome.success is not None:
            ep.success = outcome.success
        ep.done = outcome.ends or len(ep.history) >= ep.step_cap
        return StepResult(outcome.observation, ep.reward, ep.done, ep.success, outcome.valid)

    @contextlib.contextmanager
    def episode_kept(self) -> Iterator[None]:
        """Run engine work that disturbs the running episode (computing an expert), then restore it.

        The episode is set aside meanwhile (``self.episode`` is None) and
        brought back by reset + replay of its actions, the way branching
        restores any state.
        """
        ongoing, self.episode = self.episode, None
        try:
            yield
        finally:
            if ongoing is not None:
                self.replay(ongoing.task_id, ongoing.history)
