"""Every built-in synthesis component with a real transformers model and the real TextWorld-Express env.

The tiny random model writes junk, which is the point for half of these tests:
the components must turn junk into invalid proposals, empty critiques and
checked fallbacks, never into crashes or silently wrong data.
"""

from __future__ import annotations

import pytest

from sand_framework.components import CritiqueRequest, RolloutRequest, SampleRequest, SynthesisRequest
from sand_framework.deliberation import concludes_with
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Candidate, Step, Trajectory


@pytest.fixture
def expert(twx):
    task_id = twx.tasks("train")[1]
    t = Trajectory(task_id=task_id, env=twx.name, instruction=twx.instruction(), task=twx.reset(task_id))
    for a in twx.expert_actions(task_id):
        r = twx.step(a)
        t.steps.append(Step("", a, r.observation))
    return t


def test_self_consistency_and_imagined_samplers(registries, policy, expert):
    reqs = [SampleRequest(expert, i, trajectory_chat(expert, upto=i)) for i in range(len(expert.steps))]
    sc = registries.build("sampler", "self_consistency", {"n": 3, "max_new_tokens": 8})
    props = sc.sample(reqs, policy, seed=0)
    assert [len(p) for p in props] == [3] * len(reqs)
    assert all((p.valid and p.action) or (not p.valid and p.action == "") for ps in props for p in ps)
    again = sc.sample(reqs, policy, seed=0)
    assert [[p.action for p in ps] for ps in again] == [[p.action for p in ps] for ps in props]
    im = registries.build("sampler", "imagined", {"n": 4, "max_new_tokens": 8})
    assert [len(p) for p in im.sample(reqs, policy, seed=0)] == [4] * len(reqs)


def test_executor_rolls_out_candidates_with_the_model(registries, policy, expert, twx):
    ex = registries.build("executor", "in_process", {"max_rollout_steps": 2, "max_new_tokens": 8})
    try:
        reqs = [RolloutRequest(expert, 0, Candidate(expert.steps[0].action, is_expert=True), 10),
                RolloutRequest(expert, 0, Candidate("look around"), 10)]
        ros = ex.run(reqs, twx, policy, seed=1)
    finally:
        ex.close()
    assert [r.candidate for r in ros] == [expert.steps[0].action, "look around"]
    for r in ros:
        assert r.error is None and r.steps[0].action == r.candidate
        assert 1 <= len(r.steps) <= 3 and 0.0 <= r.reward <= 1.0
    # The expert's first action from the expert's start reproduces the expert's observation.
    assert ros[0].steps[0].observation == expert.steps[0].observation


def test_critics_and_synthesizer_with_a_real_model(registries, policy, expert):
    cands = [Candidate(expert.steps[0].action, is_expert=True), Candidate("look around")]
    from sand_framework.types import Rollout

    ros = [Rollout(expert.task_id, 0, c.action, [Step("", c.action, "You see things.")]) for c in cands]
    for name, rollouts in (("rollout_critic", ros), ("no_rollout_critic", [None, None])):
        critic = registries.build("critic", name, {"max_new_tokens": 12})
        crits = critic.critique([CritiqueRequest(expert, 0, c, r) for c, r in zip(cands, rollouts)], policy, seed=0)
        assert [c.candidate for c in crits] == [c.action for c in cands]
    synth = registries.build("synthesizer", "deliberation", {"max_new_tokens": 16, "retries": 1})
    [res] = synth.synthesize([SynthesisRequest(expert, 0, cands, crits)], policy, seed=0)
    assert res.status in {"ok", "retried", "failed"}  # never a template unless a recipe opts in
    assert concludes_with(res.thought, expert.steps[0].action) if res.status != "failed" else res.thought == ""


def test_greedy_evaluator_on_real_tasks(registries, policy, twx):
    ev = registries.build("evaluator", "greedy", {"max_new_tokens": 8, "max_steps": 3})
    try:
        results = ev.evaluate(twx.tasks("seen")[:2], twx, policy)
    finally:
        ev.close()
    assert len(results) == 2
    m = ev.aggregate(results)
    assert m["tasks"] == 2 and m["avg_steps"] <= 3 and m["prompt_tokens_per_task"] > 0
