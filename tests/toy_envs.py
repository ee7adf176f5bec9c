"""A correct toy environment for unit tests of the conformance suite and of the detectors' checks (a unit test's
stand-in only: the product runs on the real environments)."""

from __future__ import annotations

from sand_framework.components import Environment
from sand_framework.types import StepResult


class Corridor(Environment):
    """A correct toy environment: walk east ``n`` rooms, then ``take coin``."""

    name = "corridor"

    def __init__(self, params=None):
        super().__init__(params)
        self.state: dict = {}

    def tasks(self, split):
        base = {"train": 0, "seen": 10, "unseen": 20}[split]
        return [f"corridor-{base + i}" for i in range(3)]

    def instruction(self):
        return "Walk east and take the coin. Reply 'Thought: ...\\nAction: ...'."

    def _length(self, task_id):
        return int(task_id.rsplit("-", 1)[1]) % 3 + 1

    def reset(self, task_id):
        self.state = {"task": task_id, "pos": 0, "done": False, "steps": 0}
        return f"Task: take the coin.\nObservation: room 0 of {task_id}"

    def _observe(self, text):
        return text

    def step(self, action):
        s = self.state
        if s["done"]:
            return StepResult("over", 1.0, True, True, valid=False)
        s["steps"] += 1
        n = self._length(s["task"])
        if action == "go east" and s["pos"] < n:
            s["pos"] += 1
            return StepResult(self._observe(f"room {s['pos']}"), 0.0, s["steps"] >= 10)
        if action == "take coin" and s["pos"] == n:
            s["done"] = True
            return StepResult("You take the coin.", self._reward(), True, True)
        return StepResult("Nothing happens.", 0.0, s["steps"] >= 10, valid=False)

    def _reward(self):
        return 1.0

    def max_steps(self, task_id):
        return 10

    def expert_actions(self, task_id):
        return ["go east"] * self._length(task_id) + ["take coin"]
