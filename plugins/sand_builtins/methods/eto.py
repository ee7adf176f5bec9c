"""ETO: exploration-based trajectory optimization (Song et al., 2024; ``Yifan-Song793/ETO``) as a method.

Per iteration the current agent explores every training task from the reset
(ETO's script's agent config is greedy). Its final reward is compared with the
expert's (``construct_preference.py``): lower = a failure, and the pair is
(expert chosen, agent rejected); higher = the pair flips (agent chosen, expert
rejected); a tie is dropped. A pair needs both sides to end on a model turn
(a side of one or more agent steps always does here; an empty side drops the
pair). On WebShop and ScienceWorld ETO cuts the rejected side to the expert's
length + 10 messages. The pairs train with the ``preference_trainer`` slot
(DPO), the current agent being both the policy's start and the reference
(``reference="init"``); the expert data goes unchanged to the next iteration.

Cost per task: one agent episode (up to the environment's step cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import Ge

from sand_framework import hookimpl
from sand_framework.components import Environment, IterationData, MethodTools
from sand_framework.rollout import ExploreRequest
from sand_framework.types import PreferencePair, Step, Trajectory

from sand_builtins.methods.common import (TRUNCATE_REJECTED, ExploringMethod, benchmark_of, expert_reward,
                                          expert_reward_rule, task_seed, trained_on)


def truncated(steps: list[Step], expert_steps: int, extra_messages: int | None) -> list[Step]:
    """ETO's cut of a rejected side: ``pred[:len(expert) + extra][1:]`` in messages counted from the task turn,
    i.e. at most ``expert_steps + extra // 2`` agent steps (the cut always ends on an agent turn)."""
    if extra_messages is None:
        return list(steps)
    return list(steps[:max(0, expert_steps + extra_messages // 2)])


class EtoMethod(ExploringMethod["EtoMethod.Params"]):
    """Trajectory preference pairs: the expert's trajectory against the agent's failed exploration (DPO)."""

    name = "eto"
    description = ("explore each training task; pair the expert's trajectory with the agent's when their rewards "
                   "differ (DPO)")
    produces = "preference"

    @dataclass
    class Params:
        temperature: Annotated[float, Ge(0.0)] = 0.0
        """Exploration temperature (ETO's ``fastchat.json`` agent config is greedy; its unused explore config
        samples at 0.7)."""
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of each agent turn while exploring (as the evaluator's)."""
        expert_reward: Literal["auto", "one", "stored"] = "auto"
        """The expert's reward the agent's is compared with: ``one`` (ETO on ALFWorld and ScienceWorld: the expert
        counts as 1.0), ``stored`` (ETO on WebShop: the reward stored with the expert trajectory); ``auto`` =
        ``stored`` for WebShop environments, ``one`` otherwise."""
        truncate_rejected: Annotated[int, Ge(0)] | Literal["auto"] | None = "auto"
        """Cut the rejected agent side to the expert's length plus this many messages (ETO: 10 on WebShop and
        ScienceWorld, i.e. 5 more agent steps than the expert took); null = no cut (ETO on ALFWorld); ``auto`` =
        10 for WebShop and ScienceWorld environments, no cut otherwise."""
        explore_tasks: Annotated[int, Ge(0)] = 0
        """Also explore this many more tasks of the training split (``data.split``, in order), each with the
        environment's gold trajectory as its expert side: ETO explores every training task, while a miniature's
        SFT start may be trained on a few (0: only the trajectories trained on). Their gold trajectories are never
        the next iteration's expert data."""
        cross_task_batching: bool = False
        """With ``temperature`` > 0: seed all the batch's tasks as one group (a unit then depends on which tasks
        share its batch) instead of each from its task. A policy that seeds per chat (every built-in one:
        ``Policy.seeds_per_chat``) shares the model calls across tasks either way, so this is no longer faster
        (before 0.3.6 it was); without one, each task is sampled apart. Greedy exploration always batches."""

    def _truncation(self, env: Environment) -> int | None:
        t = self.params.truncate_rejected
        return TRUNCATE_REJECTED.get(benchmark_of(env) or "") if t == "auto" else t

    def extra_tasks(self) -> int:
        return self.params.explore_tasks

    def build(self, trajectories: list[Trajectory], tools: MethodTools, seed: int) -> list[dict[str, Any]]:
        p = self.params
        rule, cut = expert_reward_rule(p.expert_reward, tools.env), self._truncation(tools.env)
        found = self.explore([ExploreRequest(t, prefix=0, seed=task_seed(seed, t, "eto")) for t in trajectories],
                             tools, p.temperature)
        units = []
        for traj, ex in zip(trajectories, found):
            agent, r_expert = ex.trajectory, expert_reward(traj, rule)
            agent.meta = {"source": "eto", "iteration": tools.iteration, "invalid_replies": ex.invalid_replies}
            pair, outcome = None, "error" if not ex.ok else (
                "lose" if agent.reward < r_expert else "win" if agent.reward > r_expert else "tie")
            prompt = Trajectory(task_id=traj.task_id, env=traj.env, instruction=traj.instruction, task=traj.task)
            meta = {"method": "eto", "task_id": traj.task_id, "outcome": outcome, "iteration": tools.iteration}
            if outcome == "lose":
                pair = PreferencePair(prompt, list(traj.steps), truncated(agent.steps, len(traj.steps), cut),
                                      chosen_reward=r_expert, rejected_reward=agent.reward, meta=meta)
            elif outcome == "win":
                pair = PreferencePair(prompt, list(agent.steps), list(traj.steps), chosen_reward=agent.reward,
                                      rejected_reward=r_expert, meta=meta)
            if pair is not None and not (pair.chosen and pair.rejected):  # both sides must end on a model turn
                pair, outcome = None, "empty_side"
            units.append({
                "task_id": traj.task_id,
                "agent": agent.to_dict(),
                "error": ex.error,
                "agent_reward": agent.reward,
                "expert_reward": r_expert,
                "outcome": outcome,
                "pair": pair.to_dict() if pair is not None else None,
                "stats": {"explorations": 1, "lose": int(outcome == "lose"), "win": int(outcome == "win"),
                          "tie": int(outcome == "tie"), "dropped": int(outcome in ("empty_side", "error")),
                          "pairs": int(pair is not None), "agent_success": int(agent.success),
                          "agent_steps": len(ex.agent_steps)},
            })
        return units

    def assemble(self, units: list[dict[str, Any]], trajectories: list[Trajectory]) -> IterationData:
        """The pairs, in task order; the reference is the weights training starts from (the current agent)."""
        pairs = [PreferencePair.from_dict(u["pair"]) for u in units if u.get("pair")]
        return IterationData(next_expert=trained_on(trajectories), pairs=pairs, reference="init")


@hookimpl
def sand_register_methods(register):
    register(EtoMethod)
