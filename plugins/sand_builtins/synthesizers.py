"""Deliberation synthesis: weigh every (candidate, critique) pair in one thought that leads to the expert action."""

from __future__ import annotations

from dataclasses import dataclass

from sand_framework import hookimpl
from sand_framework.components import Policy, SynthesisRequest, Synthesizer
from sand_framework.deliberation import concludes_with, is_deliberation
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


def fallback_thought(req: SynthesisRequest, expert: str) -> str:
    """A deterministic deliberation built from the critiques, used when the model's attempts fail the checks."""
    parts = [FALLBACK_OPENING]
    by_action = {c.candidate: c.text for c in req.critiques}
    for cand in req.candidates:
        if cand.action == expert:
            continue
        judgement = by_action.get(cand.action, "").strip() or "it does not look like the best step."
        parts.append(f'If I "{cand.action}": {judgement}')
    judgement = by_action.get(expert, "").strip()
    parts.append(f'If I "{expert}": {judgement}' if judgement else "")
    parts.append(f'So I will "{expert}".')
    return " ".join(p for p in parts if p)


class DeliberationSynthesizer(Synthesizer):
    """SAND's action deliberation synthesis with a check that the thought concludes with the expert action.

    An attempt is accepted when it names at least two candidates in quotes and
    the last one it names is the expert action; otherwise it is retried at a
    higher temperature, then replaced by :func:`fallback_thought`. The result
    records which happened, so reports can show the fallback rate.
    """

    name = "deliberation"
    description = "base-model deliberation over all candidates, checked to conclude with the expert action"

    @dataclass
    class Params:
        temperature: float = 0.0
        retries: int = 1
        """Extra attempts (at ``retry_temperature``) before the fallback."""
        retry_temperature: float = 0.7
        max_new_tokens: int = 160
        situation_chars: int = 600

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
                if is_deliberation(thought) and concludes_with(thought, expert):
                    results[i] = SynthesisResult(thought, "ok" if attempt == 0 else "retried", attempt + 1)
                else:
                    still.append(i)
            pending = still
        for i in pending:
            expert = requests[i].trajectory.steps[requests[i].step_index].action
            results[i] = SynthesisResult(fallback_thought(requests[i], expert), "fallback", 1 + self.params.retries)
        return results  # type: ignore[return-value]


@hookimpl
def sand_register_synthesizers(register):
    register(DeliberationSynthesizer)
