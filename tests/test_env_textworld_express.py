"""The built-in TextWorldExpress environment, against the real TWX JVM.

One module-scoped instance (one JVM) serves most tests: a JVM start costs
~0.5 s, a reset ~3 ms.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("textworld_express")

from sand_builtins.environments.textworld_express import TaskId, TextWorldExpressEnv  # noqa: E402

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


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, i.e. exited but unreaped, counts as alive: it leaked)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _java_children() -> list[int]:
    """Java processes whose parent is this test process (other workers' JVMs are not ours)."""
    me, found = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == me and comm == "java":
            found.append(int(d))
    return found


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
    before = set(_java_children())
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
    assert not _alive(pid)
    assert set(_java_children()) <= before
