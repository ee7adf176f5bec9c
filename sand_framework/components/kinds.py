"""One abstract base class per component kind.

These are the contracts the engine relies on. Each method takes whole batches
so that a backend can batch model calls and an executor can run environments
in parallel; an implementation that only handles one item at a time can loop.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sand_framework.components.base import Component
from sand_framework.errors import ReplayMismatch
from sand_framework.types import (
    Candidate,
    Chat,
    Completion,
    Critique,
    Decision,
    Role,
    Rollout,
    SamplingParams,
    Step,
    StepResult,
    SynthesisResult,
    Trajectory,
)

# --------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------


class Environment(Component, abc.ABC):
    """A text environment with task ids, an expert and reproducible branching.

    One instance runs one episode at a time; executors that need parallel
    episodes call :meth:`clone`. Branching is reset + replay of the action
    prefix (most text environments have no snapshot API); :meth:`replay`
    verifies that the replayed observations match the recorded ones.
    """

    kind: ClassVar[str] = "environment"

    @abc.abstractmethod
    def tasks(self, split: str) -> list[str]:
        """Task ids of a split (``train``, ``seen``, ``unseen``)."""

    @abc.abstractmethod
    def instruction(self) -> str:
        """The environment-level instruction shown to the agent (action space, format)."""

    @abc.abstractmethod
    def reset(self, task_id: str) -> str:
        """Start the task; return the task description and first observation."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Execute one action."""

    @abc.abstractmethod
    def max_steps(self, task_id: str) -> int:
        """The benchmark's step cap for this task."""

    def expert_actions(self, task_id: str) -> list[str]:
        """Gold action sequence for the task; raise ``NotImplementedError`` if there is none."""
        raise NotImplementedError(f"environment {self.name!r} has no expert")

    def expert_thought(self, task_id: str, task: str, history: list[Step], action: str) -> str:
        """A short first-person ReAct thought for the expert's next ``action``; ``""`` (the default) for none.

        The expert stage puts it in ``Step.thought``, so behavior initialization
        trains on ReAct turns (a reason, then the action) like the paper's expert
        data instead of on empty thoughts. Write it only from what the agent has
        seen: ``task`` (what :meth:`reset` returned), ``history`` (the steps
        before this one, with their observations) and ``action`` itself; never
        from the solution or from state not yet observed (no naming the room
        that holds the coin before the coin is in view). One sentence of about
        25 words at most. It is called outside any episode, on recorded steps,
        so it must be a deterministic function of its arguments that neither
        resets nor steps the environment.
        """
        return ""

    def splits(self) -> list[str]:
        return ["train", "seen", "unseen"]

    def task_id_from_eto(self, eto_id: str, trajectory: Trajectory | None = None) -> str:
        """This environment's task id for a trajectory from ETO's expert files (``sand data import-eto``).

        ETO's ids do not always address a task on their own (ALFWorld's are
        serial numbers), so the imported ``trajectory`` (task text, actions,
        observations) is passed too. The default keeps the id. Raise
        ``ValueError`` when no task matches; the importer reports it and
        skips that trajectory.
        """
        return str(eto_id)

    def normalize_action(self, action: str) -> str:
        """Canonical form used to decide whether two actions are the same."""
        return re.sub(r"\s+", " ", action.strip().lower()).rstrip(".")

    def replay(self, task_id: str, actions: list[str], expected: list[str] | None = None) -> list[StepResult]:
        """Reset and re-execute ``actions``; with ``expected``, check each observation.

        Raises :class:`ReplayMismatch` naming the first diverging step, because a
        rollout from a state that differs from the expert's would critique the
        wrong situation.
        """
        self.reset(task_id)
        results = []
        for i, action in enumerate(actions):
            res = self.step(action)
            if expected is not None and i < len(expected) and expected[i] is not None:
                if res.observation.strip() != expected[i].strip():
                    raise ReplayMismatch(
                        f"{self.name}: replay of task {task_id!r} diverged at step {i} "
                        f"({action!r}): got {res.observation[:120]!r}, expected {expected[i][:120]!r}"
                    )
            results.append(res)
        return results

    def clone(self) -> "Environment":
        """A fresh, independent instance with the same parameters."""
        return type(self)(self.params)


# --------------------------------------------------------------------------
# Policy (LLM backend)
# --------------------------------------------------------------------------


class Policy(Component, abc.ABC):
    """An LLM backend holding a frozen base model and the agent's current weights.

    ``role="base"`` calls (critique, synthesis) use the base model; ``"agent"``
    calls (sampling, rollouts, evaluation) use the weights set by
    :meth:`set_agent_weights`.
    """

    kind: ClassVar[str] = "policy"

    @abc.abstractmethod
    def setup(self, base_model: str) -> None:
        """Load the base model (a local path or hub id)."""

    @abc.abstractmethod
    def set_agent_weights(self, weights: str | None) -> None:
        """Use these trained weights (adapter or full model dir) for ``role="agent"``; None = base."""

    @abc.abstractmethod
    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> list[list[Completion]]:
        """``sampling.n`` completions for each chat, in one batched call where the backend can."""

    def release(self) -> None:
        """Free the model's memory before a training stage; the engine calls :meth:`setup` again afterwards.

        No inference engine may stay resident while the trainer runs (on a GPU
        it would hold most of the memory the trainer needs). The default closes
        the policy; a backend that can sleep and wake (vLLM's sleep mode) may
        keep its state and make the next ``setup`` cheap.
        """
        self.close()

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the backend's tokenizer (whitespace words when it has none)."""
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is None:
            return len(text.split())
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def stats(self) -> dict[str, float]:
        """Cumulative calls, prompt/completion tokens and busy seconds."""
        return {}


# --------------------------------------------------------------------------
# Deliberation trigger
# --------------------------------------------------------------------------


class Detector(Component, abc.ABC):
    """Decides, from the agent's sampled actions and the expert's, whether to deliberate."""

    kind: ClassVar[str] = "detector"

    @abc.abstractmethod
    def decide(self, sampled: list[str], expert: str) -> Decision:
        """``sampled`` and ``expert`` are normalized actions; invalid samples are ``""``."""


# --------------------------------------------------------------------------
# Candidate sampler
# --------------------------------------------------------------------------


@dataclass
class SampleRequest:
    """Sample candidate actions at ``trajectory.steps[step_index]`` given the steps before it."""

    trajectory: Trajectory
    step_index: int
    chat: Chat
    """The agent's view up to (not including) this step's turn."""


@dataclass
class Proposal:
    """One sampled (thought, action); ``valid`` is False when no action could be parsed."""

    thought: str
    action: str
    valid: bool = True
    tokens: int = 0


class Sampler(Component, abc.ABC):
    kind: ClassVar[str] = "sampler"

    @abc.abstractmethod
    def sample(self, requests: list[SampleRequest], policy: Policy, seed: int | None = None) -> list[list[Proposal]]:
        """N proposals per request; ``seed`` makes the draw reproducible."""


# --------------------------------------------------------------------------
# Rollout executor
# --------------------------------------------------------------------------


@dataclass
class RolloutRequest:
    """Execute ``candidate`` at ``trajectory.steps[step_index]`` and let the agent continue."""

    trajectory: Trajectory
    step_index: int
    candidate: Candidate
    max_steps: int


@dataclass
class RolloutSettings:
    """Decoding and limits for the agent's continuation after the candidate."""

    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0))
    extra: dict[str, Any] = field(default_factory=dict)


class Executor(Component, abc.ABC):
    kind: ClassVar[str] = "executor"

    def switches_expert(self, trajectory: Trajectory, rollout: Rollout) -> bool:
        """The paper's optional *expert switch*: does ``rollout`` beat the expert trajectory it branched from?

        When it does, the engine replaces the expert trajectory by the expert
        prefix plus the rollout, for this iteration's training data and every
        later iteration. Better means a higher final reward, or the same reward
        with success in fewer steps. Off unless the executor's params have
        ``expert_switch: true`` (the paper uses it on ALFWorld and WebShop, not
        on ScienceWorld).
        """
        if not getattr(self.params, "expert_switch", False) or rollout.error or not rollout.steps:
            return False
        length = rollout.prefix_len + len(rollout.steps)
        if rollout.reward != trajectory.reward:
            return rollout.reward > trajectory.reward
        return rollout.success and length < len(trajectory.steps)

    @abc.abstractmethod
    def run(self, requests: list[RolloutRequest], env: Environment, policy: Policy,
            seed: int | None = None) -> list[Rollout]:
        """One rollout per request, in order."""


# --------------------------------------------------------------------------
# Critic
# --------------------------------------------------------------------------


@dataclass
class CritiqueRequest:
    trajectory: Trajectory
    step_index: int
    candidate: Candidate
    rollout: Rollout | None
    """``None`` for critics that judge without executing (the w/o EAC ablation)."""


class Critic(Component, abc.ABC):
    kind: ClassVar[str] = "critic"
    needs_rollouts: ClassVar[bool] = True
    """False lets the engine skip the executor entirely (w/o EAC)."""

    @abc.abstractmethod
    def critique(self, requests: list[CritiqueRequest], policy: Policy, seed: int | None = None) -> list[Critique]: ...


# --------------------------------------------------------------------------
# Synthesizer
# --------------------------------------------------------------------------


@dataclass
class SynthesisRequest:
    trajectory: Trajectory
    step_index: int
    candidates: list[Candidate]
    critiques: list[Critique]


class Synthesizer(Component, abc.ABC):
    kind: ClassVar[str] = "synthesizer"

    @abc.abstractmethod
    def synthesize(self, requests: list[SynthesisRequest], policy: Policy,
                   seed: int | None = None) -> list[SynthesisResult]: ...


# --------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------


@dataclass
class TrainRequest:
    trajectories: list[Trajectory]
    base_model: str
    init_weights: str | None
    """Weights to continue from (previous iteration), or None for the base model."""
    output_dir: str
    epochs: float
    seed: int = 0


class Trainer(Component, abc.ABC):
    kind: ClassVar[str] = "trainer"

    @abc.abstractmethod
    def train(self, request: TrainRequest) -> str:
        """Fine-tune; return the path of the saved weights (HF format). Resume from checkpoints in output_dir."""


# --------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------


@dataclass
class TaskResult:
    """One evaluated task."""

    trajectory: Trajectory
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Evaluator(Component, abc.ABC):
    kind: ClassVar[str] = "evaluator"

    @abc.abstractmethod
    def evaluate(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        """Run the agent on these tasks (one unit each)."""

    @abc.abstractmethod
    def aggregate(self, results: list[TaskResult]) -> dict[str, Any]:
        """Metrics over a split."""
