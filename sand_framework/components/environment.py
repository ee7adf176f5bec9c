"""The environment kind: tasks, reset, step, replay and the expert, as the engine calls them.

The rules for every kind (Required vs Provided methods, batching, seeding) are
in :mod:`sand_framework.components.kinds`.
"""

from __future__ import annotations

import abc
import re
from typing import ClassVar

from sand_framework.components.base import Component, P
from sand_framework.errors import ReplayMismatch
from sand_framework.types import Step, StepResult, Trajectory


MAX_EPISODE_STEPS = 1000
"""The largest step cap a built-in parameter accepts (an environment's ``max_steps``, a rollout's or an evaluation's
cap): every step of every episode is a model call, and the benchmarks' own caps are 10-120, so a larger one can
only be a typo."""


class Environment(Component[P], abc.ABC):
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

    benchmark: ClassVar[str | None] = None
    """Optional: the published benchmark this environment is (``alfworld``, ``scienceworld``, ``webshop``), for
    the methods that follow that benchmark's published protocol (ETO's expert reward and its cut of the rejected
    side, by benchmark). Default None: none of those rules apply. A fact of the environment, so the methods never
    read it off the environment's name."""

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
        """Required. The benchmark's step cap for this task (a positive int; the expert must fit in it).

        Cheap (no simulator is started) and, like :meth:`reset`, it raises
        ``ValueError`` for an id this environment cannot parse or has no game
        for: ``sand validate`` and the expert stage call it on every task id of
        a ``data.path`` file (:func:`unknown_task_ids`), so that a file made for
        another environment is refused before any training, not at the first
        rollout hours later.
        """

    def expert_actions(self, task_id: str) -> list[str]:
        """Provided (raises): the gold action sequence for the task; override it where the environment has an expert.

        The expert stage replays these actions (each must be valid, and the
        last must reach success within :meth:`max_steps`); SAND's training
        data and every deliberation are built on them. The default raises
        ``NotImplementedError``, which the expert stage reports as
        :class:`~sand_framework.errors.NoExpertError` (exit 2). Computing the
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


def unknown_task_ids(env: Environment, task_ids: list[str], show: int = 3) -> list[str]:
    """Problems (empty: none) for the ids of ``task_ids`` that ``env`` does not know, by its
    :meth:`~Environment.max_steps`: how many, and the first ``show`` of them with the environment's reason."""
    bad = []
    for task_id in dict.fromkeys(task_ids):
        try:
            env.max_steps(task_id)
        except ValueError as exc:
            bad.append(f"{task_id!r} ({exc})")
    if not bad:
        return []
    more = f", and {len(bad) - show} more" if len(bad) > show else ""
    return [f"{len(bad)} of the file's {len(set(task_ids))} task id(s) are not {env.name!r} tasks: "
            f"{'; '.join(bad[:show])}{more}. Was the file made for another environment or other "
            f"environment parameters? Make one for this environment with `sand data expert --env {env.name} "
            f"--split train -o OUT` or `sand data import-eto FILE --env {env.name} -o OUT`"]
