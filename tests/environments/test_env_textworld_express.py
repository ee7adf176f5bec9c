"""The built-in TextWorldExpress environment, against the real TWX JVM.

One module-scoped instance (one JVM) serves most tests: a JVM start costs
~0.5 s, a reset ~3 ms.
"""

from __future__ import annotations

import re

import pytest
from jvm_processes import alive, java_children

pytest.importorskip("textworld_express")

from sand_builtins.environments import textworld_express_thoughts as thoughts  # noqa: E402
from sand_builtins.environments.textworld_express import TaskId, TextWorldExpressEnv  # noqa: E402

from sand_framework.engine.expert import expert_trajectory  # noqa: E402

from sand_framework.errors import ReplayMismatch  # noqa: E402
from sand_framework.plugins import load_plugins  # noqa: E402
from sand_framework.testing.conformance import assert_conforms  # noqa: E402
from sand_framework.types import StepResult  # noqa: E402

SMALL = TextWorldExpressEnv.Params(n_train=20, n_seen=5, n_unseen=5)


@pytest.fixture(scope="module")
def env():
    e = TextWorldExpressEnv(SMALL)
    yield e
    e.close()


def _java_pid(e: TextWorldExpressEnv) -> int:
    return e._twx._gateway.java_process.pid


def test_registered_as_builtin():
    regs = load_plugins().registries()
    assert regs["environment"].get("textworld_express") is TextWorldExpressEnv


def test_conforms(env):
    assert_conforms(env, limit=2)


def test_task_id_round_trip(env):
    for split in env.splits():
        for tid in env.tasks(split):
            assert str(TaskId.parse(tid)) == tid
    tid = TaskId.parse("coin: numLocations=4, includeDoors=0 :test:20003")
    assert tid == TaskId("coin", "numLocations=4,includeDoors=0", "test", 20003)
    assert str(TaskId.parse("coin::dev:10001")) == "coin::dev:10001"


@pytest.mark.parametrize(
    "bad, words",
    [
        ("coin:train:17", "4"),
        ("chess:numLocations=4:train:17", "unknown game"),
        ("coin:numLocations=4:valid:17", "unknown fold"),
        ("coin:numLocations=4:train:-3", "not a non-negative integer"),
        ("coin:numLocations=4:train:seventeen", "not a non-negative integer"),
        ("coin:numLocations:train:17", "key=value"),
        ("coin:a=1:b=2:train:17", "fields"),
    ],
)
def test_bad_task_ids(env, bad, words):
    with pytest.raises(ValueError, match=words):
        env.reset(bad)
    with pytest.raises(ValueError):
        env.max_steps(bad)


def test_seed_outside_fold_and_unknown_property(env):
    with pytest.raises(ValueError, match="not in coin's train fold"):
        env.reset("coin:numLocations=4:train:20000")
    with pytest.raises(ValueError, match="bogus"):
        env.reset("coin:bogus=1:train:1")
    env.reset(env.tasks("train")[0])  # the instance still works afterwards


def test_splits_disjoint_and_deterministic(env, monkeypatch):
    splits = {s: env.tasks(s) for s in env.splits()}
    assert [len(splits[s]) for s in ("train", "seen", "unseen")] == [20, 5, 5]
    assert not set(splits["train"]) & set(splits["seen"])
    assert not (set(splits["train"]) | set(splits["seen"])) & set(splits["unseen"])
    assert {TaskId.parse(t).fold for t in splits["unseen"]} == {"test"}
    assert {s: env.tasks(s) for s in env.splits()} == splits
    # "seen" does not move when n_train changes (a training-size ablation keeps its eval set).
    monkeypatch.setattr(env.params, "n_train", 100)
    assert env.tasks("seen") == splits["seen"] and env.tasks("train")[:20] == splits["train"]
    monkeypatch.setattr(env.params, "n_train", 996)
    with pytest.raises(ValueError, match="exceeds"):
        env.tasks("train")
    with pytest.raises(ValueError, match="unknown split"):
        env.tasks("valid")


def test_expert_is_short_and_succeeds(env):
    tid = env.tasks("train")[0]
    actions = env.expert_actions(tid)
    assert actions[0] != "look around"  # the reset observation already is the look
    assert len(actions) <= env.max_steps(tid)
    results = env.replay(tid, actions)
    assert results[-1].success and results[-1].reward == 1.0 and results[-1].done


def test_expert_actions_keep_episode(env):
    tasks = env.tasks("train")
    env.reset(tasks[1])
    first = env.step("look around")
    env.expert_actions(tasks[3])  # uses the same JVM: the episode must be restored
    assert env.step("look around").observation == first.observation


def test_replay_mismatch(env):
    tid = env.tasks("seen")[0]
    actions = env.expert_actions(tid)
    obs = [r.observation for r in env.replay(tid, actions)]
    env.replay(tid, actions, expected=obs)
    with pytest.raises(ReplayMismatch, match="diverged at step 0"):
        env.replay(tid, actions, expected=["You are on the moon."] + obs[1:])


def test_invalid_actions(env):
    tid = env.tasks("train")[2]
    env.reset(tid)
    for junk in ("xyzzy ###", "", "x" * 5000, "\x00\n", "take unicorn"):
        res = env.step(junk)
        assert isinstance(res, StepResult)
        assert res.valid is False and res.reward == 0.0 and "Unknown action" in res.observation
    res = env.step("Look Around.")  # case and trailing period are normalized
    assert res.valid is True


def test_max_steps_ends_episode(env):
    tid = env.tasks("train")[0]
    env.reset(tid)
    results = [env.step("inventory") for _ in range(env.max_steps(tid))]
    assert [r.done for r in results] == [False] * (len(results) - 1) + [True]
    after = env.step("inventory")
    assert after.done and not after.valid


def test_show_valid_actions(env, monkeypatch):
    monkeypatch.setattr(env.params, "show_valid_actions", True)
    text = env.reset(env.tasks("train")[0])
    assert "\nValid actions: " in text and "look around" in text


def test_clone_is_independent_and_close_leaves_no_java(env):
    before = set(java_children())
    tasks = env.tasks("train")
    start = env.reset(tasks[0])
    clone = env.clone()
    assert clone.params == env.params and clone.params is not env.params
    clone.reset(tasks[1])
    for a in clone.expert_actions(tasks[1]):
        clone.step(a)
    assert env.step("look around").observation in start  # the original's episode is untouched
    pid = _java_pid(clone)
    assert pid != _java_pid(env)  # a clone has its own JVM
    clone.close()
    clone.close()  # idempotent
    assert not alive(pid)
    assert set(java_children()) <= before


# ------------------------------------------------------------------ expert thoughts


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z][a-z'-]*", text.lower()))


def _assert_grounded(traj) -> None:
    """Every step has one short thought made of the templates' words and words the agent has already seen
    (task, earlier observations, the action): no room, object or fact from later observations."""
    for i, step in enumerate(traj.steps):
        known = "\n".join([traj.task, *(s.observation for s in traj.steps[:i]), step.action])
        assert step.thought, (traj.task_id, i, step.action)
        assert len(step.thought.split()) <= 25 and step.thought.count(".") == 1, step.thought
        assert '"' not in step.thought  # never counted as a deliberation (quoted candidate actions)
        leaked = _words(step.thought) - _words(known) - thoughts.TEMPLATE_WORDS
        assert not leaked, (traj.task_id, i, step.thought, leaked)


def test_coin_expert_thoughts_never_reveal_the_coin_early():
    env = TextWorldExpressEnv(TextWorldExpressEnv.Params(n_train=30, n_seen=1, n_unseen=10))
    doors = TextWorldExpressEnv(TextWorldExpressEnv.Params(game_params="numLocations=6,includeDoors=1",
                                                           n_train=10, n_seen=1, n_unseen=1, max_steps=40))
    try:
        trajs = [expert_trajectory(e, t) for e, split in ((env, "train"), (env, "unseen"), (doors, "train"))
                 for t in e.tasks(split)]
    finally:
        env.close()
        doors.close()
    assert all(t.success for t in trajs)
    moves = 0
    for t in trajs:
        _assert_grounded(t)
        for i, step in enumerate(t.steps):
            # the room the agent stands in: its latest "You are in ..." text
            room = [o for o in [t.task, *(s.observation for s in t.steps[:i])] if "You are in" in o][-1]
            if re.search(r"\bcoin\b", room.split("You are in", 1)[1]):
                assert step.action == "take coin" and "see the coin here" in step.thought
            else:  # coin not in view: the thought only says it is not here
                moves += 1
                assert "no coin in the" in step.thought and "see the coin" not in step.thought, step.thought
    assert moves > 20  # the check above ran on many steps before the coin was seen


def test_expert_thought_uses_only_what_it_is_given(env):
    """Same seen text, another game's task id: same thought (nothing is looked up from the task id)."""
    a, b = env.tasks("train")[:2]
    traj = expert_trajectory(env, a)
    for i, step in enumerate(traj.steps):
        assert env.expert_thought(b, traj.task, traj.steps[:i], step.action) == step.thought


@pytest.mark.parametrize("game_params", ["numLocations=1,numItemsToPutAway=2", "numLocations=2,numItemsToPutAway=2",
                                         "numLocations=2,numItemsToPutAway=1,includeDoors=0", ""])  # 3rd: repro2
def test_twc_expert_thoughts(game_params):
    env = TextWorldExpressEnv(TextWorldExpressEnv.Params(game="twc", game_params=game_params, n_train=12, n_seen=1,
                                                         n_unseen=8, max_steps=40))
    try:
        trajs = [expert_trajectory(env, t) for split in ("train", "unseen") for t in env.tasks(split)]
    finally:
        env.close()
    assert all(t.success for t in trajs)
    for t in trajs:
        _assert_grounded(t)
        for step in t.steps:
            if m := re.fullmatch(r"put (.+) in (.+)", step.action):
                assert f"The {m.group(1)} usually go" in step.thought and m.group(2) in step.thought
            elif m := re.fullmatch(r"take (.+)", step.action):
                assert f"The {m.group(1)}" in step.thought and "out of place" in step.thought


def test_expert_thoughts_false_keeps_the_old_empty_thoughts():
    on = TextWorldExpressEnv(TextWorldExpressEnv.Params(n_train=5, n_seen=1, n_unseen=1))
    off = TextWorldExpressEnv(TextWorldExpressEnv.Params(n_train=5, n_seen=1, n_unseen=1, expert_thoughts=False))
    try:
        for tid in on.tasks("train"):
            with_thoughts, without = expert_trajectory(on, tid), expert_trajectory(off, tid)
            assert all(s.thought == "" for s in without.steps)
            assert all(s.thought for s in with_thoughts.steps)
            assert [s.action for s in without.steps] == [s.action for s in with_thoughts.steps]
    finally:
        on.close()
        off.close()


@pytest.mark.parametrize("game", ["cookingworld", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder"])
def test_other_games_get_thoughts(game):
    """Games without their own templates still get a grounded thought for every gold action."""
    env = TextWorldExpressEnv(TextWorldExpressEnv.Params(game=game, game_params="", n_train=3, n_seen=1, n_unseen=1,
                                                         max_steps=60))
    try:
        for tid in env.tasks("train"):
            _assert_grounded(expert_trajectory(env, tid))
    finally:
        env.close()
