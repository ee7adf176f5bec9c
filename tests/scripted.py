"""A scripted policy for engine unit tests: deterministic, fast, and obeying the Policy contract.

It is a stand-in for a model *only* inside unit tests of the engine's control
flow; every component is also tested against real models elsewhere.
"""

from __future__ import annotations

import random
import re

from sand_framework.components import Policy
from sand_framework.types import Completion


class ScriptedPolicy(Policy):
    name = "scripted"
    seeds_per_chat = True  # generate() below honours SamplingParams.seeds

    def __init__(self, actions=("move north", "move south", "move east", "move west", "take coin"), seed=0):
        super().__init__()
        self.actions = list(actions)
        self.rng = random.Random(seed)
        self.calls: list[tuple[str, int, int]] = []  # (role, chats, n)

    def setup(self, base_model):
        pass

    def set_agent_weights(self, weights):
        self.weights = weights

    def generate(self, chats, sampling, role="agent"):
        self.calls.append((role, len(chats), sampling.n))
        rng = random.Random(sampling.seed) if sampling.seed is not None else self.rng
        out = []
        for i, chat in enumerate(chats):
            if sampling.seeds:  # one seed per chat: its samples do not depend on the rest of the call
                rng = random.Random(sampling.seeds[i])
            prompt = chat[-1]["content"]
            if role == "agent":
                texts = [f"Thought: try.\nAction: {rng.choice(self.actions)}" for _ in range(sampling.n)]
            elif "ending by choosing" in prompt or "end by choosing" in prompt:
                expert = re.findall(r'choosing "([^"]+)"', prompt)[-1]
                texts = [f'I could "{self.actions[0]}" or "{expert}". So I will "{expert}".'] * sampling.n
            else:
                texts = ["I think this helps me reach the goal. It is sensible to explore."] * sampling.n
            out.append([Completion(t, prompt_tokens=len(prompt.split()), completion_tokens=len(t.split()))
                        for t in texts])
        return out
