"""The grounded critic and synthesizer (an upper-bound arm) on real TextWorld-Express rollouts.

Rollouts come from the real in-process executor on the real environment, with
scripted candidate actions; the continuation after a candidate and the token
counts use a tiny real transformers model. One engine-level test drives the
whole synthesis pass with the scripted policy of ``tests/scripted.py``.
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("textworld_express")

from scripted import ScriptedPolicy  # noqa: E402

from sand_framework.components import CritiqueRequest, RolloutRequest, SynthesisRequest  # noqa: E402
from sand_framework.deliberation import concludes_with, is_deliberation, quoted_actions  # noqa: E402
from sand_framework.engine.expert import expert_trajectory  # noqa: E402
from sand_framework.engine.synthesis import Components, synthesize_batch  # noqa: E402
from sand_framework.types import Candidate, Rollout, Step, Trajectory  # noqa: E402

INVALID = "dance wildly"


@pytest.fixture(scope="module")
def env():
    from sand_builtins.environments.textworld_express import TextWorldExpressEnv

    e = TextWorldExpressEnv(TextWorldExpressEnv.Params(n_train=20, n_seen=2, n_unseen=2, max_steps=10))
    yield e
    e.close()


@pytest.fixture(scope="module")
def coin_traj(env):
    """An expert trajectory of two steps: walk into the coin's room, take the coin."""
    for tid in env.tasks("train"):
        traj = expert_trajectory(env, tid)
        if len(traj.steps) == 2:
            return traj
    raise AssertionError("no two-step coin game among the first 20")


@pytest.fixture
def executor(registries):
    made = []

    def build(max_rollout_steps: int):
        ex = registries.build("executor", "in_process", {"max_rollout_steps": max_rollout_steps})
        made.append(ex)
        return ex

    yield build
    for ex in made:
        ex.close()


def _other_move(env, traj, step_index: int) -> str:
    """A valid move at that step that is not the expert's."""
    env.replay(traj.task_id, traj.actions[:step_index])
    moves = sorted(a for a in set(env._valid.values()) if a.startswith("move ") and a != traj.steps[step_index].action)
    return moves[0]


def _rollouts(env, executor, policy, traj, step_index, actions, max_rollout_steps=0):
    cands = [Candidate(a, is_expert=(a == traj.steps[step_index].action)) for a in actions]
    reqs = [RolloutRequest(traj, step_index, c, env.max_steps(traj.task_id)) for c in cands]
    return cands, executor(max_rollout_steps).run(reqs, env, policy, seed=3)


def test_registered_labelled_and_never_the_default(registries):
    from sand_framework.config import load_recipe

    critic, synth = registries["critic"].get("grounded_critic"), registries["synthesizer"].get("grounded_synthesizer")
    assert "UPPER BOUND" in critic.description and "not SAND's self-critique" in critic.description
    assert "UPPER BOUND" in synth.description
    data, _ = load_recipe("quickstart", [])
    assert data["critic"]["name"] != "grounded_critic" and data["synthesizer"]["name"] != "grounded_synthesizer"


def test_critiques_follow_what_the_rollouts_did(registries, env, executor, policy, coin_traj):
    """At the coin: taking it is rewarded, walking away and an invalid command are not; each critique says so."""
    expert = coin_traj.steps[1].action
    assert expert == "take coin"
    away = _other_move(env, coin_traj, 1)
    cands, ros = _rollouts(env, executor, policy, coin_traj, 1, [expert, away, INVALID])
    assert [r.reward for r in ros] == [1.0, 0.0, 0.0] and ros[0].success
    critic = registries.build("critic", "grounded_critic")
    crits = critic.critique([CritiqueRequest(coin_traj, 1, c, r) for c, r in zip(cands, ros)], policy, seed=0)
    assert [c.candidate for c in crits] == [expert, away, INVALID]
    assert [c.rollout_reward for c in crits] == [1.0, 0.0, 0.0]
    took, walked, junk = (c.text for c in crits)
    assert took.startswith("If I take coin, that completes the task")
    assert walked.startswith(f"If I {away}, I make no progress")
    room = re.search(r"You are in the ([^.]+)\.", ros[1].steps[0].observation).group(1)
    assert f"I am in the {room}" in walked  # the observation it led to, paraphrased in the first person
    assert "does not understand" in junk and "no progress" in junk
    for text, ro in zip((took, walked, junk), ros):
        assert 1 <= len(re.findall(r"[.!?](?:\s|$)", text)) <= 3, text
        assert '"' not in text and not re.search(r"\byou\b", text, re.I)  # first person, no quotes
        assert ro.steps[0].observation not in text or len(ro.steps[0].observation) < 30  # no long verbatim quote
    assert critic.critique([CritiqueRequest(coin_traj, 1, c, r) for c, r in zip(cands, ros)], policy) == crits


def test_partial_reward_and_continuation(registries, executor, policy):
    """twc rewards each object put away: a partial rollout is reported as partial; the continuation after the
    candidate (the tiny model's replies) counts in the step total."""
    from sand_builtins.environments.textworld_express import TextWorldExpressEnv

    twc = TextWorldExpressEnv(TextWorldExpressEnv.Params(game="twc", game_params="numLocations=1,numItemsToPutAway=2",
                                                         n_train=2, n_seen=1, n_unseen=1, max_steps=12))
    try:
        traj = expert_trajectory(twc, twc.tasks("train")[0])
        first = traj.steps[0].action
        assert first.startswith("take ")
        cands, ros = _rollouts(twc, executor, policy, traj, 0, [first, "look around"], max_rollout_steps=2)
    finally:
        twc.close()
    assert ros[0].reward > 0 and not ros[0].success and ros[1].reward == 0
    assert len(ros[0].steps) == 3  # the candidate and two steps of the agent's continuation
    crits = registries.build("critic", "grounded_critic").critique(
        [CritiqueRequest(traj, 0, c, r) for c, r in zip(cands, ros)], policy)
    assert f"stands at {round(100 * ros[0].reward)}% done after 3 steps, not finished" in crits[0].text
    assert "no progress on the task in 3 steps" in crits[1].text
    assert "Partial progress" in crits[0].text


def test_synthesized_thought_weighs_all_and_leads_to_the_expert(registries, env, executor, policy, coin_traj):
    expert = coin_traj.steps[1].action
    away = _other_move(env, coin_traj, 1)
    cands, ros = _rollouts(env, executor, policy, coin_traj, 1, [away, INVALID, expert])
    crits = registries.build("critic", "grounded_critic").critique(
        [CritiqueRequest(coin_traj, 1, c, r) for c, r in zip(cands, ros)], policy)
    # (the tiny test model's tokenizer needs ~3 tokens a word; SmolLM2's fits this in the default 80)
    synth = registries.build("synthesizer", "grounded_synthesizer", {"max_tokens": 240})
    req = SynthesisRequest(coin_traj, 1, cands, crits)
    [res] = synth.synthesize([req], policy, seed=0)
    # the very check the `deliberation` synthesizer accepts model output with
    assert is_deliberation(res.thought) and concludes_with(res.thought, expert) and res.status == "ok"
    assert res.thought.endswith(f'So I will "{expert}".')
    assert set(quoted_actions(res.thought)) == {away, INVALID, expert}
    assert "completes the task" in res.thought and "no progress" in res.thought
    assert "I am in the" in res.thought  # what walking away shows, paraphrased
    assert policy.count_tokens(res.thought) <= synth.params.max_tokens
    assert synth.synthesize([req], policy, seed=1) == [res]  # deterministic, seed-independent


def test_keep_opens_the_deliberation_with_the_experts_own_thought(registries, env, executor, policy, coin_traj):
    """``expert_thought: keep``: the expert's rationale stays, word for word, and the weighing follows it."""
    expert = coin_traj.steps[1].action
    cands, ros = _rollouts(env, executor, policy, coin_traj, 1, [_other_move(env, coin_traj, 1), expert])
    crits = registries.build("critic", "grounded_critic").critique(
        [CritiqueRequest(coin_traj, 1, c, r) for c, r in zip(cands, ros)], policy)
    traj = Trajectory.from_dict(coin_traj.to_dict())
    traj.steps[1].thought = 'The coin is "probably" east of here, so I head that way.'
    req = SynthesisRequest(traj, 1, cands, crits)
    [replaced] = registries.build("synthesizer", "grounded_synthesizer", {"max_tokens": 240}).synthesize([req], policy)
    [kept] = registries.build("synthesizer", "grounded_synthesizer",
                              {"max_tokens": 240, "expert_thought": "keep"}).synthesize([req], policy)
    assert kept.status == "ok" and kept.thought.startswith("The coin is 'probably' east of here, so I head that way. ")
    assert "east of here" not in replaced.thought and kept.thought.endswith(f'So I will "{expert}".')
    assert policy.count_tokens(kept.thought) <= 240


def test_token_budget_keeps_every_candidate_named(registries, env, executor, policy, coin_traj):
    env.replay(coin_traj.task_id, coin_traj.actions[:1])
    actions = sorted(set(env._valid.values())) + [INVALID]
    expert = coin_traj.steps[1].action
    cands, ros = _rollouts(env, executor, policy, coin_traj, 1, actions)
    crits = registries.build("critic", "grounded_critic").critique(
        [CritiqueRequest(coin_traj, 1, c, r) for c, r in zip(cands, ros)], policy)
    def thought(budget: int) -> str:
        synth = registries.build("synthesizer", "grounded_synthesizer", {"max_tokens": budget})
        [res] = synth.synthesize([SynthesisRequest(coin_traj, 1, cands, crits)], policy)
        assert is_deliberation(res.thought) and concludes_with(res.thought, expert), (budget, res.thought)
        assert set(quoted_actions(res.thought)) == {c.action for c in cands}  # every candidate stays named
        return res.thought

    full, shortest = thought(2000), thought(16)
    n_full, n_short = policy.count_tokens(full), policy.count_tokens(shortest)
    assert n_short < n_full
    for budget in range(n_short, n_full, max(1, (n_full - n_short) // 6)):
        cut = thought(budget)
        assert policy.count_tokens(cut) <= budget and len(cut) <= len(full)
    assert registries["synthesizer"].get("grounded_synthesizer").thought_token_budget(
        registries.build("synthesizer", "grounded_synthesizer").params) == ("max_tokens", 80)


def test_batches_keep_order_and_bad_inputs(registries, env, executor, policy, coin_traj):
    critic = registries.build("critic", "grounded_critic")
    synth = registries.build("synthesizer", "grounded_synthesizer")
    assert critic.critique([], policy) == [] and synth.synthesize([], policy) == []
    a0 = _other_move(env, coin_traj, 0)
    c0, r0 = _rollouts(env, executor, policy, coin_traj, 0, [coin_traj.steps[0].action, a0])
    c1, r1 = _rollouts(env, executor, policy, coin_traj, 1, ["take coin", INVALID])
    reqs = [CritiqueRequest(coin_traj, i, c, r) for i, cs, rs in ((0, c0, r0), (1, c1, r1)) for c, r in zip(cs, rs)]
    crits = critic.critique(reqs, policy)
    assert [c.candidate for c in crits] == [r.candidate.action for r in reqs]
    assert crits == [critic.critique([r], policy)[0] for r in reqs]  # batching changes nothing
    results = synth.synthesize([SynthesisRequest(coin_traj, 0, c0, crits[:2]),
                                SynthesisRequest(coin_traj, 1, c1, crits[2:])], policy)
    assert concludes_with(results[0].thought, coin_traj.steps[0].action)
    assert concludes_with(results[1].thought, "take coin")
    from sand_framework.errors import ComponentError

    with pytest.raises(ComponentError, match="needs each candidate's rollout"):
        critic.critique([CritiqueRequest(coin_traj, 0, c0[0], None)], policy)
    broken = Rollout(task_id=coin_traj.task_id, prefix_len=0, candidate=a0, error="replay diverged")
    assert critic.critique([CritiqueRequest(coin_traj, 0, c0[1], broken)], policy)[0].text == \
        f"I cannot tell what would happen if I {a0}."


def test_engine_synthesis_pass_with_grounded_components(registries, env):
    """The whole SAS -> rollouts -> critique -> synthesis pass with the grounded arm: every deliberated step gets a
    checked thought ending in the expert action; the expert's actions and other steps are untouched."""
    trajs = [expert_trajectory(env, t) for t in env.tasks("train")[:3]]
    b = registries.build
    comps = Components(environment=env, policy=ScriptedPolicy(), detector=b("detector", "set_size"),
                       sampler=b("sampler", "self_consistency", {"n": 4}),
                       executor=b("executor", "in_process", {"max_rollout_steps": 2}),
                       critic=b("critic", "grounded_critic"), synthesizer=b("synthesizer", "grounded_synthesizer"))
    try:
        outs = synthesize_batch(trajs, comps, seed=11)
    finally:
        comps.executor.close()
    records = [r for o in outs for r in o.records]
    assert records and all(r.synthesis.status == "ok" for r in records)
    for orig, out in zip(trajs, outs):
        assert out.trajectory.actions == orig.actions
        for i, step in enumerate(out.trajectory.steps):
            if step.deliberated:
                assert concludes_with(step.thought, step.action) and is_deliberation(step.thought)
            else:
                assert step.thought == orig.steps[i].thought and step.thought  # the expert's own ReAct thought
    for rec in records:
        for crit, ro in zip(rec.critiques, rec.rollouts):
            assert bool(re.search(r"completes? the task", crit.text)) == ro.success


def test_critic_sentences_for_an_invalid_first_step_that_the_continuation_fixes():
    """A rollout whose candidate was invalid but whose continuation succeeded: the critique reports both."""
    from sand_builtins.grounded import GroundedCritic

    from sand_framework.types import Trajectory

    traj = Trajectory("t", "textworld_express", "", "Task: Your task is to find the coin.\nObservation: A room.",
                      [Step("", "take coin", "You take the coin.")])
    ro = Rollout("t", 0, INVALID, [Step("", INVALID, "Unknown action: I'm not sure what you mean."),
                                   Step("", "take coin", "You take the coin.")], reward=1.0, success=True, done=True)
    text = GroundedCritic().text(CritiqueRequest(traj, 0, Candidate(INVALID), ro))
    assert text.startswith(f"If I {INVALID}, I complete the task within 2 steps.")
    assert "does not understand that action" in text
    # progress made before the step is not credited to an invalid action: its lesson is the invalid one
    stuck = Rollout("t", 0, INVALID, ro.steps[:1], reward=0.5, success=False, done=True)
    text = GroundedCritic().text(CritiqueRequest(traj, 0, Candidate(INVALID), stuck))
    assert "stands at 50% done after 1 step" in text and text.endswith("only wastes a step.")
