"""Grounded critic and synthesizer: an informative-deliberation UPPER BOUND, not SAND's self-critique.

SAND's critiques and deliberations are written by the agent's own base model.
With a 135M model they came out tautological ("it is not a good next step
because it is not a good next step"), so an experiment with them cannot tell
"a small agent cannot *use* deliberation" from "a small base model cannot
*write* it". These two components answer the first question alone: they write
critiques and deliberations deterministically, with no model, from what each
candidate's rollout actually did (the observation it led to, the reward and
success at the end, invalid actions). The data they make is what a perfect
critic could say, so results with them are an upper bound for SAND's critique
and synthesis at that model size, never a SAND result. Neither is a default;
a recipe must name them (``critic: {name: grounded_critic}``,
``synthesizer: {name: grounded_synthesizer}``).

They follow the paper's critic style: first person, the rollout treated as the
agent's own mental simulation ("If I move north, I complete the task within 2
steps"), short paraphrases instead of quotes, no mention of help; a general
lesson closes each critique.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import Critic, CritiqueRequest, Policy, SynthesisRequest, Synthesizer
from sand_framework.components.text_environment import EPISODE_OVER
from sand_framework.deliberation import passes_synthesis_check
from sand_framework.errors import ComponentError
from sand_framework.types import Critique, Rollout, SynthesisResult

INVALID_MARKERS = (
    "Unknown action",  # TextWorld-Express
    "No known action matches",  # ScienceWorld
    "Nothing happens",  # ALFWorld
    "Invalid reply",  # the engine: the reply had no parsable action
    EPISODE_OVER,  # any environment on the text-environment base
)
"""Observation openings that mean the action did nothing (each built-in environment's own wording)."""

_STOP = frozenset("""
your task this that then them once first with from environment take find place their into will which there these
those search have been also should what when where while about after before each other some more most such only
""".split())

LESSONS = {
    "success": "Heading for what the task needs is the best use of my limited steps.",
    "partial": "Partial progress helps, but it is not the same as finishing the task.",
    "none": "Steps that do not bring me closer to the goal only use up my limited budget.",
    "invalid": "An action the game does not understand only wastes a step.",
}
"""The closing commonsense sentence of a critique, by outcome."""


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s.strip()]


def first_person(sentence: str) -> str:
    """``"You are in the pantry."`` -> ``"I am in the pantry"``: the simulation is the agent's own."""
    s = sentence.strip().rstrip(".!")
    s = re.sub(r"\b[Yy]ou are\b", "I am", s)
    s = re.sub(r"\b[Yy]ou're\b", "I'm", s)
    s = re.sub(r"\b[Yy]ourself\b", "myself", s)
    s = re.sub(r"\b[Yy]our\b", "my", s)
    s = re.sub(r"\b[Yy]ou\b", "I", s)
    return s.replace('"', "'")


def _task_words(task: str) -> set[str]:
    """Content words of the task sentence(s): what makes an observation sentence worth mentioning."""
    head = task.split("Observation:", 1)[0]
    lines = [line for line in head.splitlines() if "task" in line.lower()] or head.splitlines()[:1]
    words = set(re.findall(r"[a-z]{4,}", " ".join(lines).lower()))
    return words - _STOP


def _cut(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts[:words])


def gist(observation: str, task: str, max_words: int) -> str:
    """The first sentence of ``observation`` in the first person, plus the first later sentence that
    mentions something the task is about ("I am in the pantry, and I also see a coin")."""
    sentences = _sentences(observation)
    if not sentences:
        return ""
    first = _cut(first_person(sentences[0]), max_words)
    keys = _task_words(task)
    for s in sentences[1:]:
        if keys & set(re.findall(r"[a-z]{4,}", s.lower())):
            more = _sentence_inner(first_person(s))
            if len((first + " " + more).split()) <= max_words:
                return f"{first}, and {more}"
            break
    return first


def _sentence_inner(text: str) -> str:
    """Lower-case the first letter for use after "First, " (but keep "I")."""
    return text if re.match(r"I\b", text) else text[:1].lower() + text[1:]


def _invalid(rollout: Rollout, markers: tuple[str, ...]) -> bool:
    return bool(rollout.steps) and rollout.steps[0].observation.strip().startswith(markers)


def outcome(rollout: Rollout, markers: tuple[str, ...]) -> str:
    """``success``, ``partial``, ``none`` or ``invalid``: what the rollout achieved, for the lesson."""
    if rollout.success:
        return "success"
    if _invalid(rollout, markers):
        return "invalid"  # any reward it shows was earned before this step
    return "partial" if rollout.reward > 0 else "none"


def verdict(action: str, rollout: Rollout) -> str:
    """The critique's first sentence: the candidate and where its rollout ended.

    A rollout's reward is the episode's score so far, progress made before the
    candidate included (the rollout does not record where it started), so a
    partial score is stated as where the task stands, not as what the
    candidate earned; candidates of one step share that starting point, so
    their figures compare.
    """
    k = len(rollout.steps)
    steps = f"{k} step{'s' if k != 1 else ''}"
    if rollout.success:
        if k <= 1:
            return f"If I {action}, that completes the task right away."
        return f"If I {action}, I complete the task within {steps}."
    if rollout.reward > 0:
        return f"If I {action}, the task stands at {round(100 * rollout.reward)}% done after {steps}, not finished."
    return f"If I {action}, I make no progress on the task in {steps}."


class GroundedCritic(Critic["GroundedCritic.Params"]):
    """Critiques written from each candidate's rollout (observation, reward, success); no model.

    An upper bound for SAND's execution-guided critique, not SAND's
    self-critique: see the module docstring. Each critique has up to three
    sentences: the verdict (where the rollout ended, in how many steps), the
    gist of the observation the candidate led to (or that the game did not
    understand it), and a general lesson.
    """

    name = "grounded_critic"
    description = ("UPPER BOUND, not SAND's self-critique: rule-written critique of each candidate from its "
                   "rollout's actual observations and reward (no model)")
    needs_rollouts = True

    @dataclass
    class Params:
        gist_words: Annotated[int, Ge(4)] = 16
        """Longest paraphrase of the observation a candidate leads to, in words, at least 4 (the rollout is never
        quoted at length)."""
        lesson: bool = True
        """End each critique with a general lesson for its outcome (:data:`LESSONS`)."""
        invalid_markers: list[str] = field(default_factory=lambda: list(INVALID_MARKERS))
        """Observation openings that mean the environment did not understand the action."""

    def text(self, req: CritiqueRequest) -> str:
        """The critique of one candidate; raises ValueError without a rollout (this critic needs them)."""
        rollout = req.rollout
        action = " ".join(req.candidate.action.replace('"', "'").split())
        if rollout is None:
            raise ComponentError(f"critic {self.name!r} needs each candidate's rollout (needs_rollouts = True; it "
                                 f"writes from them), but {req.trajectory.task_id} step {req.step_index} came "
                                 "without one; the caller must run the executor first")
        if rollout.error or not rollout.steps:
            return f"I cannot tell what would happen if I {action}."
        markers = tuple(self.params.invalid_markers)
        parts = [verdict(action, rollout)]
        if _invalid(rollout, markers):
            parts.append("The game does not understand that action.")
        else:
            seen = gist(rollout.steps[0].observation, req.trajectory.task, self.params.gist_words)
            if seen:
                parts.append(f"First, {_sentence_inner(seen)}.")
        if self.params.lesson:
            parts.append(LESSONS[outcome(rollout, markers)])
        return " ".join(parts)

    def critique(self, requests: list[CritiqueRequest], policy: Policy, seed: int | None = None) -> list[Critique]:
        return [Critique(candidate=r.candidate.action, text=self.text(r),
                         rollout_reward=r.rollout.reward if r.rollout is not None else None)
                for r in requests]


class GroundedSynthesizer(Synthesizer["GroundedSynthesizer.Params"]):
    """A deterministic deliberation over all candidates, composed from their critiques; no model.

    An upper bound for SAND's deliberation synthesis, not SAND's: see the
    module docstring. Meant for ``grounded_critic``, whose first sentence per
    candidate ("If I X, ...") becomes ``If I "X", ...``; another critic's
    critiques are used as ``"X": <first sentence>``. Every candidate is named
    in double quotes, the expert's action last, and the thought ends with
    ``So I will "<expert action>".``, so it passes the same check as the
    ``deliberation`` synthesizer (≥ 2 quoted candidates, the last one the
    expert's). Detail is dropped until the thought fits ``max_tokens``
    (counted with the policy's tokenizer): first the other candidates'
    second sentences, then the expert's, then the others' verdicts (the
    others are then named together), then the expert's verdict. That last,
    shortest form is used even if it is still over the budget (only with
    many long candidate actions and a tiny budget).
    """

    name = "grounded_synthesizer"
    description = ("UPPER BOUND, not SAND's self-synthesis: rule-written deliberation over every candidate's "
                   "critique (no model), ending with the expert action")

    @dataclass
    class Params:
        max_tokens: Annotated[int, Ge(16)] = 80
        """Longest thought, in the policy's tokens, at least 16 (the agent's generation budgets are checked
        against it)."""
        expert_thought: Literal["replace", "keep"] = "replace"
        """``replace``: the deliberation takes the place of the expert's thought (SAND's rule); ``keep``: the
        expert's own thought opens the deliberation (its rationale, "the sheet belongs in the drawers", kept),
        to measure what replacing it costs. The kept thought is never cut: the weighing is shortened first."""

    @classmethod
    def thought_token_budget(cls, params):
        return ("max_tokens", params.max_tokens)

    @staticmethod
    def _clauses(action: str, critique: str) -> list[str]:
        """The critique's sentences with the candidate quoted (quotes elsewhere become single quotes)."""
        sentences = _sentences(critique.replace('"', "'"))
        if not sentences:
            return [f'I am not sure about "{action}".']
        prefix = f"If I {action},"
        if sentences[0].startswith(prefix):
            sentences[0] = f'If I "{action}",' + sentences[0][len(prefix):]
        else:
            sentences[0] = f'"{action}": {sentences[0]}'
        return sentences

    def compose(self, req: SynthesisRequest, fits) -> str:
        """The thought for one request at the most detail that ``fits`` (after the expert's own thought, with
        ``expert_thought: keep``)."""
        step = req.trajectory.steps[req.step_index]
        kept = " ".join(step.thought.replace('"', "'").split()) if self.params.expert_thought == "keep" else ""
        if kept:
            return f"{kept} {self._weigh(req, lambda t: fits(f'{kept} {t}'))}"
        return self._weigh(req, fits)

    def _weigh(self, req: SynthesisRequest, fits) -> str:
        """The weighing of every candidate, ending on the expert's action, at the most detail that ``fits``."""
        expert = req.trajectory.steps[req.step_index].action
        by_action = {c.candidate: c for c in req.critiques}
        others = [c.action for c in req.candidates if c.action != expert]

        def clauses(action: str) -> list[str]:
            crit = by_action.get(action)
            return self._clauses(action, crit.text if crit is not None else "")

        ending = f'So I will "{expert}".'
        expert_clauses = clauses(expert)
        levels = [
            [s for a in others for s in clauses(a)[:2]] + expert_clauses[:2],
            [clauses(a)[0] for a in others] + expert_clauses[:2],
            [clauses(a)[0] for a in others] + expert_clauses[:1],
        ]
        for parts in levels:
            thought = " ".join(parts + [ending])
            if fits(thought):
                return thought
        # Many candidates: name the others together, keep the expert's verdict.
        named = ", ".join(f'"{a}"' for a in others)
        reward = {a: c.rollout_reward for a, c in by_action.items() if c.rollout_reward is not None}
        best = expert in reward and all(reward[a] <= reward[expert] for a in others if a in reward)
        judgement = "but none of them does better" if best else "and weighed what each leads to"
        thought = " ".join([f"I considered {named}, {judgement}.", expert_clauses[0], ending])
        if fits(thought):
            return thought
        return " ".join([f"I considered {named}, {judgement}.", ending])  # the shortest form, even if over budget

    def synthesize(self, requests: list[SynthesisRequest], policy: Policy,
                   seed: int | None = None) -> list[SynthesisResult]:
        budget = self.params.max_tokens
        fits = lambda text: policy.count_tokens(text) <= budget  # noqa: E731
        results = []
        for req in requests:
            thought = self.compose(req, fits)
            expert = req.trajectory.steps[req.step_index].action
            # Only a degenerate request (one candidate, an action with double quotes in it) fails the
            # check; it is dropped like a failed model synthesis (the step keeps the expert's thought).
            ok = passes_synthesis_check(thought, expert)
            results.append(SynthesisResult(thought, "ok") if ok else SynthesisResult("", "failed", 1))
        return results


@hookimpl
def sand_register_critics(register):
    register(GroundedCritic)


@hookimpl
def sand_register_synthesizers(register):
    register(GroundedSynthesizer)
