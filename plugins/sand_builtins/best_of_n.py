"""Best-of-N at inference: N sampled episodes per task, one kept by a scorer (AgentRM-BoN, the paper's Table 4).

A search-at-inference baseline for SAND's comparison: the agent is not trained further, it is *sampled* N times
per task and one trajectory is kept. What keeps it is the ``scorer``:

* ``oracle`` — the environment's final reward of each sample (ties: success, then the earlier sample). A
  deployed agent never sees the reward, so this is an **UPPER BOUND** on any Best-of-N with a learnt scorer
  (it is pass@N); its metrics say so (``best_of_n.upper_bound``).
* ``judge`` — the frozen base model (``role="base"``, greedy) reads each sample's actions and observations and
  scores it from 0 to 10 (``judge_mode: score``, one prompt per sample), or reads all N and names the best
  (``judge_mode: pick``, one prompt per task). It sees what a deployed agent sees, never the reward. AgentRM
  trains a reward model for this; the base model is the scorer this framework has without training one.

Cost (the paper's Table 3): a task's ``prompt_tokens`` and ``completion_tokens`` are the sum over all N
episodes plus the judge's calls, since a deployment pays for all of them; the breakdown is in the kept
trajectory's ``meta["best_of_n"]``.

Batching: :meth:`BestOfNEvaluator.evaluate` plays the N episodes of as many of its tasks together as
``max_concurrency`` holds (groups of ``max(1, max_concurrency // n)`` tasks of the engine's evaluation batch),
advanced in lock-step (one batched model call per depth for all of them) or, with ``rollout_mode: async``, each
on its own; each episode holds one of the evaluator's warm environments while it runs, so ``max_concurrency``
also bounds how many it keeps (a JVM each for TextWorld-Express and ScienceWorld): ``max(max_concurrency, n)``.
The judge's prompts of a group then go in one ``generate`` call, and the results are split back per task.

Determinism: episode ``j`` of task ``t`` samples with its own seed, ``derive_seed(task_seed(seed, t), "episode",
j)`` (:func:`episode_seeds`; each turn ``turn_seed`` of it, sent as that chat's ``SamplingParams.seeds`` entry),
whichever tasks share the call, and the judge is greedy. With a policy that honours per-chat seeds a task's
samples, kept episode and scores are therefore those it gets evaluated alone, whatever ``eval.batch_size``,
``rollout_mode`` or ``max_concurrency`` are, and a resumed evaluation matches an uninterrupted one (up to the
floating-point noise of a bigger batch, which can in rare cases flip a sampled token or a greedy judge's reply,
as for the greedy evaluator's ``eval.batch_size``). The built-in backends do: ``transformers`` (a generator per
row), ``vllm`` (a seed per request) and ``openai`` (each chat's seed sent with its request: a vLLM server honours
it, up to what requests sharing its batch do to each other's numerics without batch invariance; a server that
ignores ``seed`` repeats nothing, whatever the grouping). A policy that seeds only per call
(``SamplingParams.seed``) makes a task's samples depend on which tasks share its evaluation batch.
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
from sand_framework.rollout import derive_seed
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


def episode_seeds(seed: int, task_id: str, n: int) -> list[int]:
    """The sampling seeds of one task's N episodes: episode ``j``'s is ``derive_seed(task_seed(seed, task_id),
    "episode", j)`` (what :meth:`GreedyEvaluator.play` gives the task's episodes played alone with the task's seed),
    whichever tasks share the call."""
    base = task_seed(seed, task_id)
    return [derive_seed(base, "episode", j) for j in range(n)]


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
        """``score``: one greedy judge prompt per sample, a 0-10 score, the best kept (ties: the earlier sample);
        ``pick``: one greedy prompt per task naming the best of all N (a group's prompts: one call)."""
        judge_max_new_tokens: Annotated[int, Ge(1)] = 8
        """Token budget of each judge reply (a score, or the picked sample's number)."""
        max_observation_chars: Annotated[int, Interval(ge=20, le=100_000)] = 300
        """Each observation the judge reads is cut to this many characters."""
        rollout_mode: Annotated[Literal["lockstep", "async"], SCHEDULING] = "lockstep"
        """How a group's episodes (its tasks' N each, played together) advance: ``lockstep`` or ``async`` (as the
        greedy evaluator's); same samples for the same seed."""
        max_concurrency: Annotated[int, Ge(1), SCHEDULING] = 32
        """Episodes played together, in either mode, and so warm environments kept (at least ``n``: one task's):
        an evaluation batch's tasks go in groups of ``max(1, max_concurrency // n)``."""

    def evaluate(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        """The tasks' N episodes in groups of ``max(1, max_concurrency // n)`` tasks, each group in one
        :meth:`play` and one judge ``generate``; each task's samples keep their own seeds (:func:`episode_seeds`),
        so its result is the one it gets evaluated alone wherever the policy honours per-chat seeds."""
        per_group = max(1, self.params.max_concurrency // self.params.n)
        out: list[TaskResult] = []
        for k in range(0, len(task_ids), per_group):
            out += self._evaluate_group(task_ids[k:k + per_group], env, policy)
        return out

    def _evaluate_group(self, task_ids: list[str], env: Environment, policy: Policy) -> list[TaskResult]:
        p = self.params
        seeds = [s for task_id in task_ids for s in episode_seeds(p.seed, task_id, p.n)]
        # Sampled turns use the episodes' seeds; the call's seed only reaches greedy turns (temperature 0), which
        # real backends do not seed: the first task's, as when each task was played alone.
        sampling = SamplingParams(temperature=p.temperature, max_new_tokens=p.max_new_tokens,
                                  seed=task_seed(p.seed, task_ids[0]))
        played = self.play([task_id for task_id in task_ids for _ in range(p.n)], env, policy, sampling,
                           seeds=seeds)
        groups = [played[k * p.n:(k + 1) * p.n] for k in range(len(task_ids))]
        judged = self.judge_all(groups, policy) if p.scorer == "judge" else [None] * len(groups)
        return [self.keep_one(samples, judgement) for samples, judgement in zip(groups, judged)]

    def keep_one(self, samples: list[TaskResult],
                 judged: tuple[list[float | None], int, int, int] | None = None) -> TaskResult:
        """The kept sample, carrying the cost of all of them and what the scorer saw (``judged``: the judge's
        :meth:`judge_all` entry for these samples; None with the oracle)."""
        p = self.params
        judge_prompt = judge_completion = unparsed = 0
        scores: list[float | None] = []
        if p.scorer == "oracle":
            best = max(range(len(samples)), key=lambda i: (samples[i].trajectory.reward,
                                                           samples[i].trajectory.success, -i))
        else:
            if judged is None:
                raise ValueError("best_of_n: the judge scorer needs the judge's scores of the samples")
            if not isinstance(judged, tuple):
                raise TypeError("BestOfNEvaluator.keep_one(samples, judged): `judged` is the judge's result for "
                                "these samples (an entry of judge_all(groups, policy)), no longer the policy")
            scores, judge_prompt, judge_completion, unparsed = judged
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

    def judge_all(self, groups: list[list[TaskResult]], policy: Policy
                  ) -> list[tuple[list[float | None], int, int, int]]:
        """Per task (a group of its samples): the base model's score of each sample (None: no usable number for
        it), the judge's prompt and completion tokens, and how many of its replies held no usable number. One
        greedy ``generate`` for every task's chats (``score``: N per task; ``pick``: one per task)."""
        p = self.params
        chats = [self.judge_chats(samples) for samples in groups]
        greedy = SamplingParams(temperature=0.0, max_new_tokens=p.judge_max_new_tokens)
        outputs = policy.generate([c for task_chats in chats for c in task_chats], greedy, role="base")
        out, at = [], 0
        for samples, task_chats in zip(groups, chats):
            out.append(self.judge_scores(samples, outputs[at:at + len(task_chats)]))
            at += len(task_chats)
        return out

    def judge(self, samples: list[TaskResult], policy: Policy) -> tuple[list[float | None], int, int, int]:
        """:meth:`judge_all` for one task's samples (one ``generate`` call)."""
        return self.judge_all([samples], policy)[0]

    def judge_chats(self, samples: list[TaskResult]) -> list[list[dict[str, str]]]:
        """The judge's chats for one task's samples: one per sample (``score``) or one for all (``pick``)."""
        p = self.params
        task = samples[0].trajectory.task
        texts = [attempt_text(s.trajectory, p.max_observation_chars) for s in samples]
        if p.judge_mode == "score":
            return [[{"role": "user", "content": SCORE_PROMPT.format(task=task, attempt=t)}] for t in texts]
        attempts = "\n\n".join(f"Attempt {i}:\n{t}" for i, t in enumerate(texts, 1))
        return [[{"role": "user", "content": PICK_PROMPT.format(n=len(samples), task=task, attempts=attempts)}]]

    def judge_scores(self, samples: list[TaskResult], outputs: list[list[Any]]
                     ) -> tuple[list[float | None], int, int, int]:
        """One task's scores, judge tokens and unparsed replies from the judge's ``outputs`` for its chats."""
        p = self.params
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
