"""The light-switch environment: SAND's conformance suite plus puzzle-specific checks."""

from __future__ import annotations

import pytest

from sand_example.lights import COLOURS, LightSwitchesEnv, make_panel, parse_task_id, solve
from sand_framework.testing.conformance import assert_conforms, check_environment


@pytest.fixture
def env():
    e = LightSwitchesEnv()
    yield e
    e.close()


def test_conforms(env):
    assert_conforms(env)


def test_conforms_on_many_tasks_of_every_split(env):
    assert check_environment(env, limit=25) == []


def test_conforms_with_other_params():
    assert_conforms(LightSwitchesEnv(LightSwitchesEnv.Params(min_lights=2, max_lights=6, unseen_lights=8,
                                                             n_train=5, n_seen=3, n_unseen=3, max_steps=8)))


def test_splits_are_disjoint_deterministic_and_stable(env):
    train, seen, unseen = (env.tasks(s) for s in ("train", "seen", "unseen"))
    assert len(train) == 100 and len(seen) == 20 and len(unseen) == 20
    assert not set(train) & set(seen) and not set(train) & set(unseen) and not set(seen) & set(unseen)
    assert LightSwitchesEnv().tasks("train") == train
    # The seen split does not move when the training set grows (ablations keep their eval set).
    bigger = LightSwitchesEnv(LightSwitchesEnv.Params(n_train=500))
    assert bigger.tasks("seen") == seen and bigger.tasks("train")[:100] == train
    assert {parse_task_id(t)[0] for t in unseen} == {5}
    assert {parse_task_id(t)[0] for t in train} == {3, 4}
    with pytest.raises(ValueError, match="unknown split"):
        env.tasks("test")


def test_panels_are_pure_functions_of_the_task_id():
    assert make_panel(4, 17) == make_panel.__wrapped__(4, 17)
    # Pinned: a change in generation would silently change every task id's meaning.
    p = make_panel(3, 0)
    assert p.wiring == ((0,), (1, 2), (2,)) and p.initial == (False, True, False)


@pytest.mark.parametrize("n", range(2, len(COLOURS) + 1))
def test_expert_solves_every_panel_minimally(n):
    for seed in range(200):
        panel = make_panel(n, seed)
        presses = solve(panel)
        assert 1 <= len(presses) <= n and presses == sorted(set(presses))


def test_reward_is_progress_from_the_start(env):
    env.reset("lights:3:0")  # red off, green on, blue off; switch 2 toggles green and blue
    assert env.step("look").reward == 0.0
    res = env.step("press switch 2")  # green off, blue on: one gained, one lost
    assert res.reward == 0.0 and res.valid and not res.done
    res = env.step("press switch 1")
    assert res.reward == 0.5
    env.step("press switch 2")
    res = env.step("press switch 3")
    assert res.reward == 1.0 and res.success and res.done
    assert "solved" in res.observation


def test_aliases_normalize_to_one_action(env):
    forms = ["press switch 2", "Press 2.", "flip switch #2", "  TOGGLE the switch 2 ", "push switch 02"]
    assert {env.normalize_action(f) for f in forms} == {"press switch 2"}
    assert env.normalize_action("Look around") == "look"
    env.reset("lights:3:0")
    assert env.step("Flip switch #1.").valid


def test_invalid_actions_and_step_cap(env):
    env.reset("lights:3:0")
    assert not env.step("press switch 9").valid
    assert not env.step("open the door").valid
    for _ in range(env.params.max_steps - 3):
        assert not env.step("look").done
    last = env.step("look")
    assert last.done and not last.success
    after = env.step("press switch 1")
    assert after.done and not after.valid and after.observation == "The episode is over."


def test_step_before_reset_and_bad_ids(env):
    with pytest.raises(RuntimeError):
        env.step("look")
    for bad in ["lights:4", "lights:1:3", "lights:99:3", "coin::train:1", "lights:x:1"]:
        with pytest.raises(ValueError, match="bad task id"):
            env.reset(bad)
    with pytest.raises(ValueError):
        env.max_steps("nope")


@pytest.mark.parametrize("bad, match", [
    ({"min_lights": 1}, "min_lights"),
    ({"unseen_lights": 9}, "unseen_lights"),
    ({"min_lights": 4, "max_lights": 3}, "must be <= max_lights"),
    ({"n_train": -1}, "n_train"),
    ({"max_steps": 4, "unseen_lights": 5}, "max_steps"),
])
def test_params_are_validated(bad, match):
    with pytest.raises(ValueError, match=match):
        LightSwitchesEnv.Params(**bad)
