"""Evaluation metrics, defined once and shared by the evaluator, ``sand eval`` and ``sand report``.

Every function takes plain :class:`~sand_framework.components.TaskResult` lists
(one greedy episode per task, as recorded in ``eval/<model>/<split>.units.jsonl``)
so a metric means the same thing wherever it is shown.

Definitions (see ``docs/reports.md`` for the prose version):

* **average reward** — mean final episode reward over the tasks, x100
  (ALFWorld: success 0/1; ScienceWorld: score/100; WebShop: buy reward).
* **success rate** — percentage of tasks whose episode ended in success.
* **deliberation rate per step** — deliberated steps / all steps, pooled over
  the tasks (long episodes weigh more). A step counts as deliberated when its
  ``deliberated`` flag is set; the greedy evaluator sets it with
  :func:`sand_framework.deliberation.is_deliberation` (the thought names at
  least two distinct quoted actions).
* **deliberation rate per trajectory** — for each task, deliberated steps /
  its steps (0 for an episode without steps); the mean of that over tasks.
  The per-task values are what the violin plot shows.
* **tokens per task** — mean completion (generated) tokens per task: the cost
  deliberation adds. ``total_tokens_per_task`` adds the prompt tokens.
* **token ratio vs SFT** — a model's tokens per task divided by the SFT
  agent's on the same split (1.0 = as many tokens as SFT).
* **difficulty bands** — from a reference model's reward per task (the base
  model when it was evaluated, else the SFT agent): the percentile rank of a
  task's reward ``(#lower + 0.5 * #equal) / n`` (ties share it, so equal
  rewards always land in the same band and the result does not depend on
  task order); rank < 1/3 is ``hard``, < 2/3 ``medium``, else ``easy``.
  With continuous rewards and no ties these are exact terciles. With few
  distinct rewards (0/1 success) some bands can be empty; when every task has
  the same reward all are ``medium``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any, Hashable

from sand_framework.components import TaskResult
from sand_framework.types import Trajectory

BANDS: tuple[str, ...] = ("hard", "medium", "easy")
"""Difficulty bands, hardest first."""


# -- per trajectory -------------------------------------------------------------

def trajectory_deliberation_rate(traj: Trajectory) -> float:
    """Deliberated steps / steps of one episode (0.0 for an episode without steps)."""
    return sum(bool(s.deliberated) for s in traj.steps) / len(traj.steps) if traj.steps else 0.0


def total_tokens(result: TaskResult) -> int:
    return result.prompt_tokens + result.completion_tokens


# -- over a split -----------------------------------------------------------------

def average_reward(results: list[TaskResult]) -> float:
    """Mean final reward x100."""
    return 100 * statistics.fmean(r.trajectory.reward for r in results) if results else 0.0


def success_rate(results: list[TaskResult]) -> float:
    """Percentage of successful episodes."""
    return 100 * statistics.fmean(float(r.trajectory.success) for r in results) if results else 0.0


def step_deliberation_rate(results: list[TaskResult]) -> float:
    """Deliberated steps / all steps, pooled over the episodes."""
    steps = [s for r in results for s in r.trajectory.steps]
    return sum(bool(s.deliberated) for s in steps) / len(steps) if steps else 0.0


def trajectory_deliberation_rates(results: list[TaskResult]) -> list[float]:
    return [trajectory_deliberation_rate(r.trajectory) for r in results]


def mean_trajectory_deliberation_rate(results: list[TaskResult]) -> float:
    """Mean over tasks of each episode's deliberation rate."""
    rates = trajectory_deliberation_rates(results)
    return statistics.fmean(rates) if rates else 0.0


def tokens_per_task(results: list[TaskResult], which: str = "completion") -> float:
    """Mean tokens per task: ``completion`` (generated), ``prompt`` or ``total``."""
    if not results:
        return 0.0
    get = {"completion": lambda r: r.completion_tokens, "prompt": lambda r: r.prompt_tokens,
           "total": total_tokens}[which]
    return statistics.fmean(get(r) for r in results)


def token_ratio(tokens: float | None, sft_tokens: float | None) -> float | None:
    """``tokens / sft_tokens``; None when either is missing or the SFT count is 0."""
    if tokens is None or not sft_tokens:
        return None
    return tokens / sft_tokens


def aggregate_results(results: list[TaskResult]) -> dict[str, Any]:
    """The split-level numbers of ``metrics.json``: reward x100, success, deliberation rates, tokens."""
    n = len(results)
    if n == 0:
        return {"tasks": 0}
    return {
        "tasks": n,
        "avg_reward": round(average_reward(results), 2),
        "success_rate": round(success_rate(results), 2),
        "avg_steps": round(statistics.fmean(len(r.trajectory.steps) for r in results), 2),
        "deliberation_rate_step": round(step_deliberation_rate(results), 4),
        "deliberation_rate_traj": round(mean_trajectory_deliberation_rate(results), 4),
        "invalid_actions_per_task": round(
            statistics.fmean(r.trajectory.meta.get("invalid_actions", 0) for r in results), 2),
        "prompt_tokens_per_task": round(tokens_per_task(results, "prompt"), 1),
        "completion_tokens_per_task": round(tokens_per_task(results, "completion"), 1),
        "total_tokens_per_task": round(tokens_per_task(results, "total"), 1),
    }


# -- difficulty bands ---------------------------------------------------------------

def percentile_ranks(rewards: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """Mid-rank percentile of each task's reward: ``(#strictly lower + 0.5 * #equal) / n``."""
    values = list(rewards.values())
    n = len(values)
    return {k: (sum(v < r for v in values) + 0.5 * sum(v == r for v in values)) / n for k, r in rewards.items()}


def band_of_rank(rank: float) -> str:
    return "hard" if rank < 1 / 3 else "medium" if rank < 2 / 3 else "easy"


def difficulty_bands(reference_rewards: Mapping[Hashable, float]) -> dict[Hashable, str]:
    """Task -> ``hard``/``medium``/``easy`` from the reference (base) model's reward per task."""
    return {k: band_of_rank(r) for k, r in percentile_ranks(reference_rewards).items()}


def by_band(results: Iterable[tuple[Hashable, TaskResult]], bands: Mapping[Hashable, str]
            ) -> dict[str, list[TaskResult]]:
    """Group ``(key, result)`` pairs by the band of their key (keys without a band are dropped)."""
    out: dict[str, list[TaskResult]] = {b: [] for b in BANDS}
    for key, res in results:
        if key in bands:
            out[bands[key]].append(res)
    return out


# -- per step position ----------------------------------------------------------------

def step_profile(results: list[TaskResult]) -> list[dict[str, Any]]:
    """Per step position t = 1..max: how episodes of that length scored and how often step t deliberated.

    For each t: ``reached`` (episodes with at least t steps), ``deliberation_rate``
    (deliberated step-t's / reached), ``ended`` (episodes of exactly t steps) and
    ``avg_reward`` (mean reward x100 of those, None when none ended there).
    """
    longest = max((len(r.trajectory.steps) for r in results), default=0)
    rows = []
    for t in range(1, longest + 1):
        reached = [r for r in results if len(r.trajectory.steps) >= t]
        ended = [r for r in results if len(r.trajectory.steps) == t]
        rows.append({
            "step": t,
            "reached": len(reached),
            "deliberation_rate": sum(bool(r.trajectory.steps[t - 1].deliberated) for r in reached) / len(reached),
            "ended": len(ended),
            "avg_reward": average_reward(ended) if ended else None,
        })
    return rows


def task_results_from_units(units: Iterable[dict[str, Any]]) -> list[TaskResult]:
    """TaskResults from eval unit-log records (``{"trajectory", "prompt_tokens", "completion_tokens"}``)."""
    return [TaskResult(Trajectory.from_dict(u["trajectory"]), u.get("prompt_tokens", 0), u.get("completion_tokens", 0))
            for u in units]


def rollout_rates(seconds: float, agent_turns: float, completion_tokens: float, engine_busy_seconds: float | None,
                  prompt_tokens: float = 0) -> dict[str, Any]:
    """A stage's rollout throughput for ``metrics.json``: agent turns and generated tokens per second of the stage's
    compute (``seconds``) and the engine's utilization (its busy seconds / ``seconds``; None when the backend does
    not report them)."""
    out: dict[str, Any] = {"seconds": round(seconds, 2), "agent_turns": int(agent_turns),
                           "completion_tokens": int(completion_tokens), "prompt_tokens": int(prompt_tokens),
                           "agent_turns_per_s": round(agent_turns / seconds, 3) if seconds > 0 else None,
                           "tokens_per_s": round(completion_tokens / seconds, 1) if seconds > 0 else None}
    out["engine_utilization"] = (round(min(1.0, engine_busy_seconds / seconds), 3)
                                 if engine_busy_seconds is not None and seconds > 0 else None)
    return out


def _stats_totals(units: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """The numeric ``stats`` (batch costs) of a stage's units, summed."""
    total: dict[str, float] = {}
    for unit in units:
        for key, value in (unit.get("stats") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return total


ROLE_BUSY_SUFFIX = "_engine_busy_seconds"
"""Batch-cost keys ``<role>_engine_busy_seconds`` (:class:`sand_framework.rollout.metered.MeteredPolicy`)."""


def engine_time(units: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A data-building stage's engine time per role: ``{"wall_seconds": s, "agent": {"busy_seconds": s,
    "utilization": u}, "base": {...}}``, where a role's utilization is the seconds it had at least one request
    outstanding over the stage's wall seconds (the sum of its batch windows, so resumed stages count). Roles
    appear as their batches recorded them (none for units written before they were measured)."""
    total = _stats_totals(units)
    wall = total.get("seconds", 0.0)
    out: dict[str, Any] = {"wall_seconds": round(wall, 2)}
    for key in sorted(total):
        if key.endswith(ROLE_BUSY_SUFFIX) and not key.startswith("backend_"):
            busy = total[key]
            out[key[: -len(ROLE_BUSY_SUFFIX)]] = {
                "busy_seconds": round(busy, 2), "utilization": round(min(1.0, busy / wall), 3) if wall > 0 else None}
    return out


def synthesis_rates(units: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`rollout_rates` of a synthesis stage from its units' recorded batch costs (``stats``), with
    ``engine_utilization_by_role`` (:func:`engine_time`'s utilizations) where the batches measured it."""
    units = list(units)
    total = _stats_totals(units)
    busy = total.get("backend_engine_busy_seconds", total.get("backend_busy_seconds"))
    out = rollout_rates(total.get("seconds", 0.0), total.get("agent_turns", 0),
                        total.get("backend_completion_tokens", 0), busy, total.get("backend_prompt_tokens", 0))
    roles = {role: v["utilization"] for role, v in engine_time(units).items() if isinstance(v, dict)}
    if roles:
        out["engine_utilization_by_role"] = roles
    return out
