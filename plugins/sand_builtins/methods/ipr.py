"""IPR: iterative step-level process refinement (Xiong et al., 2024; ``WeiminXiong/IPR``) as a method.

For an expert trajectory of ``n`` steps and a step ``j`` (``generate_response.py``'s ``iteration``): replay
the expert's first ``j`` actions, let the current agent (greedy) take step ``j`` and finish the episode.
The *step reward* of a step is the mean final reward of ``mc_samples`` rollouts at temperature
``mc_temperature`` by the behavior-initialization SFT model from the state right after it
(``monte_carlo_sample_*.py``); it is estimated for the agent's step ``j`` and for the expert's step ``j``
(a step that ends the episode is worth its own final reward). A *local* pair (``j >= 1``) has the expert
prefix ``steps[:j]`` as prompt and the two continuations (the expert's remaining steps, the agent's) as
sides; it is kept when the final-reward gap exceeds ``outcome_threshold`` and the step-reward gap exceeds
``step_threshold`` in the same direction, the better one chosen (``construct_preference_monte_carlo_*.py``,
entire-trajectory variant, as ``run_pipeline.sh`` runs it). ``j = 0`` is the agent's episode from the reset:
with ``global_pairs`` it is paired with the whole expert trajectory when the final rewards differ by more
than ``outcome_threshold`` (``--global_traj``). Training: DPO (+ SFT term, the trainer's setting) against
the fixed SFT model (``reference="sft"``).

Cost per expert trajectory, with ``m`` examined steps (``steps_per_trajectory``, at most ``n - 1``):
``1 + m`` greedy agent episodes and up to ``2 * m * mc_samples`` Monte Carlo episodes of the SFT model,
each up to the environment's step cap. IPR's own setting (every step, 5 samples) on ALFWorld (``n`` about
10) is about 100 episodes per trajectory; the default here (2 steps) is 23, which a CPU miniature affords.

The stage's phases (the agent taking over, the Monte Carlo rollouts, the pairs) are methods of their own, so that
``run.batches_in_flight`` can stream them across batches (:meth:`IprMethod.build_stream`).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import IterationData, MethodTools
from sand_framework.rollout import ExploreRequest, Exploration
from sand_framework.streaming import stream
from sand_framework.synthesis import SerialPolicy
from sand_framework.types import PreferencePair, Step, Trajectory

from sand_builtins.methods.common import (ExploringMethod, expert_reward, expert_reward_rule, pools, task_seed,
                                          trained_on)

MC_PHASE = "ipr-monte-carlo"
"""The pool the Monte Carlo rollouts play on when the stage is streamed (the agent's episodes keep the default)."""


def examined_steps(n: int, cap: int | None, seed: int) -> list[int]:
    """The expert steps ``j`` (1 .. n-1) whose local pairs are built: all of them, or ``cap`` of them drawn
    with ``seed`` (sorted)."""
    steps = list(range(1, n))
    if cap is None or cap >= len(steps):
        return steps
    return sorted(random.Random(seed).sample(steps, cap))


@dataclass
class IprBatch:
    """One batch of trajectories between IPR's phases (:meth:`IprMethod.build_stream` hands it from one to the
    next)."""

    trajectories: list[Trajectory]
    seed: int
    plan: list[tuple[Trajectory, list[int]]] = field(default_factory=list)
    """Each trajectory and its examined steps (0: the agent's episode from the reset, for the global pair)."""
    taken: dict[tuple[str, int], Exploration] = field(default_factory=dict)
    """The agent's episode from each (task, examined step)."""
    step_reward: dict[tuple[str, int, str], dict[str, Any]] = field(default_factory=dict)
    """Each (task, step, side)'s Monte Carlo estimate."""


class IprMethod(ExploringMethod["IprMethod.Params"]):
    """Step-level preference pairs from Monte Carlo step rewards along the expert's trajectories (DPO)."""

    name = "ipr"
    description = ("at expert steps j the agent takes over; Monte Carlo step rewards (SFT model) pick local "
                   "pairs of continuations, plus whole-trajectory pairs (DPO against the SFT model)")
    produces = "preference"

    @dataclass
    class Params:
        steps_per_trajectory: Annotated[int, Ge(1)] | None = 2
        """Expert steps j >= 1 examined per trajectory, drawn from the unit's seed (null: every step, as IPR
        does; the cost grows with it, see the module notes)."""
        mc_samples: Annotated[int, Ge(1)] = 5
        """Monte Carlo rollouts per step reward (IPR: 5)."""
        mc_temperature: Annotated[float, Ge(0.0)] = 1.0
        """Sampling temperature of the Monte Carlo rollouts (IPR: 1.0)."""
        temperature: Annotated[float, Ge(0.0)] = 0.0
        """Decoding of the current agent taking over at step j (IPR: greedy)."""
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of each agent turn, in both kinds of episode (as the evaluator's)."""
        outcome_threshold: Annotated[float, Ge(0.0)] = 0.01
        """A pair needs the final rewards to differ by more than this (IPR's ``traj_threshold``; its
        run_pipeline.sh: 0.01)."""
        step_threshold: Annotated[float, Ge(0.0)] = 0.01
        """A local pair needs the step rewards to differ by more than this, in the same direction (IPR's
        ``step_threshold``; run_pipeline.sh: 0.01)."""
        global_pairs: bool = True
        """Also pair the agent's episode from the reset with the whole expert trajectory (IPR's
        ``--global_traj``, on in run_pipeline.sh)."""
        expert_reward: Literal["auto", "one", "stored"] = "auto"
        """The expert trajectory's final reward: ``stored`` (IPR's ``gpt_reward``, the reward stored with it),
        ``one`` (1.0); ``auto`` = ``stored`` for WebShop environments, ``one`` otherwise (the expert reaches the
        goal), as ETO's method."""
        max_rollout_steps: Annotated[int, Ge(1)] | None = None
        """Cap on a Monte Carlo rollout's own steps after the estimated step (null: the environment's cap; a
        cap makes every step reward an estimate of finishing within it)."""
        explore_tasks: Annotated[int, Ge(0)] = 0
        """Also explore this many more tasks of the training split (``data.split``, in order), each with the
        environment's gold trajectory as its expert side: IPR explores every training task, while a miniature's
        SFT start may be trained on a few (0: only the trajectories trained on). Their gold trajectories are never
        the next iteration's expert data."""
        cross_task_batching: bool = False
        """Seed the Monte Carlo rollouts of all the batch's states as one group (a unit then depends on which
        tasks share its batch). By default each state's ``mc_samples`` rollouts are seeded from the state, so a
        unit does not; with a policy that seeds per chat (every built-in one: ``Policy.seeds_per_chat``) the
        states' rollouts still share the waves and model calls, up to ``executor.max_parallel``, so this is no
        longer faster (before 0.3.6 it was: each state's 5 rollouts played alone); without one, each state's
        rollouts play apart."""

    def extra_tasks(self) -> int:
        return self.params.explore_tasks

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        batch = IprBatch(trajectories, seed)
        self._take_over(batch, tools)
        self._monte_carlo(batch, tools)
        return self._units(batch, tools)

    def build_stream(self, batches: Iterable[tuple[list[Trajectory], int]], tools: MethodTools,
                     depth: int = 1) -> Iterator[list[dict[str, Any]]]:
        """With ``depth`` > 1 (``run.batches_in_flight``), the two phases as a stream, one thread each: the agent
        takes over in batch k+1 while batch k's Monte Carlo rollouts play, on a pool of their own
        (:data:`MC_PHASE`), so the agent engine's batch does not thin out while a batch's last episodes end.
        Every call is the chunked stage's, with its batch's seeds, so the units are too (on an engine that batches
        the two threads' requests together, up to a batched forward's float rounding). Only where both phases
        sample from the same weights (iteration 1: the agent is the SFT model); from iteration 2 the Monte Carlo
        rollouts switch the policy to the SFT weights, so the batches run one after another."""
        if depth <= 1 or self._switches(tools):
            yield from super().build_stream(batches, tools, depth)
            return
        pools(tools)  # made here, not by the first of the two threads to ask
        if not tools.policy.concurrent_generate:  # a model in this process: the threads take turns on it
            tools = dataclasses.replace(tools, policy=SerialPolicy(tools.policy))
        work = (IprBatch(trajs, seed) for trajs, seed in batches)
        stages = stream(work, [lambda b: self._take_over(b, tools),
                               lambda b: self._monte_carlo(b, tools, phase=MC_PHASE)], depth)
        try:
            for batch in stages:
                yield self._units(batch, tools)
        finally:
            stages.close()

    @staticmethod
    def _switches(tools: MethodTools) -> bool:
        """The Monte Carlo rollouts sample from other weights than the agent's (iteration 2 on)."""
        return tools.weights.get("sft") != tools.weights.get("agent")

    def _take_over(self, b: IprBatch, tools: MethodTools) -> IprBatch:
        """Phase 1: the current agent takes over at each examined step j (greedy by default: one batch for all)."""
        p = self.params
        b.plan = [(t, ([0] if p.global_pairs else []) + examined_steps(len(t.steps), p.steps_per_trajectory,
                                                                       task_seed(b.seed, t, "ipr-steps")))
                  for t in b.trajectories]
        take = [(t, j) for t, js in b.plan for j in js]
        agent = self.explore([ExploreRequest(t, prefix=j, seed=task_seed(b.seed, t, "ipr-agent", j))
                              for t, j in take], tools, p.temperature)
        b.taken = {(t.task_id, j): ex for (t, j), ex in zip(take, agent)}
        return b

    def _monte_carlo(self, b: IprBatch, tools: MethodTools, phase: str | None = None) -> IprBatch:
        """Phase 2: step rewards, from Monte Carlo rollouts of the SFT model from the state after each side's
        step j (on the pool named ``phase``)."""
        p = self.params
        states: list[tuple[str, int, str, Trajectory]] = []  # (task, j, side, steps to replay: prefix + step j)
        for t, js in b.plan:
            for j in js:
                ex = b.taken[(t.task_id, j)]
                if j == 0 or not ex.ok or not ex.agent_steps:
                    continue
                states.append((t.task_id, j, "agent", Trajectory(t.task_id, t.env, t.instruction, t.task,
                                                                 steps=ex.trajectory.steps[:j + 1])))
                states.append((t.task_id, j, "expert", t))
        by_task = {t.task_id: t for t in b.trajectories}
        mc_requests = []
        for task_id, j, side, replay in states:
            cap = None if p.max_rollout_steps is None else min(tools.env.max_steps(task_id),
                                                                j + 1 + p.max_rollout_steps)
            s = task_seed(b.seed, by_task[task_id], "ipr-mc", j, side)
            mc_requests += [ExploreRequest(replay, prefix=j + 1, seed=s, max_steps=cap) for _ in range(p.mc_samples)]
        mc: list[Exploration] = []
        if mc_requests:
            switch = self._switches(tools)
            if switch:
                tools.policy.set_agent_weights(tools.weights.get("sft"))
            try:
                mc = self.explore(mc_requests, tools, p.mc_temperature, phase=phase)
            finally:
                if switch:
                    tools.policy.set_agent_weights(tools.weights.get("agent"))
        for n, (task_id, j, side, _) in enumerate(states):
            runs = mc[n * p.mc_samples:(n + 1) * p.mc_samples]
            good = [r for r in runs if r.ok]
            b.step_reward[(task_id, j, side)] = {
                "value": round(sum(r.trajectory.reward for r in good) / len(good), 6) if good else None,
                "rewards": [r.trajectory.reward for r in runs], "errors": sum(not r.ok for r in runs),
                "agent_steps": sum(len(r.agent_steps) for r in runs)}
        return b

    def _units(self, b: IprBatch, tools: MethodTools) -> list[dict[str, Any]]:
        """Phase 3 (no model): the pairs, one unit per trajectory."""
        p, taken, step_reward = self.params, b.taken, b.step_reward
        rule = expert_reward_rule(p.expert_reward, tools.env)
        units = []
        for t, js in b.plan:
            r_expert = expert_reward(t, rule)
            records, pairs = [], []
            for j in js:
                ex = taken[(t.task_id, j)]
                rec: dict[str, Any] = {"step": j, "agent_actions": [s.action for s in ex.agent_steps],
                                       "agent_reward": ex.trajectory.reward, "expert_reward": r_expert,
                                       "error": ex.error}
                pair = None
                if ex.ok and j == 0:
                    pair = self._global_pair(t, ex, r_expert)
                elif ex.ok and ex.agent_steps:
                    sa, se = step_reward[(t.task_id, j, "agent")], step_reward[(t.task_id, j, "expert")]
                    rec.update(agent_step_reward=sa["value"], expert_step_reward=se["value"],
                               mc={"agent": sa, "expert": se})
                    pair = self._local_pair(t, j, ex, r_expert, sa["value"], se["value"])
                rec["pair"] = pair.meta["outcome"] if pair is not None else None
                records.append(rec)
                if pair is not None:
                    pairs.append(pair.to_dict())
            mc_runs = [step_reward[(t.task_id, j, side)] for j in js for side in ("agent", "expert")
                       if (t.task_id, j, side) in step_reward]
            units.append({
                "task_id": t.task_id, "steps": records, "pairs": pairs,
                "stats": {"examined_steps": sum(j > 0 for j in js), "explorations": len(js),
                          "mc_rollouts": p.mc_samples * len(mc_runs),
                          "mc_agent_steps": sum(r["agent_steps"] for r in mc_runs),
                          "agent_steps": sum(len(taken[(t.task_id, j)].agent_steps) for j in js),
                          "pairs": len(pairs), "global_pairs": sum(q["meta"]["kind"] == "global" for q in pairs),
                          "local_pairs": sum(q["meta"]["kind"] == "local" for q in pairs),
                          "replay_errors": sum(r["error"] is not None for r in records)
                          + sum(r["errors"] for r in mc_runs)},
            })
        return units

    def _global_pair(self, t: Trajectory, ex: Exploration, r_expert: float) -> PreferencePair | None:
        gap, agent = ex.trajectory.reward - r_expert, list(ex.agent_steps)
        prompt = Trajectory(t.task_id, t.env, t.instruction, t.task)
        meta = {"method": "ipr", "kind": "global", "task_id": t.task_id, "step": 0}
        if gap > self.params.outcome_threshold and agent and t.steps:
            return PreferencePair(prompt, agent, list(t.steps), ex.trajectory.reward, r_expert,
                                  meta={**meta, "outcome": "agent_better"})
        if -gap > self.params.outcome_threshold and agent and t.steps:
            return PreferencePair(prompt, list(t.steps), agent, r_expert, ex.trajectory.reward,
                                  meta={**meta, "outcome": "expert_better"})
        return None

    def _local_pair(self, t: Trajectory, j: int, ex: Exploration, r_expert: float, s_agent: float | None,
                    s_expert: float | None) -> PreferencePair | None:
        if s_agent is None or s_expert is None:
            return None
        p = self.params
        prompt = Trajectory(t.task_id, t.env, t.instruction, t.task, steps=[Step.from_dict(s.to_dict())
                                                                              for s in t.steps[:j]])
        agent, expert = list(ex.agent_steps), list(t.steps[j:])
        meta = {"method": "ipr", "kind": "local", "task_id": t.task_id, "step": j,
                "agent_step_reward": s_agent, "expert_step_reward": s_expert}
        r_agent = ex.trajectory.reward
        if not (agent and expert):
            return None
        if r_agent - r_expert > p.outcome_threshold and s_agent - s_expert > p.step_threshold:
            return PreferencePair(prompt, agent, expert, r_agent, r_expert, meta={**meta, "outcome": "agent_better"})
        if r_expert - r_agent > p.outcome_threshold and s_expert - s_agent > p.step_threshold:
            return PreferencePair(prompt, expert, agent, r_expert, r_agent, meta={**meta, "outcome": "expert_better"})
        return None

    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        """Every unit's pairs, in task and step order; the reference is the fixed SFT model."""
        pairs = [PreferencePair.from_dict(d) for u in units for d in u["pairs"]]
        return IterationData(next_expert=trained_on(trajectories), pairs=pairs, reference="sft")


@hookimpl
def sand_register_methods(register):
    register(IprMethod)
