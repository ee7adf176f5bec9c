"""The built-in ScienceWorld environment, against the real ScienceWorld JVM.

One module-scoped instance (one JVM, ~1.5 s to start) serves most tests; a
task load costs ~0.3 s and a raw step ~10 ms. The tasks used are the ones with
ETO's smallest step caps (lifespan: 10, find-animal / mix secondary paint: 15).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from importlib import resources

import pytest
from jvm_processes import alive, java_children

from sand_framework.errors import EnvironmentUnavailable

from sand_builtins.environments.scienceworld import (  # noqa: E402  (the module imports without the package)
    ScienceWorldEnv,
    ScoreBook,
    episode_reward,
    make_task_id,
    parse_task_id,
    split_pairs,
)

HAVE_SW = True
try:
    import scienceworld  # noqa: F401
except ImportError:
    HAVE_SW = False
needs_sw = pytest.mark.skipif(not HAVE_SW, reason="scienceworld not installed (pip install 'sand-framework[scienceworld]')")

LIFESPAN = "20_0"  # task-6-lifespan-(longest-lived), cap 10
FIND_ANIMAL = "11_0"  # task-3-find-animal, cap 15
PAINT = "18_0"  # task-5-chemistry-mix-paint-(secondary-color), cap 15


@pytest.fixture(scope="module")
def env():
    e = ScienceWorldEnv()
    yield e
    e.close()


# ---------------------------------------------------------------- no JVM needed


def test_package_data_ships_with_the_plugin():
    root = resources.files("sand_builtins.environments").joinpath("data", "sciworld")
    names = {p.name for p in root.iterdir()}
    assert {"train_indices.json", "dev_indices.json", "test_indices.json", "max_steps.json",
            "taskname2id.json", "PROVENANCE.md"} <= names
    assert "Apache-2.0" in root.joinpath("PROVENANCE.md").read_text()


def test_splits_match_eto():
    e = ScienceWorldEnv()  # no JVM is started for task lists
    sizes = {s: len(e.tasks(s)) for s in e.splits()}
    assert sizes == {"train": 1483, "seen": 194, "unseen": 211}
    root = resources.files("sand_builtins.environments").joinpath("data", "sciworld")
    ids = json.loads(root.joinpath("taskname2id.json").read_text())
    dev = json.loads(root.joinpath("dev_indices.json").read_text())
    assert e.tasks("seen") == [f"{ids[n]}_{v}" for n, v in dev]  # ETO's own id formula, same order
    for split in e.splits():
        assert len(set(e.tasks(split))) == len(e.tasks(split))
    assert not set(e.tasks("unseen")) & (set(e.tasks("train")) | set(e.tasks("seen")))
    assert len(set(e.tasks("seen")) & set(e.tasks("train"))) == 54  # ETO's data, kept as is
    assert e._server.sw is None


def test_task_ids_and_caps():
    e = ScienceWorldEnv()
    assert parse_task_id("0_12") == ("task-1-boil", 12)
    assert make_task_id("task-1-boil", 12) == "0_12"
    for split in ("train", "seen", "unseen"):
        for name, var in split_pairs(split)[:50]:
            assert parse_task_id(make_task_id(name, var)) == (name, var)
    assert e.task_id_from_eto(" 13_007") == "13_7" and e.task_id_from_eto("0_12") == "0_12"
    with pytest.raises(ValueError):
        e.task_id_from_eto("5_1")
    assert e.max_steps("0_12") == 100
    assert e.max_steps(LIFESPAN) == 10
    assert e.max_steps("25_0") == 100  # inclined plane: in the id map, no ETO cap
    assert ScienceWorldEnv(ScienceWorldEnv.Params(max_steps=7)).max_steps("0_1") == 7
    for bad in ("5_0", "boil_3", "0-3", "0_", "_3", "0_x", "99_1"):
        with pytest.raises(ValueError, match="bad task id"):
            e.max_steps(bad)
    with pytest.raises(ValueError, match="unknown split"):
        e.tasks("valid")


@pytest.mark.parametrize(
    "scores, expected",
    [
        ([], (0.0, False, False)),
        ([0, 8, 25, 25, 17, 33], (0.33, False, False)),  # the maximum counts, not the last score
        ([10, 50, 42], (0.5, False, False)),
        ([10, 50, -100], (0.0, True, False)),  # a failed task ends with reward 0
        ([10, 100], (1.0, True, True)),
        ([100, -100], (1.0, True, True)),  # nothing after success counts
        ([-100, 50], (0.0, True, False)),
        ([250], (1.0, True, True)),  # clipped
    ],
)
def test_reward_bookkeeping(scores, expected):
    reward, done, success = episode_reward(scores)
    assert (round(reward, 6), done, success) == expected


def test_reward_keep_max_on_failure():
    assert episode_reward([10, 50, -100], keep_max_on_failure=True) == (0.5, True, False)
    book = ScoreBook()
    for s in (0, 20, 75, 40):
        book.add(s)
        assert 0.0 <= book.reward <= 1.0
    assert book.reward == 0.75 and not book.done


def test_missing_package_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "scienceworld", None)  # import scienceworld -> ImportError
    e = ScienceWorldEnv()
    with pytest.raises(EnvironmentUnavailable) as info:
        e.reset(LIFESPAN)
    msg = str(info.value)
    assert "pip install 'sand-framework[scienceworld]'" in msg and "Java" in msg
    assert e.tasks("seen")  # task lists still work without the package
    e.close()


# ---------------------------------------------------------------- real JVM


@needs_sw
def test_registered_as_builtin():
    from sand_framework.plugins import load_plugins

    regs = load_plugins().registries()
    assert regs["environment"].get("scienceworld") is ScienceWorldEnv


@needs_sw
def test_conforms(env):
    from sand_framework.testing.conformance import assert_conforms

    # seen and train overlap in ETO's files, so the splits are given explicitly (short tasks only).
    assert_conforms(env, split_tasks={"seen": [LIFESPAN], "unseen": [FIND_ANIMAL]}, limit=1)
    assert java_children() == [env.java_pid]  # the clone's JVM is gone


@needs_sw
@pytest.mark.slow
def test_conforms_more_tasks(env):
    """Tasks with same-named objects (three wood cups), an electrical task and a long one (boil)."""
    from sand_framework.testing.conformance import assert_conforms

    assert_conforms(env, split_tasks={"train": [PAINT, "7_0", "0_0"]}, limit=3)


def test_canonical_listing_orders_same_named_objects():
    from sand_builtins.environments.scienceworld import canonical_listing

    a = ("This room is called the art studio. In it, you see: \n\tthe agent\n\ta substance called air\n"
         "\ta large cupboard. In the large cupboard is: a drawer, a wood cup (containing yellow paint), "
         "a wood cup (containing blue paint).\n\ta wood cup (containing yellow paint)\n"
         "\ta wood cup (containing red paint)\nYou also see:\n\tA door to the hallway (that is open)")
    b = a.replace("(containing yellow paint)\n\ta wood cup (containing red paint)",
                  "(containing red paint)\n\ta wood cup (containing yellow paint)").replace(
        "a wood cup (containing yellow paint), a wood cup (containing blue paint)",
        "a wood cup (containing blue paint), a wood cup (containing yellow paint)")
    assert a != b and canonical_listing(a) == canonical_listing(b)
    assert canonical_listing(a).index("the agent") < canonical_listing(a).index("air")  # ScienceWorld's order kept
    plain = "You pour the contents of the wood cup into the glass cup."
    assert canonical_listing(plain) == plain


@needs_sw
def test_reset_text_and_instruction(env, monkeypatch):
    text = env.reset(LIFESPAN)
    assert text.startswith("Task Description:\nYour task is to")  # ScienceWorld's (and ETO's) taskDesc
    assert "This room is called" in text  # the first look around follows the task description
    assert "teleport to LOC" in env.instruction() and "Thought:" in env.instruction()
    monkeypatch.setattr(env.params, "initial_look", False)
    bare = env.reset(LIFESPAN)
    assert "This room is called" not in bare and text.startswith(bare)


@needs_sw
def test_expert_succeeds_within_cap(env):
    for tid in (LIFESPAN, FIND_ANIMAL, PAINT):
        actions = env.expert_actions(tid)
        assert 0 < len(actions) <= env.max_steps(tid)
        results = env.replay(tid, actions)
        assert results[-1].success and results[-1].done and results[-1].reward == 1.0
        rewards = [r.reward for r in results]
        assert rewards == sorted(rewards)  # max-score bookkeeping never decreases


@needs_sw
def test_out_of_range_variation(env):
    with pytest.raises(ValueError, match="variations 0.."):
        env.reset("0_99999")  # ScienceWorld itself would silently load something
    assert env.reset(LIFESPAN)


@needs_sw
def test_expert_actions_keep_episode(env):
    env.reset(PAINT)
    first = env.step("look around")
    env.expert_actions("20_1")  # loads another task with a gold path in the same JVM
    assert env.step("look around").observation == first.observation


@needs_sw
def test_invalid_actions_do_not_crash(env):
    env.reset(FIND_ANIMAL)
    for junk in ("xyzzy ###", "", "x" * 5000, "\x00\n\t}{", "Action: Action:", "focus on", "0", "999"):
        res = env.step(junk)
        assert isinstance(res.observation, str) and 0.0 <= res.reward <= 1.0
    res = env.step("xyzzy plugh")
    assert not res.valid
    # the episode is still usable: the expert still succeeds afterwards
    actions = env.expert_actions(FIND_ANIMAL)
    assert env.replay(FIND_ANIMAL, actions)[-1].success


@needs_sw
def test_invalid_streak_ends_episode(env, monkeypatch):
    monkeypatch.setattr(env.params, "max_invalid_streak", 3)
    e = env
    e.reset(FIND_ANIMAL)
    assert not e.step("xyzzy").done
    assert e.step("look around").valid  # a valid action resets the streak
    assert [e.step("xyzzy").done for _ in range(3)] == [False, False, True]
    assert e.step("look around").observation == "The episode is over."


@needs_sw
def test_step_cap(env):
    env.reset(LIFESPAN)  # cap 10
    results = [env.step("look around") for _ in range(10)]
    assert [r.done for r in results] == [False] * 9 + [True]
    assert not results[-1].success


@needs_sw
def test_negative_score_ends_episode_live(env, monkeypatch):
    """Focusing on the wrong object fails a ScienceWorld task (score -100): done, reward 0."""
    tid = FIND_ANIMAL
    gold = env.expert_actions(tid)
    env.reset(tid)
    # Walk the gold path up to (not including) its focus, collecting some score on the way.
    focus_at = next(i for i, a in enumerate(gold) if a.startswith("focus on"))
    for a in gold[:focus_at]:
        env.step(a)
    before = env.step("look around")
    res = env.step("focus on agent")
    if res.observation.startswith("Ambiguous"):
        res = env.step("0")
    assert res.done and not res.success and res.reward == 0.0, (before, res)
    monkeypatch.setattr(env.params, "keep_max_on_failure", True)
    env.replay(tid, gold[:focus_at] + ["look around"])
    res2 = env.step("focus on agent")
    if res2.observation.startswith("Ambiguous"):
        res2 = env.step("0")
    assert res2.done and res2.reward == before.reward


@needs_sw
def test_dead_jvm_is_restarted_and_episode_replayed(env):
    e = env
    faults = e.faults_survived
    tid = PAINT
    gold = e.expert_actions(tid)
    reference = [r.observation for r in e.replay(tid, gold)]
    k = len(gold) // 2
    e.reset(tid)
    for a in gold[:k]:
        e.step(a)
    pid = e.java_pid
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # until the kernel has taken it down
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                break
        except ChildProcessError:
            break
        time.sleep(0.02)
    rest = [e.step(a) for a in gold[k:]]
    assert e.faults_survived == faults + 1
    assert e.java_pid != pid and not alive(pid)
    assert [r.observation for r in rest] == reference[k:]
    assert rest[-1].success and rest[-1].reward == 1.0
    # a crash between episodes is survived too (reset on a dead JVM)
    os.kill(e.java_pid, signal.SIGKILL)
    time.sleep(0.2)
    assert e.reset(tid).startswith("Task Description:")
    assert e.faults_survived == faults + 2
    assert java_children() == [e.java_pid]


@needs_sw
def test_clone_and_close_leave_no_java(env):
    env.reset(LIFESPAN)
    c = env.clone()
    c.reset(LIFESPAN)
    pid = c.java_pid
    assert pid != env.java_pid and sorted(java_children()) == sorted([env.java_pid, pid])
    c.close()
    c.close()  # idempotent
    assert not alive(pid) and java_children() == [env.java_pid]


@needs_sw
def test_jvm_heap_is_capped(env):
    env.reset(LIFESPAN)
    with open(f"/proc/{env.java_pid}/environ", "rb") as f:
        environ = f.read().split(b"\0")
    opts = [v for v in environ if v.startswith(b"JAVA_TOOL_OPTIONS=")]
    assert opts and b"-Xmx" in opts[0]


@needs_sw
@pytest.mark.slow
@pytest.mark.parametrize("split", ["seen", "unseen"])
def test_gold_paths_sweep(split):
    """Every gold path of a split replays to success (minutes)."""
    e = ScienceWorldEnv()
    failed, over_cap = [], []
    try:
        for tid in e.tasks(split):
            actions = e.expert_actions(tid)
            res = e.replay(tid, actions)
            if len(actions) > e.max_steps(tid):
                over_cap.append(tid)
            elif not res[-1].success:
                failed.append(tid)
    finally:
        e.close()
    assert not failed, failed


@needs_sw
def test_expert_thoughts_are_short_and_grounded(env, monkeypatch):
    """Every gold step gets one short thought made of template words and words the agent has seen (the
    instruction, the task, earlier observations, the action); expert_thoughts=false restores empty ones."""
    import re

    from sand_builtins.environments.scienceworld import thoughts

    from sand_framework.engine.expert import expert_trajectory

    def words(text: str) -> set[str]:
        return set(re.findall(r"[a-z][a-z'-]*", text.lower()))

    freeze, thermometer, circuit = "2_9", "6_45", "7_1"  # freeze apple juice, use a thermometer, power a bulb
    trajs = [expert_trajectory(env, tid) for tid in (LIFESPAN, FIND_ANIMAL, PAINT, freeze, thermometer, circuit)]
    kinds = set()
    for t in trajs:
        assert t.success, t.task_id
        for i, step in enumerate(t.steps):
            known = "\n".join([env.instruction(), t.task, *(s.observation for s in t.steps[:i]), step.action])
            assert step.thought and len(step.thought.split()) <= 25 and '"' not in step.thought, step.thought
            assert not words(step.thought) - words(known) - thoughts.TEMPLATE_WORDS, (t.task_id, i, step.thought)
            if re.fullmatch(r"move .+ to freezer", step.action):
                kinds.add("cool")
                assert "cool it down" in step.thought
            if step.action.startswith("focus on "):
                kinds.add("focus")
                assert thoughts.head(step.action[len("focus on "):]) in step.thought
            if step.action.startswith("connect "):
                kinds.add("connect")
                assert step.thought.startswith("To build the circuit")
    assert kinds == {"cool", "focus", "connect"}
    assert "The task says to focus on the animal with the longest life span" in trajs[0].steps[-1].thought
    monkeypatch.setattr(env.params, "expert_thoughts", False)
    off = expert_trajectory(env, FIND_ANIMAL)
    assert off.actions == trajs[1].actions and all(s.thought == "" for s in off.steps)
