"""The conformance suite itself: it passes a correct toy environment and names each defect of broken ones."""

from __future__ import annotations

import itertools

import pytest

from sand_framework.testing.conformance import assert_conforms, check_environment
from toy_envs import Corridor


class RewardFive(Corridor):
    def _reward(self):
        return 5.0


_counter = itertools.count()


class NonReproducible(Corridor):
    """Observations carry a global counter, so a replay never matches the recording."""

    def _observe(self, text):
        return f"{text} (tick {next(_counter)})"


class CrashesOnJunk(Corridor):
    def step(self, action):
        if not action or len(action) > 100:
            raise KeyError(action)
        return super().step(action)


class SharedClone(Corridor):
    """clone() shares the episode state with the original."""

    def clone(self):
        other = SharedClone()
        other.state = self.state
        return other

    def reset(self, task_id):  # mutate in place so the shared dict stays shared
        self.state.clear()
        self.state.update({"task": task_id, "pos": 0, "done": False, "steps": 0})
        return f"Task: take the coin.\nObservation: room 0 of {task_id}"


class BadExpert(Corridor):
    def expert_actions(self, task_id):
        return ["go east"]


class LeakySplits(Corridor):
    def tasks(self, split):
        return [] if split == "unseen" else ["corridor-0", "corridor-1"]


def _has(failures, check, text=""):
    return any(f.startswith(check + ":") and text in f for f in failures)


def test_correct_environment_conforms():
    assert check_environment(Corridor()) == []
    assert_conforms(Corridor(), limit=1)


def test_reward_out_of_range():
    failures = check_environment(RewardFive())
    assert _has(failures, "step", "reward = 5.0 is not a number in [0, 1]")
    with pytest.raises(AssertionError, match="reward = 5.0"):
        assert_conforms(RewardFive())


def test_non_reproducible_replay():
    failures = check_environment(NonReproducible(), limit=1)
    assert _has(failures, "branching", "ReplayMismatch")
    assert _has(failures, "clone", "observes something different")


def test_crash_on_garbage_action():
    failures = check_environment(CrashesOnJunk(), limit=1)
    assert _has(failures, "garbage action", "step('') raised KeyError")
    assert _has(failures, "garbage action", "step('xxxxxxxxxxxxxxxxxxxx'...) raised KeyError")
    assert not _has(failures, "expert")


def test_clone_sharing_state():
    failures = check_environment(SharedClone(), limit=1)
    assert _has(failures, "clone", "changed the original's episode")


def test_expert_that_does_not_succeed():
    failures = check_environment(BadExpert(), limit=1)
    assert _has(failures, "expert", "did not succeed")


def test_empty_and_overlapping_splits():
    failures = check_environment(LeakySplits(), limit=1)
    assert _has(failures, "tasks[unseen]", "has no tasks")
    assert _has(failures, "splits disjoint", "'seen' are also in 'train'")


def test_explicit_split_tasks_and_every_failure_listed():
    failures = check_environment(RewardFive(), {"train": ["corridor-0"], "seen": []})
    assert _has(failures, "tasks[seen]", "has no tasks")
    assert _has(failures, "step", "reward = 5.0")
    with pytest.raises(AssertionError) as info:
        assert_conforms(RewardFive(), split_tasks={"train": ["corridor-0"], "seen": []})
    assert str(len(failures)) + " conformance check(s)" in str(info.value)
