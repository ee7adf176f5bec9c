"""Best-of-N at inference (evaluator ``best_of_n``): the oracle keeps the best reward, the judge path runs, all N
samples' tokens are counted, results are deterministic across calls, batchings and a resumed evaluation, the tasks
of one call are played together (and judged in one call) with the samples each gets alone, and the real path runs on
TextWorld-Express with the tiny model."""

from __future__ import annotations

import re

import pytest

from scripted import ScriptedPolicy
from sand_framework.components import Environment
from sand_framework.engine.evaluation import evaluate_tasks
from sand_framework.engine.units import StageUnits
from sand_framework.store import UnitLog
from sand_framework.types import Completion, SamplingParams, StepResult


class Field(Environment):
    """Walk east ``k`` rooms, then `take coin` (reward 1, success); `take rock` ends the game with reward 0.4."""

    name = "field"

    def __init__(self, params=None):
        super().__init__(params)
        self.state: dict = {}

    def tasks(self, split):
        return [f"field-{i}" for i in range(6)]

    def instruction(self):
        return "Find the coin. Reply 'Thought: ...\\nAction: ...'."

    def reset(self, task_id):
        self.state = {"k": int(task_id.rsplit("-", 1)[1]) % 2 + 1, "pos": 0}
        return "Task: take the coin.\nObservation: a field."

    def step(self, action):
        s = self.state
        if action == "go east" and s["pos"] < s["k"]:
            s["pos"] += 1
            return StepResult(f"room {s['pos']}", 0.0, False)
        if action == "take coin" and s["pos"] == s["k"]:
            return StepResult("You take the coin.", 1.0, True, True)
        if action == "take rock":
            return StepResult("You take a rock. The game ends.", 0.4, True, False)
        return StepResult("Nothing happens.", 0.0, False, valid=False)

    def max_steps(self, task_id):
        return 4

    def expert_actions(self, task_id):
        return ["go east"] * (int(task_id.rsplit("-", 1)[1]) % 2 + 1) + ["take coin"]


ACTIONS = ("go east", "take coin", "take rock", "look")


class Judging(ScriptedPolicy):
    """The scripted agent; as the base model it scores an attempt that took the coin 9, others 3 (``score``), or
    names the first attempt that took the coin (``pick``)."""

    def generate(self, chats, sampling, role="agent"):
        if role == "agent":
            return super().generate(chats, sampling, role)
        self.calls.append((role, len(chats), sampling.n))
        out = []
        for chat in chats:
            prompt = chat[-1]["content"]
            if "Which attempt" in prompt:
                parts = re.split(r"\nAttempt (\d+):\n", prompt)
                took = [int(parts[i]) for i in range(1, len(parts) - 1, 2) if "You take the coin" in parts[i + 1]]
                text = str(took[0]) if took else "none of them"
            else:
                text = "9" if "You take the coin" in prompt else "3"
            out.append([Completion(text, prompt_tokens=len(prompt.split()), completion_tokens=1)])
        return out


@pytest.fixture
def env():
    return Field()


def build(registries, **params):
    return registries.build("evaluator", "best_of_n", {"max_new_tokens": 16, **params})


def test_oracle_keeps_the_best_reward_among_the_n_samples(registries, env):
    ev = build(registries, n=6, scorer="oracle")
    results = ev.evaluate(env.tasks("unseen"), env, ScriptedPolicy(ACTIONS))
    assert len(results) == 6
    varied = 0
    for r in results:
        info = r.trajectory.meta["best_of_n"]
        assert info["n"] == 6 and len(info["rewards"]) == 6 and info["upper_bound"] is True
        assert r.trajectory.reward == max(info["rewards"])
        assert info["rewards"][info["kept"]] == r.trajectory.reward
        varied += len(set(info["rewards"])) > 1
    assert varied >= 3  # the samples differ, so keeping the best is a choice
    metrics = ev.aggregate(results)
    assert metrics["scorer"] == "oracle" and metrics["oracle"] is True
    assert metrics["best_of_n"]["upper_bound"] is True and "UPPER BOUND" in metrics["best_of_n"]["note"]
    assert metrics["success_rate"] == metrics["best_of_n"]["pass_at_n"]
    assert metrics["best_of_n"]["sample_success_rate"] <= metrics["success_rate"]


@pytest.mark.parametrize("mode", ["score", "pick"])
def test_the_judge_keeps_what_the_base_model_prefers_and_never_reads_the_reward(registries, env, mode):
    policy = Judging(ACTIONS)
    ev = build(registries, n=5, scorer="judge", judge_mode=mode)
    results = ev.evaluate(env.tasks("unseen"), env, policy)
    base_calls = [c for c in policy.calls if c[0] == "base"]  # one judge call for all 6 tasks' prompts
    assert base_calls == [("base", 6 * 5 if mode == "score" else 6, 1)]
    for r in results:
        info = r.trajectory.meta["best_of_n"]
        assert info["scorer"] == "judge" and info["upper_bound"] is False
        assert r.trajectory.success == any(info["successes"])  # the judge here recognises the coin
        assert info["judge_prompt_tokens"] > 0
    metrics = ev.aggregate(results)
    assert metrics["oracle"] is False and metrics["best_of_n"]["judge_mode"] == mode
    failed = sum(not r.trajectory.success for r in results)  # `pick` is told "none of them" there: unparsed
    assert metrics["best_of_n"]["judge_unparsed"] == (0 if mode == "score" else failed)
    assert metrics["best_of_n"]["judge_tokens_per_task"] > 0


def test_an_unusable_judge_reply_keeps_the_first_sample(registries, env):
    """The scripted base model answers prose without a number: every reply is unparsed, sample 0 is kept."""
    ev = build(registries, n=3, scorer="judge")
    results = ev.evaluate(env.tasks("unseen")[:2], env, ScriptedPolicy(ACTIONS))
    assert all(r.trajectory.meta["best_of_n"]["kept"] == 0 for r in results)
    assert ev.aggregate(results)["best_of_n"]["judge_unparsed"] == 6


def test_tokens_of_all_n_samples_and_the_judge_are_counted(registries, env):
    ev = build(registries, n=4, scorer="judge")
    policy = Judging(ACTIONS)
    [result] = ev.evaluate(["field-1"], env, policy)
    info = result.trajectory.meta["best_of_n"]
    from sand_builtins.best_of_n import task_seed

    # the same 4 episodes, played again with the task's seed: their tokens, summed, plus the judge's
    samples = ev.play(["field-1"] * 4, env, policy,
                      SamplingParams(temperature=1.0, max_new_tokens=16, seed=task_seed(0, "field-1")))
    assert [s.trajectory.actions for s in samples] == info["actions"]
    assert info["sample_prompt_tokens"] == sum(s.prompt_tokens for s in samples)
    assert info["sample_completion_tokens"] == sum(s.completion_tokens for s in samples)
    assert result.prompt_tokens == info["sample_prompt_tokens"] + info["judge_prompt_tokens"]
    assert result.completion_tokens == info["sample_completion_tokens"] + info["judge_completion_tokens"]
    kept = samples[info["kept"]]
    assert result.prompt_tokens > kept.prompt_tokens and result.completion_tokens > kept.completion_tokens
    metrics = ev.aggregate([result])
    assert metrics["prompt_tokens_per_task"] == result.prompt_tokens


def _kept(results):
    return {r.trajectory.task_id: (r.trajectory.actions, r.trajectory.reward, r.prompt_tokens) for r in results}


def test_deterministic_across_calls_batchings_and_a_resumed_evaluation(registries, env, tmp_path):
    ev = build(registries, n=3, scorer="oracle")
    tasks = env.tasks("unseen")
    once = _kept(ev.evaluate(tasks, env, ScriptedPolicy(ACTIONS, seed=1)))
    again = _kept(ev.evaluate(tasks, env, ScriptedPolicy(ACTIONS, seed=2)))  # the policy's own rng is unused
    assert once == again
    split = _kept(ev.evaluate(tasks[3:], env, ScriptedPolicy(ACTIONS)) + ev.evaluate(tasks[:3], env,
                                                                                    ScriptedPolicy(ACTIONS)))
    assert split == once
    # through the engine's resumable loop: tasks 1 and 4 were recorded before an interruption
    log = UnitLog(tmp_path / "unseen.units.jsonl")
    evaluate_tasks(StageUnits.open("eval", log, [tasks[1], tasks[4]], "resume"), ev, env,
                   lambda: ScriptedPolicy(ACTIONS), batch_size=2)
    resumed = evaluate_tasks(StageUnits.open("eval", UnitLog(log.path), tasks, "resume"), ev, env,
                             lambda: ScriptedPolicy(ACTIONS), batch_size=4)
    assert _kept(resumed) == once
    other_seed = build(registries, n=3, scorer="oracle", seed=7)
    assert _kept(other_seed.evaluate(tasks, env, ScriptedPolicy(ACTIONS))) != once


def _full(results):
    """Everything a task's result holds: the kept trajectory (its ``meta["best_of_n"]``: every sample's rewards,
    actions, scores, the kept index, the token breakdown, unparsed replies) and the task's token counts."""
    return [(r.trajectory.to_dict(), r.prompt_tokens, r.completion_tokens) for r in results]


SCORERS = [("oracle", "score"), ("judge", "score"), ("judge", "pick")]


@pytest.mark.parametrize("mode", ["lockstep", "async"])
@pytest.mark.parametrize("scorer,judge_mode", SCORERS)
def test_tasks_of_one_call_are_played_together_with_the_samples_each_gets_alone(registries, env, scorer,
                                                                                 judge_mode, mode):
    """[a, b, c] in one call: their 3 x 5 episodes share the agent's calls (lock-step: the first depth is one
    call of 15 chats; async: all 15 in flight) and their judge prompts one call, and each task's result (kept
    sample, scores, rewards, tokens, unparsed count) is the one it gets evaluated alone: the fake policy honours
    per-chat seeds, as the built-in backends do."""
    tasks = ["field-0", "field-1", "field-4"]
    params = dict(n=5, scorer=scorer, judge_mode=judge_mode, rollout_mode=mode, max_concurrency=15)
    together_policy = Judging(ACTIONS)
    together = build(registries, **params).evaluate(tasks, env, together_policy)
    alone = [r for t in tasks for r in build(registries, **params).evaluate([t], env, Judging(ACTIONS))]
    assert [r.trajectory.task_id for r in together] == tasks
    assert _full(together) == _full(alone)
    assert len({tuple(map(tuple, r.trajectory.meta["best_of_n"]["actions"])) for r in together}) == 3
    agent_calls = [c[1] for c in together_policy.calls if c[0] == "agent"]
    if mode == "lockstep":
        assert agent_calls[0] == 15  # every task's 5 episodes in the first depth's call
    else:
        assert sum(agent_calls) == sum(len(s) for r in together for s in r.trajectory.meta["best_of_n"]["actions"])
    judge_calls = [c for c in together_policy.calls if c[0] == "base"]
    assert judge_calls == ([] if scorer == "oracle" else [("base", 15 if judge_mode == "score" else 3, 1)])


@pytest.mark.parametrize("mode", ["lockstep", "async"])
def test_max_concurrency_bounds_the_episodes_and_environments_played_together(registries, env, mode):
    """max_concurrency 10 with n = 5: tasks go in groups of 2 (10 episodes, two judge calls for three tasks), the
    evaluator keeps at most 10 environments (a JVM each for TextWorld-Express), and each task still gets the
    samples it gets alone."""
    tasks = ["field-0", "field-1", "field-4"]
    params = dict(n=5, scorer="judge", judge_mode="score", rollout_mode=mode, max_concurrency=10)
    policy = Judging(ACTIONS)
    ev = build(registries, **params)
    grouped = ev.evaluate(tasks, env, policy)
    alone = [r for t in tasks for r in build(registries, **params).evaluate([t], env, Judging(ACTIONS))]
    assert _full(grouped) == _full(alone)
    assert [len(pool.instances) for pool in ev._pools.values()] == [10]
    assert [c for c in policy.calls if c[0] == "base"] == [("base", 10, 1), ("base", 5, 1)]
    if mode == "lockstep":
        assert [c[1] for c in policy.calls if c[0] == "agent"][0] == 10


def test_keep_one_given_a_policy_as_before_says_what_it_now_takes(registries, env):
    """0.3.0's ``keep_one(samples, policy)`` is now ``keep_one(samples, judged)``: an old caller gets a TypeError that
    says so, not an unpacking error."""
    ev = build(registries, n=2, scorer="judge")
    samples = ev.play(["field-1"] * 2, env, ScriptedPolicy(ACTIONS), SamplingParams(temperature=1.0, seed=3))
    with pytest.raises(TypeError, match="no longer the policy"):
        ev.keep_one(samples, ScriptedPolicy(ACTIONS))


def test_play_takes_one_seed_per_episode(registries, env):
    """``play(..., seeds=)``: episode i samples with seeds[i]; without it the seeds derive from sampling.seed and
    the position, as before (the greedy evaluator's path)."""
    from sand_builtins.best_of_n import episode_seeds, task_seed

    ev = build(registries, n=3, scorer="oracle")
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=task_seed(0, "field-1"))
    derived = ev.play(["field-1"] * 3, env, ScriptedPolicy(ACTIONS), sampling)
    given = ev.play(["field-1"] * 3, env, ScriptedPolicy(ACTIONS), SamplingParams(temperature=1.0, max_new_tokens=16),
                    seeds=episode_seeds(0, "field-1", 3))
    assert _full(given) == _full(derived)
    reordered = ev.play(["field-1"] * 3, env, ScriptedPolicy(ACTIONS), sampling,
                        seeds=episode_seeds(0, "field-1", 3)[::-1])
    assert [r.trajectory.actions for r in reordered] == [r.trajectory.actions for r in derived][::-1]
    with pytest.raises(ValueError, match="2 seeds for 3 episodes"):
        ev.play(["field-1"] * 3, env, ScriptedPolicy(ACTIONS), sampling, seeds=[1, 2])


def test_validation_refuses_a_bad_scorer(registries):
    from sand_framework.config import load_recipe, validate
    from sand_framework.errors import RecipeError

    data, _ = load_recipe("smoke", ["evaluator=best_of_n", "evaluator.scorer=reward_model", "evaluator.n=0"])
    with pytest.raises(RecipeError) as err:
        validate(data, registries)
    text = "\n".join(err.value.problems)
    assert "evaluator[best_of_n].scorer: must be one of" in text and "evaluator[best_of_n].n: must be >= 1" in text


def test_real_path_on_textworld_express_with_the_tiny_model(registries, policy, twx):
    """The transformers policy (per-row seeded sampling) on the tiny random model: three tasks in one call give each
    task the result it gets alone, for the oracle and for the judge in both modes (same episodes in all three)."""
    tasks = twx.tasks("unseen")[:3]
    evs = {(scorer, mode): registries.build("evaluator", "best_of_n", {
        "n": 2, "scorer": scorer, "judge_mode": mode, "max_new_tokens": 8, "max_steps": 2,
        "judge_max_new_tokens": 4}) for scorer, mode in SCORERS}
    shared = evs[SCORERS[0]].pool(twx)
    for ev in evs.values():  # one set of warm environments (JVMs) for all three, as one evaluator keeps across calls
        ev._pools[id(twx)] = shared
    try:
        together = {k: ev.evaluate(tasks, twx, policy) for k, ev in evs.items()}
        alone = {k: [r for t in tasks for r in ev.evaluate([t], twx, policy)] for k, ev in evs.items()}
    finally:
        evs[SCORERS[0]].close()
    for key, results in together.items():
        assert [r.trajectory.task_id for r in results] == tasks
        assert _full(results) == _full(alone[key]), key
        for r in results:
            info = r.trajectory.meta["best_of_n"]
            assert len(info["rewards"]) == 2 and 1 <= len(r.trajectory.steps) <= 2
            assert r.prompt_tokens == info["sample_prompt_tokens"] + info["judge_prompt_tokens"] > 0
            assert (info["judge_prompt_tokens"] > 0) == (key[0] == "judge")
    actions = {k: [r.trajectory.meta["best_of_n"]["actions"] for r in v] for k, v in together.items()}
    assert actions[("oracle", "score")] == actions[("judge", "score")] == actions[("judge", "pick")]
    metrics = evs[("judge", "score")].aggregate(together[("judge", "score")])
    assert metrics["tasks"] == 3 and metrics["scorer"] == "judge"
