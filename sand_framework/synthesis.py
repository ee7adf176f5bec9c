"""One SAND synthesis pass over a batch of expert trajectories (steps 2-4 of the method).

For every step: sample N candidate actions, let the detector decide, roll out
each distinct candidate of the deliberated steps, critique, synthesize. Each
phase is one batched call over the whole batch of trajectories, so a backend
sees large batches and the executor can advance rollouts in lock-step. The
phases are separate functions (:data:`PHASES`) so that a streamed build can
overlap them across batches (:meth:`SandMethod.build_stream`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sand_framework.components import (
    Critic,
    CritiqueRequest,
    Detector,
    Environment,
    Executor,
    Policy,
    RolloutRequest,
    Sampler,
    SampleRequest,
    SynthesisRequest,
    Synthesizer,
)
from sand_framework.components.declared import SYNTHESIS_SLOTS
from sand_framework.prompting import trajectory_chat
from sand_framework.types import Candidate, Decision, DeliberationRecord, Rollout, Step, Trajectory


@dataclass
class SynthesisOutput:
    trajectory: Trajectory
    """The trajectory with deliberation thoughts at deliberated steps, expert thoughts elsewhere."""
    records: list[DeliberationRecord]
    """The deliberated steps: their thought replaced the expert's."""
    stats: dict[str, Any] = field(default_factory=dict)
    failed: list[DeliberationRecord] = field(default_factory=list)
    """Steps chosen for deliberation whose synthesis failed (status ``failed``): kept for audit, not trained on
    (the step keeps the expert's thought, as in the paper)."""


@dataclass
class RolloutCache:
    """Rollouts of one iteration keyed by ``(task_id, prefix actions, candidate)`` (actions normalized).

    A rollout depends only on the task, the state reached by the prefix and the
    candidate (plus sampling noise), so identical branches, which appear when
    the same task's trajectory occurs more than once in the data or when a
    batch is resynthesized, are executed once per iteration. The pipeline
    keeps one cache per iteration; a fresh one per call otherwise.
    """

    entries: dict[tuple, Rollout] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    @staticmethod
    def key(env: Environment, req: RolloutRequest) -> tuple:
        prefix = tuple(env.normalize_action(s.action) for s in req.trajectory.steps[:req.step_index])
        return (req.trajectory.task_id, prefix, env.normalize_action(req.candidate.action))

    def run(self, executor: Executor, requests: list[RolloutRequest], env: Environment, policy: Policy,
            seed: int | None) -> list[Rollout]:
        """Rollouts for ``requests``: cached ones reused, the distinct rest run in one ``executor.run``."""
        keys = [self.key(env, r) for r in requests]
        todo: dict[tuple, RolloutRequest] = {}
        for k, r in zip(keys, requests):
            if k in self.entries or k in todo:
                self.hits += 1
            else:
                todo[k] = r
        self.misses += len(todo)
        if todo:
            for k, ro in zip(todo, executor.run(list(todo.values()), env, policy, seed=seed)):
                self.entries[k] = ro
        out = []
        for k, r in zip(keys, requests):
            ro = Rollout.from_dict(self.entries[k].to_dict())
            ro.candidate = r.candidate.action
            out.append(ro)
        return out


@dataclass
class Components:
    """One component per synthesis slot (:data:`sand_framework.components.declared.SYNTHESIS_SLOTS`)."""

    environment: Environment
    policy: Policy
    detector: Detector
    sampler: Sampler
    executor: Executor
    critic: Critic
    synthesizer: Synthesizer
    rollout_cache: RolloutCache | None = None
    """Shared across the batches of one iteration (the pipeline sets it); None: one per call."""

    @classmethod
    def of_slots(cls, component: Callable[[str], Any], rollout_cache: RolloutCache | None = None) -> Components:
        """``component(slot)`` for every synthesis slot, e.g. a run context's recipe-selected components."""
        return cls(**{slot: component(slot) for slot in SYNTHESIS_SLOTS}, rollout_cache=rollout_cache)


class SerialPolicy:
    """A policy that takes one ``generate`` call at a time, for the phases of a streamed build to share.

    A backend holding its model in this process (``transformers``) must not decode from several threads at
    once; the streamed phases still overlap every environment step and every bit of work outside the model,
    and asynchronous rollouts reach a backend with its own request queue (``submit``: ``vllm``, ``openai``)
    through ``submit``, which this leaves to the backend. Everything else is the wrapped policy's."""

    def __init__(self, policy: Policy):
        self._policy = policy
        self._lock = threading.Lock()

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return self._policy.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


Policy.register(SerialPolicy)  # a method that checks isinstance(tools.policy, Policy) still sees a policy


def candidates_for(env: Environment, step: Step, proposals: list) -> list[Candidate]:
    """Distinct normalized actions among the samples plus the expert's, expert first."""
    expert_norm = env.normalize_action(step.action)
    cands: dict[str, Candidate] = {expert_norm: Candidate(action=step.action, thought=step.thought, count=0,
                                                          is_expert=True)}
    for p in proposals:
        if not p.valid:
            continue
        key = env.normalize_action(p.action)
        if key in cands:
            cands[key].count += 1
        else:
            cands[key] = Candidate(action=p.action, thought=p.thought, count=1)
    return list(cands.values())


def detector_input(env: Environment, step: Step, proposals: list) -> tuple[list[str], str]:
    """What a detector decides on: the proposals normalized (``""`` for invalid ones) and the expert action."""
    return [env.normalize_action(p.action) if p.valid else "" for p in proposals], env.normalize_action(step.action)


def decide_step(env: Environment, detector: Detector, step: Step, proposals: list) -> tuple[Decision, list[Candidate]]:
    """The detector's decision at ``step`` and the candidates the engine deliberates on there.

    The step is deliberated only when the detector says so *and* there are at
    least two distinct valid candidates; the list is empty when it is not.
    """
    decision = detector.decide(*detector_input(env, step, proposals))
    cands = candidates_for(env, step, proposals) if decision.deliberate else []
    return decision, cands if len(cands) > 1 else []


@dataclass
class BatchInProgress:
    """One batch of trajectories between the phases of :func:`synthesize_batch` (:data:`PHASES`).

    Each phase fills its fields and returns the batch, so the phases can run one after another (the chunked
    stage) or as the stages of a stream (:func:`sand_framework.streaming.stream`), one thread each, with the
    same calls and seeds either way."""

    trajectories: list[Trajectory]
    components: Components
    seed: int
    chosen: list[tuple[SampleRequest, list[Candidate], float]] = field(default_factory=list)
    samples_total: int = 0
    samples_valid: int = 0
    rollouts: list[Rollout | None] = field(default_factory=list)
    rollout_cache_hits: int = 0
    critiques: list = field(default_factory=list)
    outputs: list[SynthesisOutput] = field(default_factory=list)

    @property
    def flat(self) -> list[tuple[SampleRequest, Candidate]]:
        """Every candidate of every chosen step, in order: what is rolled out and critiqued."""
        return [(req, cand) for req, cands, _ in self.chosen for cand in cands]


def sample_and_decide(b: BatchInProgress) -> BatchInProgress:
    """Phases 1-2 (agent engine): N sampled actions at every step; the detector picks the steps to deliberate."""
    c = b.components
    sample_reqs = [SampleRequest(t, i, trajectory_chat(t, upto=i)) for t in b.trajectories for i in range(len(t.steps))]
    proposals = c.sampler.sample(sample_reqs, c.policy, seed=b.seed)
    for req, props in zip(sample_reqs, proposals):
        step = req.trajectory.steps[req.step_index]
        b.samples_total += len(props)
        b.samples_valid += sum(p.valid for p in props)
        decision, cands = decide_step(c.environment, c.detector, step, props)
        if cands:
            b.chosen.append((req, cands, decision.score))
    return b


def roll_out(b: BatchInProgress) -> BatchInProgress:
    """Phase 3 (agent engine, environment): execution-guided rollouts of every distinct candidate (skipped by
    critics that need none)."""
    c, flat = b.components, b.flat
    b.rollouts = [None] * len(flat)
    if c.critic.needs_rollouts and flat:
        cache = c.rollout_cache if c.rollout_cache is not None else RolloutCache()
        hits_before = cache.hits
        b.rollouts = list(cache.run(
            c.executor,
            [RolloutRequest(req.trajectory, req.step_index, cand, c.environment.max_steps(req.trajectory.task_id))
             for req, cand in flat], c.environment, c.policy, seed=b.seed))
        b.rollout_cache_hits = cache.hits - hits_before
    return b


def critique_and_synthesize(b: BatchInProgress) -> BatchInProgress:
    """Phases 4-6 (base engine): critique each candidate, synthesize one deliberation per chosen step, and
    assemble the batch's outputs (a failed synthesis keeps the expert's thought)."""
    c = b.components
    critiques = c.critic.critique([CritiqueRequest(req.trajectory, req.step_index, cand, ro)
                                   for (req, cand), ro in zip(b.flat, b.rollouts)], c.policy, seed=b.seed)
    synth_reqs, offset = [], 0
    per_step: list[tuple[list[Rollout | None], list]] = []
    for req, cands, _ in b.chosen:
        k = len(cands)
        synth_reqs.append(SynthesisRequest(req.trajectory, req.step_index, cands, critiques[offset:offset + k]))
        per_step.append((b.rollouts[offset:offset + k], critiques[offset:offset + k]))
        offset += k
    results = c.synthesizer.synthesize(synth_reqs, c.policy, seed=b.seed)
    b.critiques = critiques
    b.outputs = _assemble(b, per_step, results)
    return b


PHASES: tuple[Callable[[BatchInProgress], BatchInProgress], ...] = (sample_and_decide, roll_out,
                                                                    critique_and_synthesize)
"""The phases of one synthesis batch, in order, split where the engine changes (agent sampling, agent
rollouts, base critique and synthesis): the stages a streamed build overlaps across batches."""


def synthesize_batch(trajs: list[Trajectory], c: Components, seed: int) -> list[SynthesisOutput]:
    """Every phase of :data:`PHASES` over one batch, one after another."""
    b = BatchInProgress(trajs, c, seed)
    for phase in PHASES:
        b = phase(b)
    return b.outputs


def _assemble(b: BatchInProgress, per_step: list[tuple[list[Rollout | None], list]],
              results: list) -> list[SynthesisOutput]:
    """Replace thoughts only at deliberated steps; a failed synthesis keeps the expert's thought."""
    trajs, c = b.trajectories, b.components
    outputs = {id(t): SynthesisOutput(Trajectory.from_dict(t.to_dict()), [], {}) for t in trajs}
    for (req, cands, score), (ros, crits), res in zip(b.chosen, per_step, results):
        out = outputs[id(req.trajectory)]
        step = out.trajectory.steps[req.step_index]
        record = DeliberationRecord(
            task_id=req.trajectory.task_id, step_index=req.step_index, expert_action=step.action,
            expert_thought=step.thought, candidates=cands, rollouts=[r for r in ros if r is not None],
            critiques=crits, synthesis=res, detector_score=score)
        if res.status == "failed":
            out.failed.append(record)
            continue
        step.thought, step.deliberated = res.thought, True
        out.records.append(record)
    switches = {id(t): switch_expert(outputs[id(t)], t, c.executor, c.environment) for t in trajs}
    for t in trajs:
        out = outputs[id(t)]
        out.stats = {
            "steps": len(t.steps),
            "deliberated": len(out.records),
            "candidates": sum(len(r.candidates) for r in out.records),
            "rollouts": sum(len(r.rollouts) for r in out.records),
            "rollout_steps": sum(len(ro.steps) for r in out.records for ro in r.rollouts),
            "fallbacks": sum(r.synthesis.status == "fallback" for r in out.records),
            "retries": sum(r.synthesis.status == "retried" for r in out.records),
            "synthesis_failed": len(out.failed),
            "critiques": sum(len(r.critiques) for r in out.records + out.failed),
            "critiques_truncated": sum(c.truncated for r in out.records + out.failed for c in r.critiques),
            "expert_switches": int(switches[id(t)]),
        }
    if trajs:
        outputs[id(trajs[0])].stats.update(samples_total=b.samples_total, samples_valid=b.samples_valid,
                                           rollout_cache_hits=b.rollout_cache_hits)
    return [outputs[id(t)] for t in trajs]


def switch_expert(out: SynthesisOutput, expert: Trajectory, executor: Executor, env: Environment) -> bool:
    """Apply the expert switch to one synthesized trajectory (see :meth:`Executor.switches_expert`).

    The best rollout that beats the expert (highest reward, then success, then
    fewest steps; earliest branch on ties) replaces the trajectory from its
    branch step on: the prefix keeps its deliberations, the branch step and the
    continuation keep the agent's own thoughts, and deliberation records at or
    after the branch are dropped (they led to actions no longer taken).
    """
    better = [ro for rec in out.records for ro in rec.rollouts
              if env.normalize_action(ro.candidate) != env.normalize_action(expert.steps[ro.prefix_len].action)
              and executor.switches_expert(expert, ro)]
    if not better:
        return False
    best = max(better, key=lambda ro: (ro.reward, ro.success, -(ro.prefix_len + len(ro.steps)), -ro.prefix_len))
    t = best.prefix_len
    traj = out.trajectory
    traj.meta["expert_switch"] = {"step": t, "candidate": best.candidate, "expert_reward": expert.reward,
                                  "expert_steps": len(expert.steps), "reward": best.reward,
                                  "steps": t + len(best.steps)}
    traj.steps = traj.steps[:t] + [Step.from_dict(s.to_dict()) for s in best.steps]
    traj.reward, traj.success = best.reward, best.success
    out.records = [r for r in out.records if r.step_index < t]
    out.failed = [r for r in out.failed if r.step_index < t]
    return True
