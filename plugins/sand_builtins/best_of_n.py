"""Best-of-N at inference: N sampled episodes per task, one kept by a scorer (AgentRM-BoN, the paper's Table 4).

A search-at-inference baseline for SAND's comparison: the agent is not trained further, it is *sampled* N times
per task and one trajectory is kept. What keeps it is the ``scorer``:

* ``oracle`` — the environment's final reward of each sample (ties: success, then the earlier sample). A
  deployed agent never sees the reward, so this is an **UPPER BOUND** on any Best-of-N with a learnt scorer
  (it is pass@N); its metrics say so (``best_of_n.upper_bound``).
* ``judge`` — the frozen base model (``role="base"``, greedy) reads each sample's actions and observations and
  scores it from 0 to 10 (``judge_mode: score``, one call per sample), or reads all N and names the best
  (``judge_mode: pick``, one call per task). It sees what a deployed agent sees, never the reward. AgentRM
  trains a reward model for this; the base model is the scorer this framework has without training one.

Cost (the paper's Table 3): a task's ``prompt_tokens`` and ``completion_tokens`` are the sum over all N
episodes plus the judge's calls, since a deployment pays for all of them; the breakdown is in the kept
trajectory's ``meta["best_of_n"]``.

Determinism: each task's N episodes run as one lock-step batch of their own, seeded from ``seed`` and the task
id, so a task's samples do not depend on which other tasks share the engine's evaluation batch, and a resumed
evaluation matches an uninterrupted one (the judge is greedy).
"""

from __future__ import annotations

import hashlib
import re
import statistics
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import Ge, Interval

from sand_framework import hookimpl
from sand_framework.components import Environment, Policy, TaskResult
from sand_framework.components.environment import MAX_EPISODE_STEPS
from sand_framework.config.paramdoc import SCHEDULING
from sand_framework.metrics import aggregate_results
from sand_framework.types import SamplingParams, Trajectory

from sand_builtins.evaluators import GreedyEvaluator

SCORE_PROMPT = """You are judging an agent's attempt at a task in a text environment.

{task}

The agent's attempt (its actions and what it observed):
{attempt}

Did the agent complete the task? Rate the attempt from 0 (it failed) to 10 (it surely completed the task).
Answer with the number only."""
"""``judge_mode: score``: one attempt, a 0-10 score."""

PICK_PROMPT = """You are judging {n} attempts of an agent at the same task in a text environment.

{task}

{attempts}

Which attempt completed the task best? Answer with the attempt's number (1 to {n}) only."""
"""``judge_mode: pick``: every attempt in one prompt, the best one's number."""

ORACLE_NOTE = ("UPPER BOUND: the oracle scorer keeps the sample with the best environment reward, which a "
               "deployed agent never sees (pass@N)")


def task_seed(seed: int, task_id: str) -> int:
    """The sampling seed of one task's N episodes: stable across resumes and batchings."""
    return int(hashlib.sha256(f"best_of_n/{seed}/{task_id}".encode()).hexdigest()[:8], 16)


def attempt_text(traj: Trajectory, max_observation_chars: int) -> str:
    """A sample as the judge reads it: numbered actions and the (shortened) observations they got."""
    lines = []
    for i, s in enumerate(traj.steps, 1):
        obs = " ".join((s.observation or "").split())
        if len(obs) > max_observation_chars:
            obs = obs[:max_observation_chars].rstrip() + " ..."
        lines.append(f"{i}. > {s.action or '(no valid action)'}\n   {obs}")
    return "\n".join(lines) or "(no steps)"


def parse_number(text: str, low: int, high: int) -> int | None:
    """The first whole number in ``text`` within [low, high]; None when there is none."""
    for m in re.finditer(r"\d+", text):
        value = int(m.group())
        if low <= value <= high:
            return value
    return None


class BestOfNEvaluator(GreedyEvaluator):
    """N sampled episodes per task; the oracle (reward: UPPER BOUND) or the base model as judge keeps one."""

    name = "best_of_n"
    params: BestOfNEvaluator.Params
    description = ("N sampled episodes per task, one kept by scorer oracle (env reward: UPPER BOUND) or judge "
                   "(base model, greedy); tokens of all N counted")

    @dataclass
    class Params:
        n: Annotated[int, Interval(ge=1, le=100)] = 5
        """Episodes sampled per task (AgentRM's Best-of-N: 5); at most 100 (each is a whole episode per task)."""
        scorer: Literal["oracle", "judge"] = "judge"
        """``judge``: the base model scores the samples (deployable); ``oracle``: the environment's reward
        (an UPPER BOUND, pass@N)."""
        temperature: Annotated[float, Ge(0.0)] = 1.0
        """Sampling temperature of the N episodes (SAND's sampling temperature)."""
        seed: int = 0
        """Combined with each task id into the task's sampling seed."""
        max_new_tokens: Annotated[int, Ge(1)] = 96
        """Token budget of each agent turn of the N episodes."""
        max_steps: Annotated[int, Interval(ge=1, le=MAX_EPISODE_STEPS)] | None = None
        """Override the environment's per-task step cap, at most 1000 (null: the benchmark's)."""
        judge_mode: Literal["score", "pick"] = "score"
        """``score``: one greedy call per sample, a 0-10 score, the best kept (ties: the earlier sample);
        ``pick``: one greedy call per task naming the best of all N."""
        judge_max_new_tokens: Annotated[int, Ge(1)] = 8
        """Token budget of each judge reply (a score, or the picked sample's number)."""
        max_observation_chars: Annotated[int, Interval(ge=20, le=100_000)] = 300
        """Each observation the judge reads is cut to this many characters."""
        rollout_mode: Annotated[Literal["lockstep", "async"], SCHEDULING] = "lockstep"
        """How each task's N episodes advance: ``lockstep`` or ``async`` (as the greedy evaluator's); same
        samples for the same seed."""
        max_concurrency: Annotated[int, Ge(1), SCHEDULING] = 32
        """``async`` only: episodes in flight at once."""

    def evaluate(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        p = self.params
        out = []
        for task_id in task_ids:
            sampling = SamplingParams(temperature=p.temperature, max_new_tokens=p.max_new_tokens,
                                      seed=task_seed(p.seed, task_id))
            samples = self.play([task_id] * p.n, env, policy, sampling)
            out.append(self.keep_one(samples, policy))
        return out

    def keep_one(self, samples: list[TaskResult], policy: Policy) -> TaskResult:
        """The kept sample, carrying the cost of all of them and what the scorer saw."""
        p = self.params
        judge_prompt = judge_completion = unparsed = 0
        scores: list[float | None] = []
        if p.scorer == "oracle":
            best = max(range(len(samples)), key=lambda i: (samples[i].trajectory.reward,
                                                           samples[i].trajectory.success, -i))
        else:
            scores, judge_prompt, judge_completion, unparsed = self.judge(samples, policy)
            best = max(range(len(samples)), key=lambda i: (scores[i] if scores[i] is not None else -1.0, -i))
        kept = samples[best]
        traj = kept.trajectory
        sample_prompt = sum(s.prompt_tokens for s in samples)
        sample_completion = sum(s.completion_tokens for s in samples)
        traj.meta["best_of_n"] = {
            "n": len(samples), "scorer": p.scorer, "upper_bound": p.scorer == "oracle", "kept": best,
            "rewards": [s.trajectory.reward for s in samples], "successes": [s.trajectory.success for s in samples],
            "scores": scores, "actions": [s.trajectory.actions for s in samples],
            "sample_prompt_tokens": sample_prompt, "sample_completion_tokens": sample_completion,
            "judge_prompt_tokens": judge_prompt, "judge_completion_tokens": judge_completion,
            "judge_unparsed": unparsed,
        }
        return TaskResult(traj, sample_prompt + judge_prompt, sample_completion + judge_completion)

    def judge(self, samples: list[TaskResult], policy: Policy) -> tuple[list[float | None], int, int, int]:
        """The base model's score of each sample (None: no usable number for it), its tokens, and how many of
        its replies held no usable number."""
        p = self.params
        first = samples[0].trajectory
        task = first.task
        greedy = SamplingParams(temperature=0.0, max_new_tokens=p.judge_max_new_tokens)
        texts = [attempt_text(s.trajectory, p.max_observation_chars) for s in samples]
        if p.judge_mode == "score":
            chats = [[{"role": "user", "content": SCORE_PROMPT.format(task=task, attempt=t)}] for t in texts]
        else:
            attempts = "\n\n".join(f"Attempt {i}:\n{t}" for i, t in enumerate(texts, 1))
            chats = [[{"role": "user", "content": PICK_PROMPT.format(n=len(samples), task=task,
                                                                     attempts=attempts)}]]
        outputs = policy.generate(chats, greedy, role="base")
        prompt_tokens = sum(o[0].prompt_tokens for o in outputs)
        completion_tokens = sum(o[0].completion_tokens for o in outputs)
        if p.judge_mode == "score":
            values = [parse_number(o[0].text, 0, 10) for o in outputs]
            scores: list[float | None] = [None if v is None else float(v) for v in values]
            return scores, prompt_tokens, completion_tokens, sum(v is None for v in values)
        choice = parse_number(outputs[0][0].text, 1, len(samples))
        if choice is None:
            return [None] * len(samples), prompt_tokens, completion_tokens, 1
        return [1.0 if i == choice - 1 else 0.0 for i in range(len(samples))], prompt_tokens, completion_tokens, 0

    def aggregate(self, results: list[TaskResult]) -> dict[str, Any]:
        """The greedy evaluator's metrics of the kept samples (tokens: all N and the judge), plus
        ``best_of_n``: the scorer, whether the numbers are an UPPER BOUND, and what the N samples did."""
        metrics = aggregate_results(results)
        if not results:
            return metrics
        info = [r.trajectory.meta.get("best_of_n", {}) for r in results]
        p = self.params
        per_sample = [x for i in info for x in i.get("successes", [])]
        metrics["scorer"] = p.scorer
        metrics["oracle"] = p.scorer == "oracle"
        metrics["best_of_n"] = {
            "n": p.n, "scorer": p.scorer, "judge_mode": p.judge_mode if p.scorer == "judge" else None,
            "upper_bound": p.scorer == "oracle", "note": ORACLE_NOTE if p.scorer == "oracle" else
            "judge: the base model scores what a deployed agent sees (no reward)",
            "sample_success_rate": round(100 * statistics.fmean(map(float, per_sample)), 2) if per_sample else 0.0,
            "pass_at_n": round(100 * statistics.fmean(float(any(i.get("successes", []))) for i in info), 2),
            "judge_unparsed": sum(i.get("judge_unparsed", 0) for i in info),
            "judge_tokens_per_task": round(statistics.fmean(
                i.get("judge_prompt_tokens", 0) + i.get("judge_completion_tokens", 0) for i in info), 1),
        }
        return metrics


@hookimpl
def sand_register_evaluators(register):
    register(BestOfNEvaluator)
