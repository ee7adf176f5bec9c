"""The text-environment base's templates: the rules every built-in environment's ``step()`` shares."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sand_framework.components.text_environment import EPISODE_OVER, Outcome, TextEnvironment


class Counter(TextEnvironment):
    """Count to a task's target with ``add``; anything else is invalid. The engine is a plain int."""

    name = "counter"

    @dataclass
    class Params:
        max_steps: int = 4

    def __init__(self, params=None):
        super().__init__(params)
        self.value = 0
        self.engine_calls = 0

    def tasks(self, split):
        return ["count:2", "count:3"]

    def instruction(self):
        return "Say add."

    def max_steps(self, task_id):
        return self.params.max_steps

    def start(self, task_id):
        if not task_id.startswith("count:"):
            raise ValueError(f"bad task id {task_id!r}")
        self.value = 0
        return f"Count to {task_id.split(':')[1]}."

    def act(self, action):
        if action != "add":
            return Outcome("Unknown action.", valid=False)
        self.engine_calls += 1
        self.value += 1
        target = int(self.episode.task_id.split(":")[1])
        return Outcome(f"Now {self.value}.", True, self.value / target, self.value >= target, ends=self.value >= target)


def test_step_before_reset_and_after_a_failed_reset():
    env = Counter()
    with pytest.raises(RuntimeError, match="counter: step\\(\\) before reset"):
        env.step("add")
    env.reset("count:3")
    env.step("add")
    with pytest.raises(ValueError):
        env.reset("nonsense")
    with pytest.raises(RuntimeError, match="before reset"):  # the old episode is gone, not continued
        env.step("add")


def test_success_ends_and_later_steps_never_reach_the_engine():
    env = Counter()
    env.reset("count:2")
    assert env.step("add").reward == 0.5
    last = env.step("add")
    assert last.done and last.success and last.reward == 1.0
    calls = env.engine_calls
    after = env.step("add")
    assert (after.observation, after.reward, after.done, after.success, after.valid) == (EPISODE_OVER, 1.0, True,
                                                                                       True, False)
    assert env.engine_calls == calls


def test_invalid_actions_count_against_the_cap_and_keep_the_reward():
    env = Counter(Counter.Params(max_steps=3))
    env.reset("count:3")
    env.step("add")
    invalid = env.step("jump")
    assert not invalid.valid and not invalid.done and invalid.reward == pytest.approx(1 / 3)
    capped = env.step("jump")
    assert capped.done and not capped.success and capped.reward == pytest.approx(1 / 3)
    assert env.episode.history == ["add", "jump", "jump"]


def test_episode_kept_restores_the_running_episode():
    env = Counter()
    env.reset("count:3")
    env.step("add")
    env.step("jump")
    with env.episode_kept():
        assert env.episode is None
        env.start("count:2")  # engine work that disturbs the state
        env.value = 99
    assert env.episode.task_id == "count:3" and env.episode.history == ["add", "jump"]
    assert env.value == 1 and env.step("add").observation == "Now 2."


def test_episode_kept_without_an_episode_leaves_none():
    env = Counter()
    with env.episode_kept():
        pass
    assert env.episode is None
