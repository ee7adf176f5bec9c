"""Metric definitions on hand-made trajectories (sand_framework.metrics)."""

from __future__ import annotations

import pytest

from sand_framework.components import TaskResult
from sand_framework.metrics import (
    aggregate_results,
    by_band,
    difficulty_bands,
    percentile_ranks,
    step_deliberation_rate,
    step_profile,
    token_ratio,
    tokens_per_task,
    trajectory_deliberation_rate,
    mean_trajectory_deliberation_rate,
)
from sand_framework.types import Step, Trajectory


def result(task: str, flags: list[bool], reward: float = 0.0, success: bool = False, prompt: int = 0,
           completion: int = 0, invalid: int = 0) -> TaskResult:
    steps = [Step(thought="t", action="a", deliberated=f) for f in flags]
    traj = Trajectory(task_id=task, env="e", instruction="", task="", steps=steps, reward=reward, success=success,
                      meta={"invalid_actions": invalid})
    return TaskResult(traj, prompt, completion)


@pytest.fixture
def split():
    return [
        result("a", [True, False, False, True], reward=1.0, success=True, prompt=100, completion=40),
        result("b", [False, False], reward=0.5, prompt=50, completion=10, invalid=1),
        result("c", [], reward=0.0, prompt=10, completion=0),
    ]


def test_average_reward_and_success(split):
    m = aggregate_results(split)
    assert m["tasks"] == 3
    assert m["avg_reward"] == 50.0            # (1 + 0.5 + 0) / 3 * 100
    assert m["success_rate"] == pytest.approx(33.33)
    assert m["avg_steps"] == 2.0
    assert m["invalid_actions_per_task"] == pytest.approx(0.33)


def test_deliberation_rate_per_step_pools_steps(split):
    assert step_deliberation_rate(split) == pytest.approx(2 / 6)
    assert aggregate_results(split)["deliberation_rate_step"] == pytest.approx(0.3333)


def test_deliberation_rate_per_trajectory_averages_episodes(split):
    assert [trajectory_deliberation_rate(r.trajectory) for r in split] == [0.5, 0.0, 0.0]
    assert mean_trajectory_deliberation_rate(split) == pytest.approx(1 / 6)
    assert aggregate_results(split)["deliberation_rate_traj"] == pytest.approx(0.1667)


def test_tokens_per_task_and_ratio(split):
    assert tokens_per_task(split) == pytest.approx(50 / 3)          # generated tokens
    assert tokens_per_task(split, "prompt") == pytest.approx(160 / 3)
    assert tokens_per_task(split, "total") == pytest.approx(210 / 3)
    m = aggregate_results(split)
    assert m["completion_tokens_per_task"] == 16.7 and m["total_tokens_per_task"] == 70.0
    assert token_ratio(30.0, 20.0) == 1.5
    assert token_ratio(30.0, 0) is None and token_ratio(None, 3.0) is None


def test_empty_split():
    assert aggregate_results([]) == {"tasks": 0}
    assert step_deliberation_rate([]) == 0.0 and mean_trajectory_deliberation_rate([]) == 0.0


def test_difficulty_bands_are_terciles_without_ties():
    rewards = {f"t{i}": i / 10 for i in range(9)}
    bands = difficulty_bands(rewards)
    assert [bands[f"t{i}"] for i in range(9)] == ["hard"] * 3 + ["medium"] * 3 + ["easy"] * 3


def test_difficulty_bands_keep_ties_together_and_ignore_order():
    rewards = {"a": 0.0, "b": 0.0, "c": 0.2, "d": 0.2, "e": 0.2, "f": 1.0}
    ranks = percentile_ranks(rewards)
    assert ranks["a"] == pytest.approx(1 / 6) and ranks["c"] == pytest.approx(3.5 / 6)
    bands = difficulty_bands(rewards)
    assert bands == {"a": "hard", "b": "hard", "c": "medium", "d": "medium", "e": "medium", "f": "easy"}
    assert difficulty_bands(dict(reversed(list(rewards.items())))) == bands


def test_difficulty_bands_degenerate_cases():
    assert set(difficulty_bands({"a": 0.0, "b": 0.0, "c": 0.0}).values()) == {"medium"}
    binary = {f"f{i}": 0.0 for i in range(7)} | {f"s{i}": 1.0 for i in range(3)}
    bands = difficulty_bands(binary)  # failures: rank 0.35 -> medium; successes: 0.85 -> easy
    assert {bands[k] for k in binary if k.startswith("f")} == {"medium"}
    assert {bands[k] for k in binary if k.startswith("s")} == {"easy"}
    assert difficulty_bands({}) == {}


def test_by_band_groups_results(split):
    bands = difficulty_bands({"a": 1.0, "b": 0.5, "c": 0.0})
    groups = by_band([(r.trajectory.task_id, r) for r in split] + [("zzz", split[0])], bands)
    assert [r.trajectory.task_id for r in groups["hard"]] == ["c"]
    assert [r.trajectory.task_id for r in groups["medium"]] == ["b"]
    assert [r.trajectory.task_id for r in groups["easy"]] == ["a"]


def test_step_profile(split):
    prof = step_profile(split)
    assert [p["step"] for p in prof] == [1, 2, 3, 4]
    assert [p["reached"] for p in prof] == [2, 2, 1, 1]
    assert [p["deliberation_rate"] for p in prof] == [0.5, 0.0, 0.0, 1.0]
    assert [p["ended"] for p in prof] == [0, 1, 0, 1]
    assert [p["avg_reward"] for p in prof] == [None, 50.0, None, 100.0]


def test_evaluator_uses_the_core_definition(split):
    from sand_builtins.evaluators import GreedyEvaluator

    assert GreedyEvaluator().aggregate(split) == aggregate_results(split)
