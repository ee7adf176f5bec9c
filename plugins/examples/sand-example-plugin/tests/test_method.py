"""The example iteration method: registered through the hook, built from params, and run on the puzzle."""

from __future__ import annotations

import pytest

import sand_example
from sand_example.lights import LightSwitchesEnv
from sand_example.methods import SuccessfulReplayMethod
from sand_framework.components import MethodTools, Policy
from sand_framework.plugins import PluginSet
from sand_framework.types import Step, Trajectory


class NoModel(Policy):
    name = "no_model"

    def setup(self, base_model):
        pass

    def set_agent_weights(self, weights):
        pass

    def generate(self, chats, sampling, role="agent"):
        raise AssertionError("successful_replay calls no model")


def expert(env: LightSwitchesEnv, task_id: str) -> Trajectory:
    traj = Trajectory(task_id=task_id, env=env.name, instruction=env.instruction(), task=env.reset(task_id))
    for action in env.expert_actions(task_id):
        res = env.step(action)
        traj.steps.append(Step(thought="", action=action, observation=res.observation))
        traj.reward, traj.success = res.reward, res.success
    return traj


@pytest.fixture
def env():
    e = LightSwitchesEnv()
    yield e
    e.close()


def test_registered_as_a_method():
    ps = PluginSet()
    ps.load_builtins()
    ps.register(sand_example, "example", sand_example.__version__, "module")
    regs = ps.registries()
    assert regs["method"].entries["successful_replay"].plugin == "example"
    assert regs.build("method", "successful_replay", {"min_reward": 0.5}).params.min_reward == 0.5


def test_keeps_the_trajectories_that_replay_to_the_goal(env):
    good = [expert(env, t) for t in env.tasks("train")[:3]]
    cut = Trajectory.from_dict(good[0].to_dict())
    cut.steps = cut.steps[:-1]  # one switch short of the goal
    trajs = [*good, cut]
    tools = MethodTools(env=env, policy=NoModel(), component=lambda slot: None, iteration=1,
                        weights={"agent": None, "sft": None, "base": None})
    method = SuccessfulReplayMethod()
    units = method.build(trajs, tools, seed=0)
    assert [u["kept"] for u in units] == [True, True, True, False]
    data = method.assemble(units, trajs)
    assert data.trajectories == good and data.next_expert == good
    assert method.summarize(units)["kept"] == 3
    assert [u["kept"] for u in SuccessfulReplayMethod(SuccessfulReplayMethod.Params(min_reward=0.0)).build(
        trajs, tools, seed=0)] == [True] * 4
