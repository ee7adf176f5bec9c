"""Exercise a detector on the candidate sets the engine would give it, made from a real environment's actions.

Shipped for plugin authors. A smoke run on the tiny random model never reaches
a detector's "deliberate" branch: that model writes no valid action, so every
step has one candidate (the expert's) and the engine skips it whatever the
detector says. Here the samples are the environment's own expert actions, in
fixed patterns (all agree, one dissents, an even split, all agree on another
action, all unparseable), so both branches run on real, normalized actions:

* :func:`detector_cases` / :func:`check_detector` / :func:`assert_detector_conforms`
  call the detector through the engine's own step decision
  (:func:`sand_framework.engine.synthesis.decide_step`) on those sets, in a
  unit test, with no model;
* :class:`ExpertMixSampler` (the ``expert_mix`` sampler) proposes the same
  patterns inside a real run, so ``sand run`` on the tiny model deliberates
  (rollouts, critiques, synthesis, training on deliberations). A recipe loads
  it with ``plugins: {modules: [sand_framework.testing.detectors]}`` and
  ``sampler: {name: expert_mix}``, run with ``--allow-recipe-plugins``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import Detector, Environment, Policy, Proposal, Sampler, SampleRequest
from sand_framework.engine.expert import expert_trajectory
from sand_framework.engine.synthesis import decide_step, detector_input
from sand_framework.types import Decision

PATTERNS: tuple[str, ...] = ("split", "unanimous", "one_dissent", "unanimous_other", "invalid")
"""How the N proposals of a step are made from its expert action ``e`` and other actions ``a1``, ``a2``:
``split`` cycles e, a1, a2 (no majority); ``unanimous`` is N x e; ``one_dissent`` is (N-1) x e and a1;
``unanimous_other`` is N x a1 (agreement on a non-expert action); ``invalid`` is N unparseable replies."""


def proposals(pattern: str, expert: str, others: list[str], n: int) -> list[Proposal]:
    """The N proposals of ``pattern``; with no ``others`` every valid proposal is the expert action."""
    alts = others or [expert]
    if pattern == "split":
        pool = [expert, *alts[:2]]
        actions = [pool[i % len(pool)] for i in range(n)]
    elif pattern == "unanimous":
        actions = [expert] * n
    elif pattern == "one_dissent":
        actions = [expert] * (n - 1) + [alts[0]]
    elif pattern == "unanimous_other":
        actions = [alts[0]] * n
    elif pattern == "invalid":
        return [Proposal(thought="", action="", valid=False) for _ in range(n)]
    else:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    return [Proposal(thought="", action=a) for a in actions]


def other_actions(env: Environment, expert: str, vocabulary: list[str]) -> list[str]:
    """Actions of ``vocabulary`` that differ from ``expert`` once normalized, one per normalized form."""
    seen = {env.normalize_action(expert)}
    out = []
    for action in vocabulary:
        key = env.normalize_action(action)
        if key not in seen:
            seen.add(key)
            out.append(action)
    return out


@dataclass(frozen=True)
class DetectorCase:
    """One candidate set shown to the detector and what the engine did with its verdict."""

    task_id: str
    step_index: int
    pattern: str
    sampled: tuple[str, ...]
    """What the detector received: normalized actions, ``""`` for an unparseable reply."""
    expert: str
    """The normalized expert action."""
    decision: Decision
    deliberated: bool
    """The engine deliberates here: the detector said so and there are two or more distinct valid candidates."""


def _candidate_sets(env: Environment, task_ids: list[str], n: int):
    """``(task_id, step_index, pattern, expert step, proposals)`` for every pattern at every expert step."""
    trajs = [expert_trajectory(env, t) for t in task_ids]
    vocabulary = [s.action for t in trajs for s in t.steps]
    for traj in trajs:
        own = [s.action for s in traj.steps]
        for i, step in enumerate(traj.steps):
            others = other_actions(env, step.action, own + vocabulary)
            for pattern in PATTERNS:
                yield traj.task_id, i, pattern, step, proposals(pattern, step.action, others, n)


def detector_cases(detector: Detector, env: Environment, task_ids: list[str], *, n: int = 5) -> list[DetectorCase]:
    """Every pattern at every expert step of ``task_ids``, decided as the engine decides a synthesis step.

    The other actions of a step come from the experts of all ``task_ids``
    (the step's own task first), so they are actions the environment knows;
    give tasks whose experts use at least three distinct actions between them
    (two are enough with an even ``n``).
    """
    cases = []
    for task_id, i, pattern, step, props in _candidate_sets(env, task_ids, n):
        sampled, expert = detector_input(env, step, props)
        decision, cands = decide_step(env, detector, step, props)
        cases.append(DetectorCase(task_id, i, pattern, tuple(sampled), expert, decision, bool(cands)))
    return cases


def _default_tasks(env: Environment, task_ids: list[str] | None, limit: int) -> list[str]:
    return list(task_ids) if task_ids is not None else env.tasks(env.splits()[0])[:limit]


def check_detector(detector: Detector, env: Environment, task_ids: list[str] | None = None, *,
                   n: int = 5, limit: int = 3) -> list[str]:
    """Check ``detector`` against the Detector contract on real candidate sets; return the failures (empty = ok).

    ``task_ids`` default to the first ``limit`` tasks of ``env``'s first
    split. Checked: ``decide`` returns a :class:`~sand_framework.types.Decision`
    with a bool ``deliberate`` and a finite ``score``, leaves ``sampled``
    unchanged, and decides the same twice. An exception from ``decide``
    propagates, with its traceback.
    """
    failures = []
    for task_id, i, pattern, step, props in _candidate_sets(env, _default_tasks(env, task_ids, limit), n):
        sampled, expert = detector_input(env, step, props)
        where = f"{task_id} step {i} ({pattern}, {sampled})"
        given = list(sampled)
        d = detector.decide(given, expert)
        if given != sampled:
            failures.append(f"{where}: decide changed the sampled list it was given")
        if not isinstance(d, Decision):
            failures.append(f"{where}: decide returned {type(d).__name__}, not Decision")
            continue
        if not isinstance(d.deliberate, bool):
            failures.append(f"{where}: Decision.deliberate = {d.deliberate!r} is not a bool")
        score = d.score
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            failures.append(f"{where}: Decision.score = {score!r} is not a finite number")
        again = detector.decide(list(sampled), expert)
        if again != d:
            failures.append(f"{where}: decide is not deterministic ({d} then {again})")
    return failures


def assert_detector_conforms(detector: Detector, env: Environment, task_ids: list[str] | None = None, *,
                             n: int = 5, limit: int = 3) -> list[DetectorCase]:
    """:func:`check_detector`, and both branches reached; raise AssertionError listing what failed.

    Both branches means: on some candidate set the engine deliberates, and on
    some set the detector answers ``deliberate=False``. Returns the cases, for
    further assertions on particular patterns.
    """
    task_ids = _default_tasks(env, task_ids, limit)
    failures = check_detector(detector, env, task_ids, n=n)
    if not failures:
        cases = detector_cases(detector, env, task_ids, n=n)
        if not any(c.deliberated for c in cases):
            failures.append("the engine deliberated on none of the candidate sets (the detector never asked, "
                            "or the tasks' experts offer no second action)")
        if all(c.decision.deliberate for c in cases):
            failures.append("the detector asked to deliberate on every candidate set, unanimous ones included")
    if failures:
        listing = "\n".join(f"  - {f}" for f in failures)
        raise AssertionError(f"detector {detector.name!r} fails {len(failures)} check(s):\n{listing}")
    return cases


class ExpertMixSampler(Sampler):
    """Proposes the batch's own expert actions in the :data:`PATTERNS`, so a run on any model deliberates.

    For testing plugins only: the proposals do not come from the agent, so a
    run with it says nothing about SAND. Request ``i`` of a call gets pattern
    ``PATTERNS[i % 5]``, starting with ``split``; its other actions are the
    expert actions of the trajectories in the call. Normalization is the
    engine's, later; here an action differs when its text differs.
    """

    name = "expert_mix"
    description = "TESTING ONLY: proposes the expert actions of the batch in fixed patterns (no model call)"

    @dataclass
    class Params:
        n: Annotated[int, Ge(1)] = 5
        """Proposals per step."""

    def sample(self, requests: list[SampleRequest], policy: Policy, seed: int | None = None) -> list[list[Proposal]]:
        vocabulary = list(dict.fromkeys(s.action for r in requests for s in r.trajectory.steps))
        out = []
        for i, req in enumerate(requests):
            expert = req.trajectory.steps[req.step_index].action
            others = [a for a in vocabulary if a != expert]
            out.append(proposals(PATTERNS[i % len(PATTERNS)], expert, others, self.params.n))
        return out


@hookimpl
def sand_register_samplers(register):
    register(ExpertMixSampler)


__all__ = ["PATTERNS", "DetectorCase", "ExpertMixSampler", "assert_detector_conforms", "check_detector",
           "detector_cases", "other_actions", "proposals"]
