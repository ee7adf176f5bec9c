"""Deliberation synthesis: weigh every (candidate, critique) pair in one thought that leads to the expert action."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Callable, Literal

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import Policy, SynthesisRequest, Synthesizer
from sand_framework.deliberation import passes_synthesis_check
from sand_framework.types import SamplingParams, SynthesisResult

SYNTHESIS_PROMPT = """You are an agent solving a task in a text environment.

Task: {task}
Current situation:
{situation}

You are weighing these possible next actions:
{options}

Write your reasoning as one short paragraph in the first person. Mention every action above in double quotes,
say briefly what you expect from each, and end by choosing "{expert}". Do not mention notes, critiques or help."""
"""The base model turns the candidates and their critiques into one deliberation."""

FALLBACK_OPENING = "Let me weigh my options."


def _first_sentence(text: str) -> str:
    m = re.match(r"(.+?[.!?])(\s|$)", text.strip())
    return m.group(1) if m else text.strip()


def fallback_thought(req: SynthesisRequest, expert: str, fits: Callable[[str], bool] = lambda _: True) -> str:
    """A deterministic deliberation built from the critiques: ``on_failure: template``, NOT the paper's method.

    The paper drops a synthesis that fails; this stitches the critiques verbatim and appends the expert action, so
    its training targets can call the chosen action bad and then choose it (measured in the CPU Table 1 v1: 28 of
    91), which is why it is only a named opt-in.

    It must fit the synthesizer's token budget like a generated thought (the
    agent's generation budgets are validated against that budget): when too
    long, each critique is cut to its first sentence, then the other
    candidates' critiques are dropped from the last, keeping every candidate
    named.
    """
    by_action = {c.candidate: c.text.strip() for c in req.critiques}
    others = [c.action for c in req.candidates if c.action != expert]

    def build(judge: Callable[[str], str], keep: int) -> str:
        parts = [FALLBACK_OPENING]
        for i, action in enumerate(others):
            text = (judge(by_action.get(action, "")) or "it does not look like the best step.") if i < keep else ""
            parts.append(f'If I "{action}": {text}' if text else f'"{action}" does not look like the best step.')
        if by_action.get(expert):
            parts.append(f'If I "{expert}": {judge(by_action[expert])}')
        parts.append(f'So I will "{expert}".')
        return " ".join(parts)

    thought = build(lambda t: t, len(others))
    for keep in range(len(others), -1, -1):
        if fits(thought):
            break
        thought = build(_first_sentence, keep)
    return thought


class DeliberationSynthesizer(Synthesizer["DeliberationSynthesizer.Params"]):
    """SAND's action deliberation synthesis with a check that the thought concludes with the expert action.

    An attempt is accepted when it names at least two candidates in quotes, the
    last one it names is the expert action and it repeats none of the prompts'
    scaffolding (:func:`~sand_framework.deliberation.passes_synthesis_check`);
    otherwise it is retried at a higher temperature. A step no attempt passes is
    ``failed``, as in the paper: it keeps the expert's thought and is not
    deliberated. ``on_failure: template`` writes :func:`fallback_thought` instead
    (not the paper's method). The result records which happened, so reports can
    show the failure rate.
    """

    name = "deliberation"
    description = "base-model deliberation over all candidates, checked to conclude with the expert action"

    @classmethod
    def thought_token_budget(cls, params):
        return ("max_new_tokens", params.max_new_tokens)

    @dataclass
    class Params:
        temperature: Annotated[float, Ge(0.0)] = 0.0
        """Sampling temperature of the first synthesis attempt (0 = greedy)."""
        retries: Annotated[int, Ge(0)] = 1
        """Extra attempts (at ``retry_temperature``) before the step counts as failed (``on_failure``)."""
        retry_temperature: Annotated[float, Ge(0.0)] = 0.7
        """Sampling temperature of the retries."""
        max_new_tokens: Annotated[int, Ge(1)] = 160
        """Longest synthesized thought in tokens (the agent's generation budgets are checked against it)."""
        situation_chars: Annotated[int, Ge(0)] = 600
        """Characters of the observation before the step (its end) shown in the synthesis prompt."""
        on_failure: Literal["drop", "template"] = "drop"
        """A step whose attempts all fail the check: ``drop`` (the paper's method: the step keeps the expert's
        thought and is not deliberated; recorded as ``failed``) or ``template`` (NOT the paper's method: a thought
        stitched from the critiques, :func:`fallback_thought`, recorded as ``fallback``)."""

    def prompt(self, req: SynthesisRequest) -> str:
        step = req.trajectory.steps[req.step_index]
        prev = req.trajectory.steps[req.step_index - 1].observation if req.step_index > 0 else req.trajectory.task
        by_action = {c.candidate: c.text for c in req.critiques}
        options = "\n".join(f'- "{c.action}": {by_action.get(c.action, "")}' for c in req.candidates)
        return SYNTHESIS_PROMPT.format(task=req.trajectory.task[:400], situation=prev[-self.params.situation_chars:],
                                       options=options, expert=step.action)

    def synthesize(self, requests, policy: Policy, seed=None) -> list[SynthesisResult]:
        results: list[SynthesisResult | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        for attempt in range(1 + self.params.retries):
            if not pending:
                break
            temp = self.params.temperature if attempt == 0 else self.params.retry_temperature
            sp = SamplingParams(temperature=temp, max_new_tokens=self.params.max_new_tokens,
                                seed=None if seed is None else seed + attempt)
            outs = policy.generate([[{"role": "user", "content": self.prompt(requests[i])}] for i in pending], sp,
                                   role="base")
            still = []
            for i, (c, *_) in zip(pending, outs):
                thought = " ".join(c.text.split())
                expert = requests[i].trajectory.steps[requests[i].step_index].action
                if passes_synthesis_check(thought, expert):
                    results[i] = SynthesisResult(thought, "ok" if attempt == 0 else "retried", attempt + 1)
                else:
                    still.append(i)
            pending = still
        for i in pending:
            if self.params.on_failure == "drop":
                results[i] = SynthesisResult("", "failed", 1 + self.params.retries)
                continue
            expert = requests[i].trajectory.steps[requests[i].step_index].action
            fits = lambda text: policy.count_tokens(text) <= self.params.max_new_tokens  # noqa: E731
            results[i] = SynthesisResult(fallback_thought(requests[i], expert, fits), "fallback",
                                         1 + self.params.retries)
        return results  # type: ignore[return-value]


@hookimpl
def sand_register_synthesizers(register):
    register(DeliberationSynthesizer)
