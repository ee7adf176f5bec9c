"""The loop's component kinds: detector, sampler, executor, critic, synthesizer, trainer, evaluator.

With :mod:`sand_framework.components.environment`, :mod:`sand_framework.components.policy` and
:mod:`sand_framework.components.training` (the two trainer kinds, re-exported here), one abstract base class per
component kind: the contract a plugin author implements.

Each class below is what the engine calls for one recipe slot. A plugin
subclasses it, sets ``name`` and ``Params`` (see
:class:`~sand_framework.components.base.Component`) and implements the methods
marked **Required** (abstract: the class cannot be instantiated without
them). Methods marked **Provided** have a working default that a subclass may
override.

Batching: every method that does work for several items takes the whole batch
(a list of requests) and returns one result per request, in the same order,
so that a backend can batch model calls and an executor can run environments
in parallel; an implementation that only handles one item at a time can loop.

Seeding: a ``seed`` argument is derived by the engine from the run seed and
the identity of the unit of work (one synthesis batch, one training stage),
so a resumed run passes the same seed as an uninterrupted one. With the same
seed, inputs and weights a component should return the same result (exactly,
where the hardware allows); ``None`` means no reproducibility is asked for.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar

from sand_framework.components.base import Component, P
from sand_framework.components.environment import Environment
from sand_framework.components.policy import Policy
from sand_framework.components.training import (  # noqa: F401  (re-exported: the kinds are imported from here)
    PreferenceTrainer,
    PreferenceTrainRequest,
    Trainer,
    TrainRequest,
)
from sand_framework.types import (
    Candidate,
    Chat,
    Critique,
    Decision,
    Rollout,
    SynthesisResult,
    Trajectory,
)



# --------------------------------------------------------------------------
# Deliberation trigger
# --------------------------------------------------------------------------


class Detector(Component[P], abc.ABC):
    """Decides, from the agent's sampled actions and the expert's, whether to deliberate at a step.

    Required: :meth:`decide`. The engine deliberates at a step only when the
    detector says so *and* the step has at least two distinct valid
    candidates (the expert's action included); otherwise the step keeps the
    expert's thought. ``sand_framework.testing.detectors`` feeds a detector
    the candidate sets the engine would give it, so a test can reach both
    branches.
    """

    kind: ClassVar[str] = "detector"

    @abc.abstractmethod
    def decide(self, sampled: list[str], expert: str) -> Decision:
        """Required. The verdict for one step: :class:`~sand_framework.types.Decision` ``(deliberate, score)``.

        ``sampled`` holds the sampler's N proposals and ``expert`` the expert
        action, all normalized by :meth:`Environment.normalize_action`; a
        proposal with no parsable action is ``""``. ``score`` (a finite
        float) is stored as ``detector_score`` in the step's deliberation
        record: document what it means. Must be a pure function of its
        arguments (no randomness, no state, ``sampled`` left unchanged): the
        engine calls it once per step and a resumed run must decide the same.
        """


# --------------------------------------------------------------------------
# Candidate sampler
# --------------------------------------------------------------------------


@dataclass
class SampleRequest:
    """Sample candidate actions at ``trajectory.steps[step_index]`` given the steps before it."""

    trajectory: Trajectory
    """The expert trajectory being deliberated on."""
    step_index: int
    """The step whose action is sampled (0-based)."""
    chat: Chat
    """The agent's view up to (not including) this step's turn."""


@dataclass
class Proposal:
    """One sampled (thought, action); ``valid`` is False when no action could be parsed."""

    thought: str
    action: str
    """As the model wrote it (not normalized); ``""`` or anything when ``valid`` is False."""
    valid: bool = True
    tokens: int = 0
    """Completion tokens spent on this proposal (0 if unknown)."""


class Sampler(Component[P], abc.ABC):
    """Proposes the candidate actions at each step of the expert trajectories (SAND's SAS).

    Required: :meth:`sample`. The built-in ``self_consistency`` samples the
    current agent N times; ``imagined`` asks the base model; ``none``
    proposes nothing (the SFT control).
    """

    kind: ClassVar[str] = "sampler"

    @abc.abstractmethod
    def sample(self, requests: list[SampleRequest], policy: Policy, seed: int | None = None) -> list[list[Proposal]]:
        """Required. The proposals for each request (usually N; may be empty), one list per request, in order.

        All requests of a synthesis batch (every step of several trajectories)
        come in one call. A reply with no parsable action is a
        :class:`Proposal` with ``valid=False`` (it reaches the detector as
        ``""``), never an exception. ``seed`` makes the draw reproducible.
        """


# --------------------------------------------------------------------------
# Rollout executor
# --------------------------------------------------------------------------


@dataclass
class RolloutRequest:
    """Execute ``candidate`` at ``trajectory.steps[step_index]`` and let the agent continue."""

    trajectory: Trajectory
    step_index: int
    """Steps before this one are the expert prefix that positions the environment."""
    candidate: Candidate
    max_steps: int
    """The environment's step cap for the task (:meth:`Environment.max_steps`), prefix included."""


class Executor(Component[P], abc.ABC):
    """Executes candidate actions from the expert's state and lets the agent play on (SAND's EAC rollouts).

    Required: :meth:`run`. Provided: :meth:`switches_expert`, :attr:`stats`.
    """

    kind: ClassVar[str] = "executor"

    @property
    def stats(self) -> dict[str, float]:
        """Provided (``{}``): cumulative counters of the work this executor did, summed over every call so far.

        The engine reads it before and after each batch of a ``synth/iterK`` stage and stores the difference of
        ``env_steps`` (environment steps, replays included), ``faults_survived`` and ``hangs`` in the batch's first
        unit (``stats``), which ``sand sweep``'s cost table and ``sand report`` total; other keys are the
        executor's own (the built-ins also count ``replays``). Numbers only, never decreasing. Override it as a
        property, or assign a dict to it (``self.stats = {...}``, what an executor written before it was declared
        may do)."""
        return self.__dict__.get("_stats", {})

    @stats.setter
    def stats(self, value: dict[str, float]) -> None:
        self.__dict__["_stats"] = value

    def switches_expert(self, trajectory: Trajectory, rollout: Rollout) -> bool:
        """Provided: the paper's optional *expert switch*: does ``rollout`` beat the expert trajectory it branched from?

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
        """Required. One :class:`~sand_framework.types.Rollout` per request, in order.

        For each request: position a copy of ``env`` (:meth:`Environment.clone`)
        at the step with :meth:`Environment.replay` of the expert prefix,
        checked against the recorded observations; execute the candidate; let
        the agent (``policy``, ``role="agent"``) continue until ``done`` or
        ``max_steps``. ``Rollout.steps`` starts with the candidate's step. A
        prefix that does not replay is reported in ``Rollout.error``, not
        raised. Never step ``env`` itself: it is the engine's instance.
        """


# --------------------------------------------------------------------------
# Critic
# --------------------------------------------------------------------------


@dataclass
class CritiqueRequest:
    """Judge ``candidate`` at ``trajectory.steps[step_index]``, knowing what its rollout did."""

    trajectory: Trajectory
    step_index: int
    candidate: Candidate
    rollout: Rollout | None
    """``None`` for critics that judge without executing (the w/o EAC ablation)."""


class Critic(Component[P], abc.ABC):
    """Writes a first-person critique of each candidate of a deliberated step (SAND's EAC).

    Required: :meth:`critique`. Set ``needs_rollouts = False`` for a critic
    that judges without executing.
    """

    kind: ClassVar[str] = "critic"
    needs_rollouts: ClassVar[bool] = True
    """False lets the engine skip the executor entirely (w/o EAC)."""

    @abc.abstractmethod
    def critique(self, requests: list[CritiqueRequest], policy: Policy, seed: int | None = None) -> list[Critique]:
        """Required. One :class:`~sand_framework.types.Critique` per request, in order.

        Every candidate of every deliberated step of the batch comes in one
        call; use ``policy`` with ``role="base"`` (the frozen base model
        writes critiques). ``Critique.candidate`` is the candidate's action.
        """


# --------------------------------------------------------------------------
# Synthesizer
# --------------------------------------------------------------------------


@dataclass
class SynthesisRequest:
    """Turn one deliberated step's candidates and their critiques into one thought."""

    trajectory: Trajectory
    step_index: int
    candidates: list[Candidate]
    """Distinct candidates, the expert's first."""
    critiques: list[Critique]
    """One per candidate, in the same order."""


class Synthesizer(Component[P], abc.ABC):
    """Writes the deliberation thought that replaces the expert's thought at a deliberated step.

    Required: :meth:`synthesize`.
    """

    kind: ClassVar[str] = "synthesizer"

    @abc.abstractmethod
    def synthesize(self, requests: list[SynthesisRequest], policy: Policy,
                   seed: int | None = None) -> list[SynthesisResult]:
        """Required. One :class:`~sand_framework.types.SynthesisResult` per request, in order.

        The thought becomes the step's ``Step.thought`` in the training data,
        followed by the expert's action, so it must end by choosing the
        expert action (the step's ``trajectory.steps[step_index].action``).
        The built-in checks this with :mod:`sand_framework.deliberation`,
        retries and falls back, and says which in ``SynthesisResult.status``.
        """


# --------------------------------------------------------------------------
# Evaluator
# --------------------------------------------------------------------------


@dataclass
class TaskResult:
    """One evaluated task."""

    trajectory: Trajectory
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Evaluator(Component[P], abc.ABC):
    """Runs the agent on held-out tasks and computes the split's metrics.

    Required: :meth:`evaluate`, :meth:`aggregate`.
    """

    kind: ClassVar[str] = "evaluator"

    rollout_stats: dict[str, float] | None = None
    """Optional. Cumulative costs of the evaluation episodes this component ran (``agent_turns``,
    ``rollout_seconds``, ``prompt_tokens`` ...), which ``metrics.json``'s ``rollouts`` reports beside the
    synthesis stages'. Default: None (not counted)."""

    @abc.abstractmethod
    def evaluate(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        """Required. One :class:`TaskResult` per task id, in order (each task is one resumable unit).

        The engine passes batches of ``eval.batch_size`` tasks and stores each
        result as soon as the call returns. Run the agent (``role="agent"``)
        on copies of ``env`` (:meth:`Environment.clone`); the result must be
        deterministic for the same weights (greedy decoding), so a resumed
        evaluation matches an uninterrupted one.
        """

    @abc.abstractmethod
    def aggregate(self, results: list[TaskResult]) -> dict[str, Any]:
        """Required. Metrics over one split's results (JSON-serializable; written to ``metrics.json``)."""
