"""Action critics: execution-guided critique (EAC) and its ablation without rollouts.

Both use the frozen base model at temperature 0. The prompts are here, in one
place, because they define what the synthesized data teaches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge, Interval

from sand_framework import hookimpl
from sand_framework.components import Critic, CritiqueRequest, Policy
from sand_framework.errors import ComponentError
from sand_framework.types import Critique, Rollout, SamplingParams

EAC_PROMPT = """You are an agent solving a task in a text environment.

Task: {task}
Recent progress:
{history}

You are considering the action "{action}". You imagine what would happen next:
{rollout}
Imagined outcome: {outcome}

In at most 3 sentences, in the first person, judge the action "{action}": is it a good next step and why?
Speak as if you reasoned it out yourself. Do not quote or mention the imagined steps, and do not mention any help.
State the general commonsense lesson that makes the action good or bad."""
"""Execution-guided critique: the rollout is the agent's private mental simulation."""

NO_ROLLOUT_PROMPT = """You are an agent solving a task in a text environment.

Task: {task}
Recent progress:
{history}

In at most 3 sentences, in the first person, judge the action "{action}" as the next step: is it good and why?
State the general commonsense lesson behind your judgement."""
"""Ablation w/o EAC: judge the candidate from the situation alone."""


def _history(req: CritiqueRequest, turns: int) -> str:
    steps = req.trajectory.steps[: req.step_index][-turns:]
    if not steps:
        return "(nothing yet)"
    return "\n".join(f"> {s.action}\n{s.observation}" for s in steps)


def _rollout_text(rollout: Rollout, max_steps: int) -> str:
    lines = [f"> {s.action}\n{s.observation}" for s in rollout.steps[:max_steps]]
    if len(rollout.steps) > max_steps:
        lines.append(f"... ({len(rollout.steps) - max_steps} more steps)")
    return "\n".join(lines) or "(nothing happened)"


def _outcome(rollout: Rollout) -> str:
    if rollout.error:
        return "the simulation failed"
    if rollout.success:
        return f"the task is completed (reward {rollout.reward:.2f})"
    return f"the task is not completed (reward {rollout.reward:.2f})"


def first_sentences(text: str, k: int = 3) -> str:
    """Keep at most ``k`` sentences: the critique's length limit is part of its contract."""
    return whole_sentences(text, k, cut_by_budget=False)[0]


_ENDS_A_SENTENCE = re.compile(r"[.!?][\"')\]]*$")


def whole_sentences(text: str, k: int = 3, cut_by_budget: bool = False) -> tuple[str, bool]:
    """At most ``k`` sentences, and, when the token budget ended the text (``cut_by_budget``), without the
    unfinished sentence it was cut in: a fragment ("I should not go west because the") would go verbatim into
    training targets. Returns the text and whether a fragment was dropped."""
    parts = [p for p in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if p]
    kept = parts[:k]
    if cut_by_budget and len(parts) <= k and kept and not _ENDS_A_SENTENCE.search(kept[-1]):
        return " ".join(kept[:-1]).strip(), True
    return " ".join(kept).strip(), False


class RolloutCritic(Critic["RolloutCritic.Params"]):
    """SAND's execution-guided action critique: judge each candidate in light of its rollout."""

    name = "rollout_critic"
    description = "base-model critique of each candidate given its rollout (EAC)"
    needs_rollouts = True

    @dataclass
    class Params:
        temperature: Annotated[float, Ge(0.0)] = 0.0
        """Sampling temperature of the base model's critiques (0 = greedy)."""
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of each critique (it is cut to its first three sentences after, and a sentence the budget
        ended is dropped; the synthesis statistics count those, ``critiques_truncated``)."""
        history_steps: Annotated[int, Ge(0)] = 4
        """Expert steps before t shown to the critic."""
        rollout_steps: Annotated[int, Interval(ge=0, le=1000)] = 6
        """Rollout steps shown to the critic (EAC only); at most 1000."""

    def prompt(self, req: CritiqueRequest) -> str:
        if req.rollout is None:
            raise ComponentError(f"critic {self.name!r} needs each candidate's rollout (needs_rollouts = True), but "
                                 f"{req.trajectory.task_id} step {req.step_index} came without one; the caller must "
                                 "run the executor first, or use a critic that needs none (no_rollout_critic)")
        return EAC_PROMPT.format(task=req.trajectory.task, history=_history(req, self.params.history_steps),
                                 action=req.candidate.action, rollout=_rollout_text(req.rollout, self.params.rollout_steps),
                                 outcome=_outcome(req.rollout))

    def critique(self, requests, policy: Policy, seed=None) -> list[Critique]:
        if not requests:
            return []
        chats = [[{"role": "user", "content": self.prompt(r)}] for r in requests]
        sp = SamplingParams(temperature=self.params.temperature, max_new_tokens=self.params.max_new_tokens, seed=seed)
        outputs = policy.generate(chats, sp, role="base")
        critiques = []
        for r, out in zip(requests, outputs):
            # A backend that does not count tokens (0) is taken to have hit the budget: a fragment is dropped.
            cut = out[0].completion_tokens == 0 or out[0].completion_tokens >= self.params.max_new_tokens
            text, truncated = whole_sentences(out[0].text, 3, cut_by_budget=cut)
            critiques.append(Critique(candidate=r.candidate.action, text=text, truncated=truncated,
                                      rollout_reward=r.rollout.reward if r.rollout else None))
        return critiques


class NoRolloutCritic(RolloutCritic):
    """Ablation *w/o EAC*: the base model judges candidates without executing them."""

    name = "no_rollout_critic"
    description = "base-model critique without rollouts (ablation w/o EAC)"
    needs_rollouts = False

    def prompt(self, req: CritiqueRequest) -> str:
        return NO_ROLLOUT_PROMPT.format(task=req.trajectory.task, history=_history(req, self.params.history_steps),
                                        action=req.candidate.action)


@hookimpl
def sand_register_critics(register):
    register(RolloutCritic)
    register(NoRolloutCritic)
