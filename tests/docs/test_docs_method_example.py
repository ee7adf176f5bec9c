"""The minimal method of docs/writing-plugins.md ("Writing a method") registers, validates in a recipe, and builds and
assembles an iteration on a toy environment, as written there."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from scripted import ScriptedPolicy
from sand_framework.components import Environment, IterationData, MethodTools
from sand_framework.types import Step, StepResult, Trajectory

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-plugins.md"


def example_module() -> types.ModuleType:
    section = DOC.read_text(encoding="utf-8").split("## Writing a method", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    module = types.ModuleType("docs_self_imitation")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


class Line(Environment):
    """`go east` twice, then `take coin`."""

    name = "line"

    def __init__(self, params=None):
        super().__init__(params)
        self.pos = 0

    def tasks(self, split):
        return [f"line-{i}" for i in range(4)]

    def instruction(self):
        return "Reach the coin."

    def reset(self, task_id):
        self.pos = 0
        return "Task: take the coin."

    def step(self, action):
        if action == "go east" and self.pos < 2:
            self.pos += 1
            return StepResult(f"room {self.pos}", 0.0, False)
        if action == "take coin" and self.pos == 2:
            return StepResult("You take the coin.", 1.0, True, True)
        return StepResult("Nothing happens.", 0.0, False, valid=False)

    def max_steps(self, task_id):
        return 6

    def expert_actions(self, task_id):
        return ["go east", "go east", "take coin"]


def expert(env: Environment, task_id: str) -> Trajectory:
    t = Trajectory(task_id=task_id, env=env.name, instruction=env.instruction(), task=env.reset(task_id))
    for a in env.expert_actions(task_id):
        t.steps.append(Step("", a, env.step(a).observation))
    t.reward, t.success = 1.0, True
    return t


def test_the_documented_method_registers_validates_builds_and_assembles():
    from sand_framework.config import load_recipe, validate
    from sand_framework.plugins import PluginSet

    module = example_module()
    plugins = PluginSet()
    plugins.load_builtins()
    plugins.register(module, "docs_self_imitation", "0", "module")
    registries = plugins.registries()
    data, _ = load_recipe("smoke", ["method=self_imitation", "method.max_new_tokens=120"])
    recipe = validate(data, registries)
    assert recipe.slots["method"][0] == "self_imitation"

    method = registries.build("method", "self_imitation", {"max_new_tokens": 16})
    env = Line()
    trajs = [expert(env, t) for t in env.tasks("train")]
    tools = MethodTools(env=env, policy=ScriptedPolicy(("go east", "take coin")), component=lambda slot: None,
                        iteration=1, weights={"agent": None, "sft": None, "base": None})
    units = method.build(trajs, tools, seed=0)
    assert len(units) == len(trajs) and all("stats" in u for u in units)
    data = method.assemble(units, trajs)
    assert isinstance(data, IterationData) and data.next_expert == trajs
    successes = sum(u["stats"]["successes"] for u in units)
    assert 1 <= successes < len(trajs) and len(data.trajectories) == len(trajs) + successes
    assert method.summarize(units)["successes"] == successes
