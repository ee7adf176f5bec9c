"""The synthesis pass (SAS -> detector -> EAC rollouts -> critique -> synthesis) on the real TWX environment.

The policy is scripted so that disagreement is guaranteed and every branch of
the control flow runs; the same code runs with real models in test_pipeline.py.
"""

from __future__ import annotations

import pytest
from scripted import ScriptedPolicy
from synthesis_fixtures import OPEN, close_executors, components, expert_trajs

from sand_framework.deliberation import concludes_with, is_deliberation
from sand_framework.engine.pipeline import Pipeline
from sand_framework.engine.synthesis import synthesize_batch
from sand_framework.engine.expert import expert_trajectory


@pytest.fixture(autouse=True)
def _close_executors():
    yield
    close_executors()


def test_synthesis_deliberates_rolls_out_and_keeps_expert_actions(registries, twx):
    trajs = expert_trajs(twx)
    policy = ScriptedPolicy()
    comps = components(registries, twx, policy)
    outs = synthesize_batch(trajs, comps, seed=7)
    assert len(outs) == 2
    total_delib = sum(len(o.records) for o in outs)
    assert total_delib > 0
    for orig, out in zip(trajs, outs):
        assert out.trajectory.actions == orig.actions, "synthesis must never change the expert's actions"
        for rec in out.records:
            step = out.trajectory.steps[rec.step_index]
            assert step.deliberated and step.thought == rec.synthesis.thought
            assert concludes_with(step.thought, rec.expert_action) and is_deliberation(step.thought)
            actions = [c.action for c in rec.candidates]
            assert len(set(actions)) == len(actions) >= 2, "each distinct candidate appears once"
            assert [r.candidate for r in rec.rollouts] == actions, "every candidate rolled out exactly once"
            assert all(r.steps and r.steps[0].action == c for r, c in zip(rec.rollouts, actions))
            expert_ro = rec.rollouts[actions.index(rec.expert_action)]
            assert expert_ro.error is None
        untouched = [s for i, s in enumerate(out.trajectory.steps) if i not in {r.step_index for r in out.records}]
        assert all(s.thought == "expert thought" and not s.deliberated for s in untouched)
    # One batched sampling call for all steps of both trajectories, N samples each.
    role, chats, n = policy.calls[0]
    assert role == "agent" and chats == sum(len(t.steps) for t in trajs) and n == 4


def test_no_rollout_critic_skips_the_executor(registries, twx):
    trajs = expert_trajs(twx, 1)
    policy = ScriptedPolicy()
    comps = components(registries, twx, policy, critic="no_rollout_critic")
    outs = synthesize_batch(trajs, comps, seed=1)
    assert outs[0].records and all(r.rollouts == [] for r in outs[0].records)
    # agent calls: only the sampling one; no rollout continuation
    assert [c[0] for c in policy.calls].count("agent") == 1


def test_imagined_sampler_uses_the_base_model(registries, twx):
    trajs = expert_trajs(twx, 1)
    policy = ScriptedPolicy()
    comps = components(registries, twx, policy, sampler="imagined")
    synthesize_batch(trajs, comps, seed=1)
    assert policy.calls[0][0] == "base"


def test_consistent_samples_are_not_deliberated(registries, twx):
    trajs = expert_trajs(twx, 1)
    expert_first = trajs[0].steps[0].action
    policy = ScriptedPolicy(actions=[expert_first])
    comps = components(registries, twx, policy)
    out = synthesize_batch(trajs, comps, seed=1)[0]
    assert 0 not in {r.step_index for r in out.records}


def test_seed_makes_synthesis_reproducible(registries, twx):
    trajs = expert_trajs(twx, 1)
    a = synthesize_batch(trajs, components(registries, twx, ScriptedPolicy(seed=1)), seed=3)
    b = synthesize_batch(trajs, components(registries, twx, ScriptedPolicy(seed=2)), seed=3)
    assert [o.trajectory.to_dict() for o in a] == [o.trajectory.to_dict() for o in b]


def test_unit_seed_is_stable():
    from sand_framework.engine.pipeline import unit_seed

    assert unit_seed(0, 1, "x") == unit_seed(0, 1, "x") != unit_seed(0, 2, "x")
    assert Pipeline  # imported for the module's side-effect-free import check


def _expert_without_its_last_step(env):
    """A real expert trajectory whose final "take coin" is replaced by "look around": it never gets the reward."""
    from sand_framework.types import Step

    t = expert_trajectory(env, env.tasks("train")[0])
    assert t.success and t.steps[-1].action == "take coin"
    actions = t.actions[:-1] + ["look around"]
    results = env.replay(t.task_id, actions)
    t.steps = [Step("expert thought", a, r.observation) for a, r in zip(actions, results)]
    t.reward, t.success = results[-1].reward, False
    return t


@pytest.mark.parametrize("switch", [True, False])
def test_expert_switch_adopts_a_better_rollout(registries, twx, switch):
    """Where a candidate's real rollout gets the reward the expert missed, the switch replaces the expert from
    that step on (and only with expert_switch on)."""
    expert = _expert_without_its_last_step(twx)
    last = len(expert.steps) - 1
    comps = components(registries, twx, ScriptedPolicy(actions=["take coin"]))
    comps.executor = registries.build("executor", "in_process", {"expert_switch": switch})
    OPEN.append(comps.executor)
    [out] = synthesize_batch([expert], comps, seed=3)
    assert out.stats["expert_switches"] == int(switch)
    if not switch:
        assert out.trajectory.actions == expert.actions and not out.trajectory.success
        return
    traj = out.trajectory
    assert traj.actions == expert.actions[:last] + ["take coin"]
    assert traj.success and traj.reward == 1.0 and traj.meta["expert_switch"]["step"] == last
    assert all(r.step_index < last for r in out.records)
    assert not traj.steps[last].deliberated
