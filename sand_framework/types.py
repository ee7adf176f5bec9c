"""The data model shared by every component.

Plain dataclasses, JSON round-trippable through ``to_dict``/``from_dict`` so
that every artifact in a run directory is readable without the framework and
so that records can cross process boundaries (process pools, Ray) without
pickling live objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

T = TypeVar("T")

Chat = list[dict[str, str]]
"""A chat as transformers expects it: ``[{"role": ..., "content": ...}, ...]``."""

Role = Literal["agent", "base"]
"""Which weights a policy call uses: the agent being trained, or the frozen base model."""


class _Record:
    """Mixin giving dataclasses a JSON-friendly dict round trip."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})  # type: ignore[call-arg]


@dataclass
class Step(_Record):
    """One agent turn: the thought and action it wrote and what the environment said back."""

    thought: str
    action: str
    observation: str = ""
    deliberated: bool = False
    """True when this step's thought was synthesized from several candidates."""


@dataclass
class Trajectory(_Record):
    """An episode on one task: the prompt the agent saw and every step it took."""

    task_id: str
    env: str
    instruction: str
    """Environment-level instruction (action space, output format); ETO's turn 0."""
    task: str
    """The task description and first observation; ETO's turn 2."""
    steps: list[Step] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        data = dict(data)
        data["steps"] = [Step.from_dict(s) for s in data.get("steps", [])]
        return super().from_dict.__func__(cls, data)  # type: ignore[attr-defined]

    @property
    def actions(self) -> list[str]:
        return [s.action for s in self.steps]


@dataclass
class Completion(_Record):
    """One sampled model output and its cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Candidate(_Record):
    """A distinct candidate action at a step, with how it was proposed."""

    action: str
    thought: str = ""
    count: int = 1
    """How many of the N samples proposed this action (after normalization)."""
    is_expert: bool = False


@dataclass
class Rollout(_Record):
    """What happened when a candidate was executed from step t and the agent continued."""

    task_id: str
    prefix_len: int
    candidate: str
    steps: list[Step] = field(default_factory=list)
    """The candidate's step first, then the agent's continuation."""
    reward: float = 0.0
    success: bool = False
    done: bool = False
    error: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Rollout":
        data = dict(data)
        data["steps"] = [Step.from_dict(s) for s in data.get("steps", [])]
        return super().from_dict.__func__(cls, data)  # type: ignore[attr-defined]


@dataclass
class Critique(_Record):
    """The base model's first-person judgement of one candidate."""

    candidate: str
    text: str
    rollout_reward: float | None = None
    truncated: bool = False
    """The critic's token budget ended the text mid-sentence and the fragment was dropped (``text`` keeps the
    complete sentences before it, possibly none): counted in the synthesis statistics, so a budget too short for
    what the base model writes shows."""


@dataclass
class SynthesisResult(_Record):
    """The synthesized deliberation thought and how it was reached.

    ``ok``/``retried``: the model's thought passed the check (at the first attempt / after retries); ``failed``:
    no attempt passed, ``thought`` is empty and the step keeps the expert's own thought and is not deliberated
    (the paper's method); ``fallback``: no attempt passed and ``thought`` was written from a template
    (a synthesizer's named opt-in, not the paper's method)."""

    thought: str
    status: Literal["ok", "retried", "failed", "fallback"] = "ok"
    attempts: int = 1


@dataclass
class DeliberationRecord(_Record):
    """Everything SAND computed for one deliberated step, kept for audit and reports."""

    task_id: str
    step_index: int
    expert_action: str
    expert_thought: str
    candidates: list[Candidate]
    rollouts: list[Rollout]
    critiques: list[Critique]
    synthesis: SynthesisResult
    detector_score: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DeliberationRecord":
        data = dict(data)
        data["candidates"] = [Candidate.from_dict(c) for c in data.get("candidates", [])]
        data["rollouts"] = [Rollout.from_dict(r) for r in data.get("rollouts", [])]
        data["critiques"] = [Critique.from_dict(c) for c in data.get("critiques", [])]
        data["synthesis"] = SynthesisResult.from_dict(data["synthesis"])
        return super().from_dict.__func__(cls, data)  # type: ignore[attr-defined]


@dataclass
class PreferencePair(_Record):
    """Two continuations of one context, the preferred one first: what DPO-style trainers consume.

    ``prompt`` holds the shared context as a trajectory (instruction, task and
    the steps before the continuations: none for ETO's whole-trajectory pairs,
    the expert's first j steps for IPR's step-level ones), so a pair renders
    with the same chat layout the agent is sampled with
    (:func:`sand_framework.prompting.trajectory_chat`). Each side is a list of
    agent steps; it is trained up to and including its last assistant turn.
    """

    prompt: Trajectory
    chosen: list[Step]
    rejected: list[Step]
    chosen_reward: float = 0.0
    rejected_reward: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    """Where the pair came from (method, step, source trajectories); kept for audit."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PreferencePair":
        data = dict(data)
        data["prompt"] = Trajectory.from_dict(data["prompt"])
        data["chosen"] = [Step.from_dict(s) for s in data.get("chosen", [])]
        data["rejected"] = [Step.from_dict(s) for s in data.get("rejected", [])]
        return super().from_dict.__func__(cls, data)  # type: ignore[attr-defined]


@dataclass
class StepResult(_Record):
    """What an environment returns for one action."""

    observation: str
    reward: float
    """Episode reward so far, normalized to [0, 1] (the benchmark's own definition)."""
    done: bool
    success: bool = False
    valid: bool = True
    """False when the environment did not understand the action."""


@dataclass
class Decision(_Record):
    """A consistency detector's verdict on one step."""

    deliberate: bool
    score: float = 0.0
    """Detector-specific strength (distinct-action count, entropy, ...)."""


@dataclass
class SamplingParams(_Record):
    """How a policy call decodes."""

    n: int = 1
    temperature: float = 0.0
    max_new_tokens: int = 96
    seed: int | None = None
    seeds: list[int] | None = None
    """One seed per chat of the call (overrides ``seed``): chat ``i``'s samples depend on its own chat and
    ``seeds[i]`` only, not on which other chats share the call (what lets lock-step and asynchronous rollouts,
    and a resumed batch, give the same texts). Backends that cannot seed per chat use ``seed``."""
