"""The baselines as built-in methods (RFT, ETO, IPR) and the exploration helper they share.

Unit tests run on the real TextWorld-Express environment with scripted policies (a policy that plays the
expert's path, one that plays random moves, or a mix decided by the weights it serves), so every branch of
each method runs in well under a second; ``test_*_real_model`` runs each method on the real path (the
tiny-random model through the transformers backend). The stage tests run the engine's ``synth/iter1`` with
each method in-process and check that a resume after a crash, and a rerun, give the same units.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

from sand_framework.components import MethodTools, Policy
from sand_framework.engine.expert import expert_trajectory
from sand_framework.rollout import INVALID_FEEDBACK, ExploreRequest, explore, replayable
from sand_framework.types import Completion, SamplingParams, Step, Trajectory

from sand_builtins.methods.eto import EtoMethod, truncated
from sand_builtins.methods.ipr import IprMethod, examined_steps
from sand_builtins.methods.rft import RftMethod

REPO = Path(__file__).resolve().parents[2]
MOVES = ("move north", "move south", "move east", "move west", "take coin")


class OraclePolicy(Policy):
    """Plays each task's expert path when its weights are ``good``, random moves when ``bad``, and a seeded
    coin flip between the two per turn when ``mixed``; records the weights each call was served with."""

    name = "oracle"

    def __init__(self, experts: list[Trajectory], weights: str | None = "good"):
        super().__init__()
        self.paths = {t.task: t.actions for t in experts}
        self.weights = weights
        self.calls: list[tuple[str | None, int]] = []

    def setup(self, base_model):
        pass

    def set_agent_weights(self, weights):
        self.weights = weights

    def generate(self, chats, sampling, role="agent"):
        self.calls.append((self.weights, len(chats)))
        rng = random.Random(sampling.seed) if sampling.seed is not None else random.Random(0)
        out = []
        for chat in chats:
            path, step = self.paths.get(chat[2]["content"], []), (len(chat) - 3) // 2
            good = self.weights == "good" or (self.weights == "mixed" and rng.random() < 0.5)
            if sampling.temperature == 0 and self.weights == "mixed":
                good = True
            action = path[step] if good and step < len(path) else rng.choice(MOVES)
            text = f"Thought: step {step}.\nAction: {action}"
            out.append([Completion(text, prompt_tokens=len(chat), completion_tokens=3)])
        return out


@pytest.fixture(scope="module")
def world(registries):
    """One TextWorld-Express environment for the module (6 rooms: expert paths of 1-4 steps) and an
    ``in_process`` executor whose pool of 4 warm instances every test shares (a clone costs a JVM start)."""
    env = registries.build("environment", "textworld_express",
                           {"n_train": 12, "n_seen": 2, "n_unseen": 2, "max_steps": 8,
                            "game_params": "numLocations=6,numDistractorItems=0,includeDoors=0"})
    executor = registries.build("executor", "in_process", {"max_parallel": 4})
    yield env, executor
    executor.close()
    env.close()


@pytest.fixture
def twx(world):
    return world[0]


EXPERTS: dict[int, list[Trajectory]] = {}


def experts(env, k=4) -> list[Trajectory]:
    """The first ``k`` training tasks' expert trajectories, with a recognizable thought (fresh copies)."""
    if k not in EXPERTS:
        EXPERTS[k] = [expert_trajectory(env, task_id) for task_id in env.tasks("train")[:k]]
        for t in EXPERTS[k]:
            for s in t.steps:
                s.thought = "expert thought"
    return [Trajectory.from_dict(t.to_dict()) for t in EXPERTS[k]]


def tools(world, policy, iteration=1, agent="bad", sft="good") -> MethodTools:
    env, executor = world
    policy.set_agent_weights(agent)
    slots = {"executor": executor}
    return MethodTools(env=env, policy=policy, component=lambda slot: slots[slot], iteration=iteration,
                       weights={"agent": agent, "sft": sft, "base": None})


def pool(world):
    return world[1].pool(world[0])


# ---------------------------------------------------------------------- the exploration helper


def test_explore_from_reset_and_from_a_replayed_prefix(world, twx):
    trajs = experts(twx)
    two = next(t for t in trajs if len(t.steps) == 2)
    policy = OraclePolicy(trajs, "good")
    sp = SamplingParams(temperature=0.0, max_new_tokens=16)
    reset, prefixed, whole = explore([ExploreRequest(two), ExploreRequest(two, prefix=1),
                                      ExploreRequest(two, prefix=2)], twx, policy, sp, pool=pool(world))
    assert reset.trajectory.actions == two.actions and reset.trajectory.success and reset.done
    assert reset.prefix == 0 and len(reset.agent_steps) == 2 and reset.env_steps == 2
    assert prefixed.trajectory.steps[0].thought == "expert thought"  # the prefix is the expert's own step
    assert [s.thought for s in prefixed.agent_steps] == ["Thought: step 1."[9:]]
    assert prefixed.trajectory.success and prefixed.env_steps == 2 and prefixed.prompt_tokens > 0
    assert whole.done and whole.trajectory.success and not whole.agent_steps  # the prefix itself ended it
    assert whole.prompt_tokens == 0


def test_explore_reports_a_diverging_prefix_and_skips_invalid_replies(world, twx):
    (t, *_) = experts(twx)
    bad = Trajectory(t.task_id, t.env, t.instruction, t.task,
                     steps=[Step("x", t.steps[0].action, "not what the game says")])
    (ex,) = explore([ExploreRequest(bad, prefix=1)], twx, OraclePolicy([t]), SamplingParams(), pool=pool(world))
    assert not ex.ok and "diverged" in ex.error and ex.trajectory.steps == []
    invalid = [Step("??", "", INVALID_FEEDBACK)] + list(t.steps)
    assert replayable(invalid) == list(t.steps)
    mixed = Trajectory(t.task_id, t.env, t.instruction, t.task, steps=invalid)
    (ok,) = explore([ExploreRequest(mixed, prefix=2)], twx, OraclePolicy([t]), SamplingParams(), pool=pool(world))
    assert ok.ok and ok.trajectory.steps[0].observation == INVALID_FEEDBACK and ok.env_steps >= 1


def test_explore_results_do_not_depend_on_the_other_tasks_in_the_call(world, twx):
    trajs = experts(twx)
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    reqs = [ExploreRequest(t, seed=100 + i) for i, t in enumerate(trajs) for _ in range(3)]
    together = explore(reqs, twx, ScriptedPolicy(), sp, pool=pool(world), max_parallel=4)
    alone = explore(reqs[3:6], twx, ScriptedPolicy(), sp, pool=pool(world), max_parallel=4)
    assert [e.trajectory.to_dict() for e in together[3:6]] == [e.trajectory.to_dict() for e in alone]
    assert len({tuple(e.trajectory.actions) for e in together[:3]}) > 1  # the seed group's samples differ
    # a policy that seeds per chat plays the seed groups in shared waves of max_parallel: the same episodes
    policy = ScriptedPolicy()
    assert [e.trajectory.to_dict() for e in explore(reqs, twx, policy, sp, pool=pool(world), max_parallel=4)] == \
        [e.trajectory.to_dict() for e in together]
    assert policy.calls[0][1] == 4
    apart = ScriptedPolicy()
    apart.seeds_per_chat = False  # one that cannot: each group plays apart, one call per depth per group
    assert [e.trajectory.to_dict() for e in explore(reqs, twx, apart, sp, pool=pool(world), max_parallel=4)] == \
        [e.trajectory.to_dict() for e in together]
    assert apart.calls[0][1] == 3
    policy = ScriptedPolicy()
    explore(reqs, twx, policy, sp, pool=pool(world), max_parallel=4, group_by_seed=False)
    assert policy.calls[0][1] == 4  # waves of max_parallel across the groups


def test_explorations_do_not_depend_on_the_wave_size(world, twx):
    """``executor.max_parallel`` only splits a seed group into waves: an episode's seed is its place in the group
    (it was its place in its wave under a seed of the wave, so one run seed gave other episodes with other waves)."""
    trajs = experts(twx)
    sp = SamplingParams(temperature=1.0, max_new_tokens=16, seed=5)
    reqs = [ExploreRequest(t, seed=100 + i) for i, t in enumerate(trajs) for _ in range(5)]
    played = {n: [e.trajectory.to_dict() for e in explore(reqs, twx, ScriptedPolicy(), sp, pool=pool(world),
                                                          max_parallel=n)]
              for n in (None, 1, 2, 4)}
    assert played[1] == played[2] == played[4] == played[None]
    assert len({json.dumps(e["steps"]) for e in played[1][:5]}) > 1  # the group's samples still differ


def test_explorations_on_the_real_model_do_not_depend_on_max_parallel(world, policy):
    """Sampled explorations (two tasks, a seed group of 4 each, as RFT's ``k``) with the tiny-random model through
    the transformers backend: the same episodes whether 1 or 4 play at a time, so ``executor.max_parallel``
    changes only the speed of a method's explorations."""
    env = world[0]
    sp = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
    reqs = [ExploreRequest(t, seed=200 + i, max_steps=2) for i, t in enumerate(experts(env)[:2]) for _ in range(4)]
    played = {n: [e.trajectory.to_dict() for e in explore(reqs, env, policy, sp, pool=pool(world), max_parallel=n)]
              for n in (1, 8)}
    assert played[1] == played[8]  # 8: both tasks' groups in one wave, in the same model calls
    policy.seeds_per_chat = False  # each group apart, as a policy that cannot seed per chat plays them
    try:
        assert [e.trajectory.to_dict() for e in explore(reqs, env, policy, sp, pool=pool(world), max_parallel=8)] \
            == played[8]
    finally:
        del policy.seeds_per_chat
    assert len({json.dumps(e["steps"]) for e in played[1][:4]}) > 1  # the group's samples differ


# ---------------------------------------------------------------------- RFT


def test_rft_keeps_distinct_successes_and_adds_them_to_the_expert_data(world, twx):
    trajs = experts(twx)
    method = RftMethod(RftMethod.Params(k=6, temperature=1.0, max_new_tokens=16))
    policy = OraclePolicy(trajs)
    units = method.build(trajs, tools(world, policy, agent="mixed"), seed=7)
    assert len(units) == len(trajs)
    for traj, unit in zip(trajs, units):
        st = unit["stats"]
        assert st["explorations"] == 6 and len(unit["explorations"]) == 6
        actions = [tuple(Trajectory.from_dict(k).actions) for k in unit["kept"]]
        assert len(actions) == len(set(actions)) == st["kept"]  # deduplicated by action sequence
        assert st["kept"] + st["duplicates"] + st["rejected_invalid"] == st["successes"]
        assert all(Trajectory.from_dict(k).success for k in unit["kept"])
    assert sum(u["stats"]["kept"] for u in units) > 0
    data = method.assemble(units, trajs)
    assert data.next_expert == trajs and not data.pairs
    assert len(data.trajectories) == len(trajs) + sum(u["stats"]["kept"] for u in units)
    assert data.trajectories[0] is trajs[0]  # each task's expert first, then its successes
    assert method.build(trajs, tools(world, OraclePolicy(trajs), agent="mixed"), seed=7) == units  # deterministic
    capped = RftMethod(RftMethod.Params(k=6, max_per_task=1, include_expert=False, max_new_tokens=16))
    cu = capped.build(trajs, tools(world, OraclePolicy(trajs), agent="mixed"), seed=7)
    assert all(u["stats"]["kept"] <= 1 for u in cu)
    assert len(capped.assemble(cu, trajs).trajectories) == sum(u["stats"]["kept"] for u in cu)


def test_rft_units_do_not_depend_on_the_batch(world, twx):
    trajs = experts(twx)
    method = RftMethod(RftMethod.Params(k=3, max_new_tokens=16))
    whole = method.build(trajs, tools(world, ScriptedPolicy()), seed=3)
    parts = [u for t in trajs for u in method.build([t], tools(world, ScriptedPolicy()), seed=3)]
    assert whole == parts


# ---------------------------------------------------------------------- ETO


def test_eto_pairs_the_expert_against_failed_explorations(world, twx):
    trajs = experts(twx)
    method = EtoMethod()
    units = method.build(trajs, tools(world, OraclePolicy(trajs), agent="bad"), seed=1)
    lost = [u for u in units if u["outcome"] == "lose"]
    assert lost and all(u["agent_reward"] < 1.0 == u["expert_reward"] for u in lost)
    data = method.assemble(units, trajs)
    assert data.reference == "init" and data.next_expert == trajs and not data.trajectories
    assert len(data.pairs) == sum(u["stats"]["pairs"] for u in units) == len(lost)
    by_task = {t.task_id: t for t in trajs}
    for pair in data.pairs:
        expert = by_task[pair.meta["task_id"]]
        assert pair.prompt.steps == [] and pair.prompt.task == expert.task
        assert [s.action for s in pair.chosen] == expert.actions and pair.rejected
        assert pair.chosen_reward == 1.0 and pair.rejected_reward < 1.0
    # The expert agent ties with the expert: no pair.
    ties = method.build(trajs, tools(world, OraclePolicy(trajs), agent="good"), seed=1)
    assert all(u["outcome"] == "tie" and u["pair"] is None for u in ties)


@pytest.mark.parametrize("cls", [EtoMethod, IprMethod])
def test_explore_tasks_adds_training_tasks_with_gold_paths_that_never_become_expert_data(world, twx, cls):
    """ETO and IPR explore every training task in their papers: ``explore_tasks`` adds the next training tasks
    (with the environment's gold trajectory as their expert side) to the ones trained on, for their pairs only."""
    trained = experts(twx, 2)
    method = cls(cls.Params(explore_tasks=3))
    gold = lambda task_id: expert_trajectory(twx, task_id)  # noqa: E731 - what the pipeline passes
    inputs = method.inputs(trained, twx.tasks("train"), gold)
    assert [t.task_id for t in inputs] == twx.tasks("train")[:5]
    assert inputs[:2] == trained and all(t.success and t.meta["explore_only"] for t in inputs[2:])
    assert method.inputs(trained, twx.tasks("train"), gold) == inputs  # deterministic: it runs on every resume
    assert cls().inputs(trained, twx.tasks("train"), gold) == trained  # 0: the trajectories trained on
    units = [{"pair": None, "pairs": []} for _ in inputs]
    assert method.assemble(units, inputs).next_expert == trained


def test_eto_flips_the_pair_when_the_agent_beats_the_stored_expert_reward(world, twx):
    trajs = experts(twx)
    for t in trajs:
        t.reward = 0.5  # a WebShop-like stored expert reward the agent can beat
    method = EtoMethod(EtoMethod.Params(expert_reward="stored"))
    units = method.build(trajs, tools(world, OraclePolicy(trajs), agent="good"), seed=1)
    assert all(u["outcome"] == "win" for u in units)
    for pair in method.assemble(units, trajs).pairs:
        assert pair.chosen_reward == 1.0 and pair.rejected_reward == 0.5 and pair.meta["outcome"] == "win"


def test_eto_truncates_the_rejected_side_as_eto_does_per_benchmark():
    steps = [Step("t", f"a{i}", "o") for i in range(20)]
    assert len(truncated(steps, 3, 10)) == 8  # len(expert) + 10 messages = 5 more agent steps
    assert len(truncated(steps, 3, None)) == 20 and len(truncated(steps, 3, 0)) == 3
    from sand_builtins.environments.alfworld.env import AlfworldEnv
    from sand_builtins.environments.scienceworld.env import ScienceWorldEnv
    from sand_builtins.environments.textworld_express import TextWorldExpressEnv
    from sand_builtins.environments.webshop import WebShopEnv
    from sand_builtins.methods.common import expert_reward_rule

    m = EtoMethod()
    assert m._truncation(WebShopEnv) == 10 and m._truncation(ScienceWorldEnv) == 10  # the benchmark, a class fact
    assert m._truncation(AlfworldEnv) is None and m._truncation(TextWorldExpressEnv) is None
    assert EtoMethod(EtoMethod.Params(truncate_rejected=4))._truncation(AlfworldEnv) == 4
    assert expert_reward_rule("auto", WebShopEnv) == "stored" and expert_reward_rule("auto", AlfworldEnv) == "one"

    class Renamed(TextWorldExpressEnv):  # a 0.3.1 plugin's environment, told apart by its name
        name = "my_sciworld"
    with pytest.warns(DeprecationWarning, match=r"declare `benchmark = 'scienceworld'`"):
        assert m._truncation(Renamed) == 10


def test_eto_cuts_a_long_failure(world, twx):
    trajs = experts(twx)
    units = EtoMethod(EtoMethod.Params(truncate_rejected=2)).build(
        trajs, tools(world, OraclePolicy(trajs), agent="bad"), seed=1)
    cut = [u for u in units if u["pair"] and len(u["agent"]["steps"]) > len(u["pair"]["chosen"]) + 1]
    assert cut, "no failure ran longer than the expert's path + 1 step"
    for u in units:
        if u["pair"]:  # len(expert) + 2 messages = one agent step more than the expert took
            assert len(u["pair"]["rejected"]) == min(len(u["agent"]["steps"]), len(u["pair"]["chosen"]) + 1)


# ---------------------------------------------------------------------- IPR


def test_ipr_examined_steps_are_drawn_from_the_seed():
    assert examined_steps(10, None, 1) == list(range(1, 10))
    picked = examined_steps(10, 3, 1)
    assert len(picked) == 3 and picked == sorted(picked) and set(picked) <= set(range(1, 10))
    assert examined_steps(10, 3, 1) == picked and examined_steps(2, 3, 1) == [1] and examined_steps(1, 2, 0) == []


def test_ipr_local_pairs_from_monte_carlo_step_rewards(world):
    env = world[0]
    trajs = [t for t in experts(env, 12) if len(t.steps) >= 3][:3]
    assert trajs, "no expert path of 3+ steps"
    policy = OraclePolicy(trajs)
    method = IprMethod(IprMethod.Params(steps_per_trajectory=None, mc_samples=3, max_new_tokens=16))
    units = method.build(trajs, tools(world, policy, agent="bad", sft="good"), seed=5)
    assert policy.weights == "bad", "the agent's weights are restored after the Monte Carlo rollouts"
    assert {w for w, _ in policy.calls} == {"bad", "good"}
    data = method.assemble(units, trajs)
    assert data.reference == "sft" and data.next_expert == trajs
    local = [p for p in data.pairs if p.meta["kind"] == "local"]
    assert local, [u["steps"] for u in units]
    by_task = {t.task_id: t for t in trajs}
    for pair in local:
        t, j = by_task[pair.meta["task_id"]], pair.meta["step"]
        assert pair.prompt.steps == t.steps[:j] and 1 <= j < len(t.steps)
        assert pair.meta["outcome"] == "expert_better" and pair.chosen == t.steps[j:]
        assert pair.meta["expert_step_reward"] - pair.meta["agent_step_reward"] > 0.01
    for unit, t in zip(units, trajs):
        assert [r["step"] for r in unit["steps"]] == list(range(len(t.steps)))
        assert unit["stats"]["examined_steps"] == len(t.steps) - 1
        for rec in unit["steps"][1:]:
            if "expert_step_reward" in rec:  # the SFT model finishes the expert's path: worth 1.0
                assert rec["expert_step_reward"] == 1.0 and len(rec["mc"]["expert"]["rewards"]) == 3
    glob = [p for p in data.pairs if p.meta["kind"] == "global"]
    assert all(p.prompt.steps == [] and p.chosen == by_task[p.meta["task_id"]].steps for p in glob)
    again = method.build(trajs, tools(world, OraclePolicy(trajs), agent="bad", sft="good"), seed=5)
    assert again == units
    capped = IprMethod(IprMethod.Params(steps_per_trajectory=1, mc_samples=2, global_pairs=False,
                                        max_new_tokens=16))
    cu = capped.build(trajs, tools(world, OraclePolicy(trajs), agent="bad", sft="good"), seed=5)
    assert all(len(u["steps"]) == 1 and u["steps"][0]["step"] >= 1 for u in cu)


def test_ipr_keeps_no_pair_when_the_gaps_disagree(twx):
    t = next(t for t in experts(twx) if len(t.steps) == 2)
    m = IprMethod()
    from sand_framework.rollout import Exploration

    ex = Exploration(trajectory=Trajectory(t.task_id, t.env, t.instruction, t.task,
                                           steps=t.steps[:1] + [Step("a", "move west", "o")], reward=0.0), prefix=1)
    assert m._local_pair(t, 1, ex, 1.0, 0.2, 0.9).meta["outcome"] == "expert_better"
    assert m._local_pair(t, 1, ex, 1.0, 0.9, 0.2) is None  # outcome says expert, step reward says agent
    assert m._local_pair(t, 1, ex, 1.0, 0.5, 0.505) is None  # step gap within the threshold
    assert m._local_pair(t, 1, ex, 1.0, None, 0.9) is None


class OverlapProbe(OraclePolicy):
    """An oracle that serves both phases' threads at once and holds the agent's episodes of the last task until a
    Monte Carlo call has come: the streamed stage must run them side by side or fail here."""

    concurrent_generate = True

    def __init__(self, experts, last_task, weights):
        super().__init__(experts, weights)
        self.last_task, self.mc_started, self.threads = last_task, threading.Event(), set()

    def generate(self, chats, sampling, role="agent"):
        name = threading.current_thread().name
        self.threads.add(name)
        if name == "sand-stream-1":
            self.mc_started.set()
        elif name == "sand-stream-0" and any(c[2]["content"] == self.last_task for c in chats):
            assert self.mc_started.wait(10), "the agent phase of the last batch ran before any Monte Carlo rollout"
        return super().generate(chats, sampling, role)


def test_ipr_streamed_stage_overlaps_its_phases_and_keeps_the_units(world):
    """``run.batches_in_flight``: the agent takes over in batch k+1 while batch k's Monte Carlo rollouts play (on a
    pool of their own), and the units are the chunked stage's, byte for byte."""
    from sand_builtins.methods.ipr import MC_PHASE

    env, executor = world
    trajs = [t for t in experts(env, 12) if len(t.steps) >= 2][:4]
    batches = [([t], 100 + k) for k, t in enumerate(trajs)]
    method = IprMethod(IprMethod.Params(steps_per_trajectory=None, mc_samples=3, temperature=1.0,
                                        max_new_tokens=16))

    def built(policy, depth):
        return [u for units in method.build_stream(batches, tools(world, policy, agent="mixed", sft="mixed"), depth)
                for u in units]

    chunked = built(OraclePolicy(trajs), 1)
    probe = OverlapProbe(trajs, trajs[-1].task, "mixed")
    streamed = built(probe, 3)
    assert json.dumps(streamed, sort_keys=True) == json.dumps(chunked, sort_keys=True)
    assert sum(len(u["pairs"]) for u in chunked) > 0 and all(u["stats"]["mc_rollouts"] > 0 for u in chunked)
    assert probe.threads == {"sand-stream-0", "sand-stream-1"} and probe.mc_started.is_set()
    assert (id(env), MC_PHASE) in executor._pools, "the Monte Carlo rollouts had a pool of their own"
    # iteration 2 on: the Monte Carlo rollouts use the SFT weights, so the batches run one after another
    switching = OraclePolicy(trajs)
    again = [u for units in method.build_stream(batches, tools(world, switching, agent="bad", sft="good"), 3)
             for u in units]
    assert again == [u for t, seed in batches for u in method.build(t, tools(world, OraclePolicy(trajs)), seed)]


# ---------------------------------------------------------------------- the engine's stage with each method

STAGE = ["data.limit=4", "run.synthesis_batch=2", "environment.n_train=6", "environment.n_seen=2",
         "environment.n_unseen=2", "environment.max_steps=5", "executor.max_parallel=2"]
METHOD_ARGS = {"rft": ["method=rft", "method.k=2", "method.max_new_tokens=48"],
               "eto": ["method=eto", "method.max_new_tokens=48"],
               "ipr": ["method=ipr", "method.mc_samples=2", "method.max_new_tokens=48"]}
WEIGHTS = {"agent": "agent-weights", "sft": "sft-weights", "base": None}
SAME_WEIGHTS = {"agent": "sft-weights", "sft": "sft-weights", "base": None}
"""Iteration 1's: the agent is the SFT model, so IPR's Monte Carlo rollouts share its weights (and may stream)."""


@pytest.fixture(scope="module")
def plugins():
    from sand_framework.plugins import load_plugins

    ps = load_plugins()
    return ps, ps.registries()


def stage_pipeline(run: Path, plugins, overrides=(), policy: Policy | None = None):
    """The engine on the smoke recipe with a scripted policy (as tests/engine/test_run_integrity.py does), or ``policy``."""
    from sand_framework.config import load_recipe, validate
    from sand_framework.engine.context import RunContext
    from sand_framework.engine.pipeline import Pipeline
    from sand_framework.store import RunDir

    ps, regs = plugins
    data, _ = load_recipe("smoke", [*STAGE, *overrides])
    recipe = validate(data, regs)
    rd = RunDir(run) if (run / "recipe.yaml").exists() else RunDir.create_at(run)
    (rd.path / "recipe.yaml").write_text("{}")
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=ps, registries=regs)
    ctx.components["policy"] = policy or ScriptedPolicy()
    ctx._policy_ready = True
    ctx.base_model_path = "scripted"
    return Pipeline(ctx)


def same_expert_stage(straight: Path, run: Path) -> None:
    """Start ``run`` from ``straight``'s expert stage (TextWorld-Express's gold path for a game is not always
    the same path in another process, so the two runs must share it to compare what the method built)."""
    import shutil

    shutil.copytree(straight / "expert", run / "expert")
    (run / "recipe.yaml").write_text("{}")
    state = json.loads((straight / "state.json").read_text())
    (run / "state.json").write_text(json.dumps({"done": {"expert": state["done"]["expert"]}}))


def stage_units(run: Path) -> dict[str, dict]:
    """The stage's units by task, without the batch's times (wall, rollouts, engine roles busy: not artifacts of
    the method)."""
    out = {}
    for line in (run / "iter1" / "synthesis.units.jsonl").read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line a kill tore: the store redoes that unit
            continue
        for key in [k for k in rec["data"]["stats"] if k.endswith("seconds")]:
            rec["data"]["stats"].pop(key)
        out[rec["unit"]] = rec["data"]
    return out


def method_units(run: Path) -> dict[str, dict]:
    """:func:`stage_units` without the batch's costs either: a streamed batch's cost is the window since the
    previous batch came out, which overlaps the other batches' work (the windows add up to the stage's)."""
    from sand_framework.engine.stage_cost import EXECUTOR_COUNTS, EXECUTOR_LOOPS, POLICY_COUNTS

    costs = {f"backend_{k}" for k in POLICY_COUNTS} | set(EXECUTOR_COUNTS.values()) | set(EXECUTOR_LOOPS)
    return {k: {**u, "stats": {s: v for s, v in u["stats"].items() if s not in costs}}
            for k, u in stage_units(run).items()}


def test_the_engine_streams_the_ipr_stage_to_the_chunked_units(tmp_path, plugins):
    """``synth/iter1`` of IPR through the engine, one trajectory a batch, chunked and with two batches in flight
    (iteration 1: the Monte Carlo rollouts share the agent's weights): the same units and the same pairs file."""
    from sand_builtins.methods.ipr import MC_PHASE
    from sand_framework.engine.stage_cost import EXECUTOR_COUNTS, POLICY_COUNTS

    same = SAME_WEIGHTS
    args = [*METHOD_ARGS["ipr"], "run.synthesis_batch=1"]
    p = stage_pipeline(tmp_path / "chunked", plugins, args)
    try:
        p.build(1, p.expert(), same)
    finally:
        p.ctx.close()
    same_expert_stage(tmp_path / "chunked", tmp_path / "streamed")
    p = stage_pipeline(tmp_path / "streamed", plugins, [*args, "run.batches_in_flight=2"])
    try:
        p.build(1, p.expert(), same)
        assert any(phase == MC_PHASE for _, phase in p.ctx.component("executor")._pools), "not streamed"
    finally:
        p.ctx.close()

    # the method's units are equal (batch costs aside), and the batches' cost windows add up to the same totals
    assert method_units(tmp_path / "streamed") == method_units(tmp_path / "chunked")
    counts = {f"backend_{k}" for k in POLICY_COUNTS} | set(EXECUTOR_COUNTS.values()) | {"agent_turns"}
    units = {run: stage_units(tmp_path / run) for run in ("chunked", "streamed")}
    assert len(units["chunked"]) == 4
    assert all(sum(u["stats"].get(k, 0) for u in units["streamed"].values())
               == sum(u["stats"].get(k, 0) for u in units["chunked"].values()) for k in counts)
    pairs = [(tmp_path / run / "iter1" / "pairs.jsonl") for run in ("chunked", "streamed")]
    assert all(f.is_file() for f in pairs) and pairs[0].read_bytes() == pairs[1].read_bytes()


@pytest.mark.parametrize("name", ["rft", "eto", "ipr"])
def test_stage_resumed_after_a_crash_equals_an_uninterrupted_one(tmp_path, plugins, name):
    p = stage_pipeline(tmp_path / "straight", plugins, METHOD_ARGS[name])
    try:
        data = p.build(1, p.expert(), WEIGHTS)
    finally:
        p.ctx.close()
    straight = stage_units(tmp_path / "straight")
    assert len(straight) == 4
    state = json.loads((tmp_path / "straight" / "state.json").read_text())["done"]["synth/iter1"]
    assert state["method"] == name and state["trajectories"] == 4
    if name == "rft":
        assert len(data.trajectories) == 4 + state["kept"]
    else:
        assert state.get("pairs", 0) == len(data.pairs)
        if data.pairs:
            lines = (tmp_path / "straight" / "iter1" / "pairs.jsonl").read_text().splitlines()
            assert len(lines) == len(data.pairs) and {"prompt", "chosen", "rejected"} <= set(json.loads(lines[0]))

    # The same stage, the process dying after its first batch, then resumed by a new one.
    same_expert_stage(tmp_path / "straight", tmp_path / "crashed")
    p = stage_pipeline(tmp_path / "crashed", plugins, METHOD_ARGS[name])
    method, real = p._method(), p._method().build
    calls = []

    def dying(trajs, tools, seed):
        if calls:
            raise KeyboardInterrupt  # what a kill leaves: the first batch's units stored, the rest not
        calls.append(seed)
        return real(trajs, tools, seed)

    method.build = dying
    try:
        with pytest.raises(KeyboardInterrupt):
            p.build(1, p.expert(), WEIGHTS)
    finally:
        p.ctx.close()
    assert len(stage_units(tmp_path / "crashed")) == 2
    p = stage_pipeline(tmp_path / "crashed", plugins, METHOD_ARGS[name])
    try:
        again = p.build(1, p.expert(), WEIGHTS)
    finally:
        p.ctx.close()
    assert stage_units(tmp_path / "crashed") == straight
    assert again.pairs == data.pairs and again.trajectories == data.trajectories


# ---------------------------------------------------------------------- the real path: tiny-random model


@pytest.mark.parametrize("name", ["rft", "eto", "ipr"])
def test_a_method_stage_counts_its_explorations_turns_and_seconds(tmp_path, plugins, policy, name):
    """The engine's ``synth/iter1`` with each exploring method and the tiny-random model: the stage's summary and
    its rollout rates in metrics.json count every agent turn its episodes took (unparsable replies included) and
    the seconds they took, as the SAND synthesis's rollouts are counted (they were 0: explorations fed no counter)."""
    from sand_framework.engine.stage_cost import rollout_metrics
    from sand_framework.store import RunLayout

    short = ["data.limit=2"]  # two tasks: turns enough to count
    p = stage_pipeline(tmp_path / "run", plugins, [*METHOD_ARGS[name], *short], policy=policy)
    try:
        p.build(1, p.expert(), {"agent": None, "sft": None, "base": None})
    finally:
        p.ctx.components.pop("policy")  # the module's policy, closed by its fixture
        p.ctx.close()
    units = list(stage_units(tmp_path / "run").values())
    turns = sum(u["stats"]["agent_steps"] + u["stats"].get("mc_agent_steps", 0) for u in units)
    summary = json.loads((tmp_path / "run" / "state.json").read_text())["done"]["synth/iter1"]
    assert turns > 0 and summary["agent_turns"] == turns and summary["rollout_seconds"] > 0
    rates = rollout_metrics({"synth/iter1": p.rd.units(RunLayout.synthesis_units(1)).values()}, None)["synth/iter1"]
    assert rates["agent_turns"] == turns and rates["agent_turns_per_s"] > 0



@pytest.mark.parametrize("name,params", [
    ("rft", {"k": 2, "max_new_tokens": 24}),
    ("eto", {"max_new_tokens": 24}),
    ("ipr", {"mc_samples": 2, "steps_per_trajectory": 1, "max_new_tokens": 24, "max_rollout_steps": 2}),
])
def test_method_on_the_real_model(world, registries, policy, name, params):
    """Each method on TextWorld-Express with the tiny random-init model through the transformers backend:
    it runs, its units have the documented shape, and the same seed gives the same units."""
    env = world[0]
    trajs = [t for t in experts(env) if len(t.steps) >= 2][:2]
    method = registries.build("method", name, params)

    def run():
        t = tools(world, policy, agent=None, sft=None)
        return method.build([Trajectory.from_dict(x.to_dict()) for x in trajs], t, seed=11)

    units = run()
    assert len(units) == len(trajs) and all(isinstance(u["stats"], dict) for u in units)
    if name == "ipr":  # streamed, one trajectory a batch: the phases overlap, the units stay
        t = tools(world, policy, agent=None, sft=None)
        batches = [([Trajectory.from_dict(x.to_dict())], 11) for x in trajs]
        assert [u for b in method.build_stream(batches, t, depth=2) for u in b] == [
            u for b, seed in batches for u in method.build(b, tools(world, policy, agent=None, sft=None), seed)]
    assert json.loads(json.dumps(units)) == units  # JSON as the engine stores it
    assert run() == units
    data = method.assemble(units, trajs)
    assert data.next_expert == trajs
    if name == "rft":
        assert all(u["stats"]["explorations"] == 2 for u in units) and len(data.trajectories) >= len(trajs)
    elif name == "eto":
        assert all(u["outcome"] in ("lose", "win", "tie", "empty_side", "error") for u in units)
        assert data.reference == "init"
    else:
        assert all(u["stats"]["examined_steps"] == 1 and len(u["steps"]) == 2 for u in units)
        assert all("agent_step_reward" in r for u in units for r in u["steps"][1:] if r["agent_actions"])
        assert data.reference == "sft"


# ---------------------------------------------------------------------- kill -9 during a method's stage

RUNNER = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path[:0] = [{tests!r}, {here!r}]
    from test_methods import stage_pipeline
    from sand_framework.plugins import load_plugins

    ps = load_plugins()
    p = stage_pipeline(Path({run!r}), (ps, ps.registries()), {overrides!r})
    try:
        p.build(1, p.expert(), {weights!r})
    finally:
        p.ctx.close()
    print("stage done")
""")


@pytest.mark.parametrize("streamed", [False, True], ids=["chunked", "streamed"])
def test_sigkill_during_the_ipr_stage_resumes_to_identical_units(tmp_path, plugins, streamed):
    """SIGKILL the stage (one trajectory per batch) right after a unit lands and a random moment later, twice,
    resume each time in a new process: the units equal an uninterrupted chunked stage's, each written once; also
    with three batches in flight (iteration 1's weights, so the phases stream), batch costs aside."""
    overrides = [*METHOD_ARGS["ipr"], "run.synthesis_batch=1", "method.steps_per_trajectory=3",
                 "environment.game_params=numLocations=6,numDistractorItems=0,includeDoors=0"]
    weights = SAME_WEIGHTS if streamed else WEIGHTS
    p = stage_pipeline(tmp_path / "straight", plugins, overrides)
    try:
        p.build(1, p.expert(), weights)
    finally:
        p.ctx.close()
    straight = stage_units(tmp_path / "straight")
    run = tmp_path / "killed"
    same_expert_stage(tmp_path / "straight", run)
    log = run / "iter1" / "synthesis.units.jsonl"
    here = Path(__file__).resolve().parent
    killed = [*overrides, "run.batches_in_flight=3"] if streamed else overrides
    script = RUNNER.format(tests=str(here.parent), here=str(here), run=str(run), overrides=killed, weights=weights)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")])}
    rng, kills = random.Random(0), 0
    for attempt in range(6):
        before = len(log.read_text().splitlines()) if log.exists() else 0
        proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        if kills < 2:
            deadline = time.time() + 120
            while proc.poll() is None and time.time() < deadline:
                if log.exists() and len(log.read_text().splitlines()) > before:
                    break
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.02))  # right after the unit, or a moment into the next batch
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
        out, err = proc.communicate(timeout=300)
        if proc.returncode == 0:
            assert "stage done" in out
            break
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
    assert kills >= 1, "no kill landed inside the stage"
    ids = []
    for line in log.read_text().splitlines():
        try:
            ids.append(json.loads(line)["unit"])
        except json.JSONDecodeError:
            kills -= 1  # a torn record (the kill landed mid-write) is redone, once per kill at most
    assert kills >= 0 and len(ids) == len(set(ids)) == 4, "every trajectory built exactly once across processes"
    if streamed:
        assert method_units(run) == method_units(tmp_path / "straight")
    else:
        assert stage_units(run) == straight


# ---------------------------------------------------------------------- recipes


def test_method_params_are_validated_with_every_problem_at_once(plugins):
    from sand_framework.config import load_recipe, validate
    from sand_framework.errors import RecipeError

    for name, bad, field in [("rft", ["method.k=0", "method.temperature=-1"], ("k", "temperature")),
                             ("eto", ["method.expert_reward=gpt", "method.truncate_rejected=-3"],
                              ("expert_reward", "truncate_rejected")),
                             ("ipr", ["method.mc_samples=0", "method.steps_per_trajectory=0"],
                              ("mc_samples", "steps_per_trajectory"))]:
        data, _ = load_recipe("smoke", [f"method={name}", *bad])
        with pytest.raises(RecipeError) as err:
            validate(data, plugins[1])
        assert all(f"method[{name}]" in str(err.value) and f in str(err.value) for f in field), str(err.value)
    for setting in ("auto", None, 10):
        value = "null" if setting is None else setting
        data, _ = load_recipe("smoke", ["method=eto", f"method.truncate_rejected={value}"])
        assert validate(data, plugins[1]).slots["method"][1].truncate_rejected == setting


@pytest.mark.slow
@pytest.mark.parametrize("name,args", [
    ("rft", ["method.k=2", "method.max_new_tokens=48"]),
    ("eto", ["method.max_new_tokens=48"]),
    ("ipr", ["method.mc_samples=2", "method.max_new_tokens=48", "method.max_rollout_steps=2"]),
])
def test_sand_run_with_each_method(tmp_path, name, args):
    """The whole loop through the CLI with each baseline (about a minute each): expert, SFT, the method's
    iteration, its training (SFT for RFT, DPO for ETO and IPR), evaluation."""
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "run", "smoke", f"method={name}", *args,
                           "--run-dir", str(run)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((run / "state.json").read_text())["done"]
    assert state["synth/iter1"]["method"] == name and state["synth/iter1"]["trajectories"] == 3
    if name == "rft":
        assert state["train/iter1"]["trajectories"] == 3 + state["synth/iter1"]["kept"]
    else:
        assert state["train/iter1"]["pairs"] == state["synth/iter1"]["pairs"] > 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["eval"]) == {"sft", "final"} and metrics["weights"]["final"].endswith("iter1/final")


def test_explorations_run_in_the_process_pool_executors_workers(world, registries):
    """With ``executor: process_pool`` the methods' episodes are stepped in its worker processes and give the
    same units as in this process."""
    env, _ = world
    trajs = experts(env)[:2]
    executor = registries.build("executor", "process_pool", {"workers": 2, "max_parallel": 4})
    try:
        t = MethodTools(env=env, policy=ScriptedPolicy(), component=lambda slot: executor, iteration=1,
                        weights={"agent": None, "sft": None, "base": None})
        method = RftMethod(RftMethod.Params(k=3, max_new_tokens=16))
        remote = method.build(trajs, t, seed=2)
        assert executor.stats["env_steps"] > 0 and all(pid for pid in executor.worker_pids())
    finally:
        executor.close()
    assert remote == method.build(trajs, tools(world, ScriptedPolicy()), seed=2)
