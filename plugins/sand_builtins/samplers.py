"""Candidate samplers: the agent's own samples (SAS) and the base model's imagination (w/o SAS)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Interval

from sand_framework import hookimpl
from sand_framework.components import Policy, Proposal, Sampler, SampleRequest
from sand_framework.prompting import parse_turn
from sand_framework.types import SamplingParams

MAX_SAMPLES = 100
"""Most candidates a sampler proposes per step: each is a generation at every step of every trajectory, so a
larger N (``sampler.n=1000000000``) can only be a typo."""

IMAGINE_PROMPT = """Below is an agent's interaction with a text environment so far.

{history}

Propose {n} different actions the agent could take next. Each must be a valid command for this environment.
Write exactly one per line, in the form:
Action: <command>"""
"""w/o SAS: the base model imagines candidates in context instead of sampling the agent."""


class SelfConsistencySampler(Sampler["SelfConsistencySampler.Params"]):
    """N samples from the current agent at temperature T, all chats in one batched call (SAND's SAS)."""

    name = "self_consistency"
    description = "sample N actions from the current agent (paper: N=5, temperature 1.0)"

    @classmethod
    def agent_token_budget(cls, params):
        return ("max_new_tokens", params.max_new_tokens)

    @dataclass
    class Params:
        n: Annotated[int, Interval(ge=1, le=MAX_SAMPLES)] = 5
        """N: actions sampled from the agent per expert step (the paper: 5); at most 100 (each costs a
        generation at every step of every trajectory; more is a typo, not an experiment)."""
        temperature: Annotated[float, Ge(0.0)] = 1.0
        """Sampling temperature of the N actions (the paper: 1.0; 0 makes all N the same)."""
        max_new_tokens: Annotated[int, Ge(1)] = 64
        """Token budget of each sampled reply (thought and action); ``sand validate`` checks it holds the
        longest trained thought plus an action."""

    def sample(self, requests: list[SampleRequest], policy: Policy, seed: int | None = None) -> list[list[Proposal]]:
        if not requests:
            return []
        sp = SamplingParams(n=self.params.n, temperature=self.params.temperature,
                            max_new_tokens=self.params.max_new_tokens, seed=seed)
        outputs = policy.generate([r.chat for r in requests], sp, role="agent")
        out = []
        for completions in outputs:
            props = []
            for c in completions:
                t = parse_turn(c.text)
                props.append(Proposal(thought=t.thought, action=t.action, valid=t.valid, tokens=c.completion_tokens))
            out.append(props)
        return out


class ImaginedSampler(Sampler["ImaginedSampler.Params"]):
    """Ablation *w/o SAS*: the frozen base model lists N candidate actions in one reply."""

    name = "imagined"
    description = "the base model imagines N candidate actions in-context (ablation w/o SAS)"

    @dataclass
    class Params:
        n: Annotated[int, Interval(ge=1, le=MAX_SAMPLES)] = 5
        """Candidate actions the base model is asked to list per step; at most 100."""
        temperature: Annotated[float, Ge(0.0)] = 0.0
        """Sampling temperature of the base model's one reply (0 = greedy)."""
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of that reply (all N actions share it)."""
        history_turns: Annotated[int, Ge(0)] = 6
        """Most recent chat turns shown to the base model (the task is always shown)."""

    def _history(self, req: SampleRequest) -> str:
        chat = req.chat[2:]  # drop instruction + OK: the base model needs the situation, not the format
        if len(chat) > 1 + self.params.history_turns:
            chat = chat[:1] + chat[-self.params.history_turns:]
        return "\n".join(m["content"] for m in chat)

    def sample(self, requests: list[SampleRequest], policy: Policy, seed: int | None = None) -> list[list[Proposal]]:
        if not requests:
            return []
        prompts = [[{"role": "user", "content": IMAGINE_PROMPT.format(history=self._history(r), n=self.params.n)}]
                   for r in requests]
        sp = SamplingParams(n=1, temperature=self.params.temperature, max_new_tokens=self.params.max_new_tokens, seed=seed)
        outputs = policy.generate(prompts, sp, role="base")
        out = []
        for (completion, *_) in outputs:
            actions = [m.strip() for m in re.findall(r"action\s*:\s*(.+)", completion.text, re.IGNORECASE)]
            props = [Proposal(thought="", action=a, valid=bool(a) and len(a) <= 200) for a in actions[: self.params.n]]
            props += [Proposal(thought="", action="", valid=False)] * (self.params.n - len(props))
            out.append(props)
        return out


class NoCandidatesSampler(Sampler["NoCandidatesSampler.Params"]):
    """The *SFT control*: proposes nothing, so no step has a second candidate and none is deliberated.

    A SAND iteration with this sampler re-trains on the unchanged expert
    trajectories for the iteration's epochs, which separates "more training"
    from "training on deliberations" at an equal step budget. Costs no model call.
    """

    name = "none"
    description = "no candidates: nothing is deliberated, the iteration is plain SFT (the SFT control)"

    @dataclass
    class Params:
        pass

    def sample(self, requests: list[SampleRequest], policy: Policy, seed: int | None = None) -> list[list[Proposal]]:
        return [[] for _ in requests]


@hookimpl
def sand_register_samplers(register):
    register(SelfConsistencySampler)
    register(ImaginedSampler)
    register(NoCandidatesSampler)
