"""One abstract base class per component kind: the contract a plugin author implements.

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
import re
from dataclasses import dataclass
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

    Required: :meth:`tasks`, :meth:`instruction`, :meth:`reset`, :meth:`step`,
    :meth:`max_steps`. Provided: :meth:`expert_actions` (raises
    ``NotImplementedError``: override it, SAND's training data comes from it),
    :meth:`expert_thought`, :meth:`splits`, :meth:`task_id_from_eto`,
    :meth:`normalize_action`, :meth:`replay`, :meth:`clone` and
    :meth:`~sand_framework.components.base.Component.close`.

    One instance runs one episode at a time; executors that need parallel
    episodes call :meth:`clone`. Branching is reset + replay of the action
    prefix (most text environments have no snapshot API), so everything an
    episode shows must be a deterministic function of the task id and the
    actions taken: :meth:`reset` of the same id returns the same text and the
    same actions yield the same observations, in any process, on any machine.
    :meth:`replay` verifies that the replayed observations match the recorded
    ones. ``sand_framework.testing.conformance`` checks all of this.

    The constructor must be cheap (``sand validate`` builds the environment):
    start simulators, servers and JVMs lazily, on first use, and stop them in
    ``close()``.
    """

    kind: ClassVar[str] = "environment"

    @abc.abstractmethod
    def tasks(self, split: str) -> list[str]:
        """Required. Task ids of a split (one of :meth:`splits`: ``train``, ``seen``, ``unseen``).

        Deterministic (computed from ``Params`` and seeds, never drawn at call
        time); the evaluation splits must be disjoint from ``train``. A task id
        is a string that carries everything needed to rebuild the task: it is
        written into trajectory files and passed back to :meth:`reset`. An
        unknown split should raise ``ValueError``.
        """

    @abc.abstractmethod
    def instruction(self) -> str:
        """Required. The environment-level instruction shown to the agent: the action space and the reply format.

        The agent's replies are parsed as ``Thought: ...`` / ``Action: ...``
        lines, so the instruction should ask for exactly that format.
        """

    @abc.abstractmethod
    def reset(self, task_id: str) -> str:
        """Required. Start the task; return one string: the task description and the first observation.

        This string becomes ``Trajectory.task`` (what the agent sees before
        its first action). The engine assumes every episode starts at reward
        0. Two resets of the same id must return the same text. A task id
        this environment cannot parse should raise ``ValueError``.
        """

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Required. Execute one action; return a :class:`~sand_framework.types.StepResult`.

        ``reward`` is the episode's reward so far, in [0, 1], and exactly 1.0
        with ``success``; ``done`` ends the episode (success, failure or the
        step cap). An *invalid* action is any text the environment does not
        understand or cannot apply in the current state (a model can write
        anything: an empty string, 5,000 characters, control characters): it
        returns ``valid=False`` with an observation saying so, still counts as
        a step, and never raises. The engine stops stepping an episode once
        ``done``. Raising is for programming errors only (a step before any
        :meth:`reset`).
        """

    @abc.abstractmethod
    def max_steps(self, task_id: str) -> int:
        """Required. The benchmark's step cap for this task (a positive int; the expert must fit in it)."""

    def expert_actions(self, task_id: str) -> list[str]:
        """Provided (raises): the gold action sequence for the task; override it where the environment has an expert.

        The expert stage replays these actions (each must be valid, and the
        last must reach success within :meth:`max_steps`); SAND's training
        data and every deliberation are built on them. The default raises
        ``NotImplementedError``, which the expert stage reports. Computing the
        sequence must not disturb an episode in progress (solve from the task
        id, or step a clone).
        """
        raise NotImplementedError(f"environment {self.name!r} has no expert")

    def expert_thought(self, task_id: str, task: str, history: list[Step], action: str) -> str:
        """Provided (``""``): a short first-person ReAct thought for the expert's next ``action``.

        The expert stage puts it in ``Step.thought``, so behavior initialization
        trains on ReAct turns (a reason, then the action) like the paper's expert
        data instead of on empty thoughts. Write it only from what the agent has
        seen: ``task`` (what :meth:`reset` returned), ``history`` (the steps
        before this one, with their observations) and ``action`` itself; never
        from the solution or from state not yet observed (no naming the room
        that holds the coin before the coin is in view). One sentence of about
        25 words at most. It is called outside any episode, on recorded steps,
        so it must be a deterministic function of its arguments that neither
        resets nor steps the environment. The default returns ``""`` (no thought).
        """
        return ""

    def splits(self) -> list[str]:
        """Provided (``["train", "seen", "unseen"]``): the split names :meth:`tasks` accepts."""
        return ["train", "seen", "unseen"]

    def task_id_from_eto(self, eto_id: str, trajectory: Trajectory | None = None) -> str:
        """Provided (keeps the id): this environment's task id for a trajectory from ETO's expert files.

        Used by ``sand data import-eto``. ETO's ids do not always address a
        task on their own (ALFWorld's are serial numbers), so the imported
        ``trajectory`` (task text, actions, observations) is passed too. The
        default returns ``str(eto_id)``. Raise ``ValueError`` when no task
        matches; the importer reports it and skips that trajectory.
        """
        return str(eto_id)

    def normalize_action(self, action: str) -> str:
        """Provided (lower-case, collapse whitespace, drop a final period): the canonical form of an action.

        Two actions are the same candidate, the same detector vote and the
        same rollout-cache key when their normalized forms are equal. Override
        it when the environment accepts several spellings of one action; it
        must be deterministic and must not step the environment.
        """
        return re.sub(r"\s+", " ", action.strip().lower()).rstrip(".")

    def replay(self, task_id: str, actions: list[str], expected: list[str] | None = None) -> list[StepResult]:
        """Provided: :meth:`reset`, then :meth:`step` each of ``actions``; return their results.

        With ``expected`` (recorded observations, ``None`` entries skipped),
        each observation is compared after stripping whitespace, and
        :class:`~sand_framework.errors.ReplayMismatch` names the first
        diverging step, because a rollout from a state that differs from the
        expert's would critique the wrong situation. Override it only with
        something equivalent (a snapshot restore that returns the same results).
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
        """Provided (``type(self)(self.params)``): a fresh, independent instance with the same parameters.

        Executors and evaluators clone one instance per parallel episode;
        stepping a clone must not change the original's episode. Override it
        when the constructor takes more than ``params`` or the params hold
        mutable state that must not be shared.
        """
        return type(self)(self.params)


# --------------------------------------------------------------------------
# Policy (LLM backend)
# --------------------------------------------------------------------------


class Policy(Component, abc.ABC):
    """An LLM backend holding a frozen base model and the agent's current weights.

    Required: :meth:`setup`, :meth:`set_agent_weights`, :meth:`generate`.
    Provided: :meth:`release`, :meth:`count_tokens`, :attr:`stats`, ``close``.

    ``role="base"`` calls (critique, synthesis, imagined candidates) use the
    base model; ``"agent"`` calls (sampling, rollouts, evaluation) use the
    weights set by :meth:`set_agent_weights`. Prompts are rendered with the
    base model's own chat template
    (:class:`sand_framework.chat_format.ChatFormat`), the same rendering the
    trainer trains on.
    """

    kind: ClassVar[str] = "policy"

    @abc.abstractmethod
    def setup(self, base_model: str) -> None:
        """Required. Load the base model (a local path or hub id, already resolved from an alias).

        Called before the first :meth:`generate` and again after each
        :meth:`release`.
        """

    @abc.abstractmethod
    def set_agent_weights(self, weights: str | None) -> None:
        """Required. Use these trained weights (adapter or full model folder) for ``role="agent"``.

        ``None`` means the base model itself (before the first training stage).
        """

    @abc.abstractmethod
    def generate(self, chats: list[Chat], sampling: SamplingParams, role: Role = "agent") -> list[list[Completion]]:
        """Required. ``sampling.n`` completions for each chat: one list per chat, in order.

        One batched call where the backend can. ``sampling.temperature == 0``
        is greedy decoding and must be deterministic; with ``sampling.seed``
        set, the same chats, weights and params must give the same texts. Each
        :class:`~sand_framework.types.Completion` carries its prompt and
        completion token counts (0 where the backend cannot count).
        """

    def release(self) -> None:
        """Provided (calls ``close()``): free the model's memory before a training stage.

        The engine calls :meth:`setup` again afterwards. No inference engine
        may stay resident while the trainer runs (on a GPU it would hold most
        of the memory the trainer needs). A backend that can sleep and wake
        (vLLM's sleep mode) may keep its state and make the next ``setup``
        cheap.
        """
        self.close()

    def count_tokens(self, text: str) -> int:
        """Provided: tokens of ``text`` under the backend's ``tokenizer`` attribute (whitespace words without one)."""
        tokenizer = getattr(self, "tokenizer", None)
        if tokenizer is None:
            return len(text.split())
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def stats(self) -> dict[str, float]:
        """Provided (``{}``): cumulative calls, prompt/completion tokens and busy seconds, for the run's metrics."""
        return {}


# --------------------------------------------------------------------------
# Deliberation trigger
# --------------------------------------------------------------------------


class Detector(Component, abc.ABC):
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


class Sampler(Component, abc.ABC):
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


class Executor(Component, abc.ABC):
    """Executes candidate actions from the expert's state and lets the agent play on (SAND's EAC rollouts).

    Required: :meth:`run`. Provided: :meth:`switches_expert`.
    """

    kind: ClassVar[str] = "executor"

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


class Critic(Component, abc.ABC):
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


class Synthesizer(Component, abc.ABC):
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
# Trainer
# --------------------------------------------------------------------------


@dataclass
class TrainRequest:
    """One training stage: fine-tune on ``trajectories`` and save the weights under ``output_dir``."""

    trajectories: list[Trajectory]
    base_model: str
    """The resolved base model (local path or hub id)."""
    init_weights: str | None
    """Weights to continue from (previous iteration), or None for the base model."""
    output_dir: str
    """The stage's folder in the run directory; it persists across resumes."""
    epochs: float
    seed: int = 0


class Trainer(Component, abc.ABC):
    """Fine-tunes the agent on (synthesized) trajectories.

    Required: :meth:`train`.
    """

    kind: ClassVar[str] = "trainer"

    @abc.abstractmethod
    def train(self, request: TrainRequest) -> str:
        """Required. Fine-tune; return the path of the saved weights (an adapter or a full model folder, HF format).

        Train on the assistant turns of each trajectory's chat, rendered with
        the base model's chat template, and save the tokenizer beside the
        weights. Resume from checkpoints in ``request.output_dir`` after an
        interruption, and return the finished weights at once when they are
        already there. With the same request and seed, the result must be
        reproducible as far as the hardware allows.
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


class Evaluator(Component, abc.ABC):
    """Runs the agent on held-out tasks and computes the split's metrics.

    Required: :meth:`evaluate`, :meth:`aggregate`.
    """

    kind: ClassVar[str] = "evaluator"

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
