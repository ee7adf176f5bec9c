"""What a data-building stage cost, batch by batch, and the rates ``metrics.json`` reports from it.

A batch's cost is recorded on its first unit (so a resumed stage's totals stay right); the stage's rates and
its engine time per role are sums over its units (:func:`sand_framework.metrics.synthesis_rates`).
"""

from __future__ import annotations

from typing import Any

from sand_framework.metrics import rollout_rates, synthesis_rates

POLICY_COUNTS = ("calls", "prompt_tokens", "completion_tokens")
POLICY_TIMES = ("busy_seconds", "engine_busy_seconds", "engine_queue_seconds")
EXECUTOR_COUNTS = {"env_steps": "env_steps", "faults_survived": "env_faults_survived", "hangs": "env_hangs"}
EXECUTOR_LOOPS = ("agent_turns", "rollout_seconds")  # the executor's rollout loops (lock-step or asynchronous)


def is_batch_window(key: str) -> bool:
    """Whether a unit's ``stats[key]`` is :func:`batch_cost`'s: a measurement of the batch's window (its time,
    and with batches in flight also calls, tokens and steps of other batches), not something the method built."""
    return (key == "seconds" or key.removeprefix("backend_") in POLICY_COUNTS + POLICY_TIMES
            or key in EXECUTOR_COUNTS.values() or key in EXECUTOR_LOOPS or key.endswith("_engine_busy_seconds"))


def rollout_metrics(synthesis_units: dict[str, Any], eval_stats: dict[str, float] | None) -> dict[str, Any]:
    """``metrics.json``'s ``rollouts``: per synthesis stage (from its units' batch costs, so resumed stages count)
    and for this session's evaluation: agent turns/s, tokens/s, engine utilization (and, for a synthesis stage,
    per engine role)."""
    out = {stage: synthesis_rates(units) for stage, units in synthesis_units.items()}
    if eval_stats and eval_stats.get("rollout_seconds"):
        out["eval"] = rollout_rates(eval_stats["rollout_seconds"], eval_stats["agent_turns"],
                                    eval_stats["completion_tokens"], eval_stats.get("engine_busy_seconds"),
                                    eval_stats.get("prompt_tokens", 0))
    return out


def batch_cost(before: tuple[dict[str, Any], ...], after: tuple[dict[str, Any], ...],
               seconds: float) -> dict[str, Any]:
    """What one synthesis batch cost: wall seconds, backend calls and tokens, environment steps (replays
    included), environment worker faults survived and, where the snapshots carry a third member
    (:meth:`~sand_framework.rollout.metered.MeteredPolicy.busy_seconds` beside the policy's and the executor's
    ``stats``), each engine role's busy seconds. Recorded on the batch's first unit, so the stage's
    totals stay right across resumes."""
    pol0, ex0, *roles0 = before
    pol1, ex1, *roles1 = after
    cost: dict[str, Any] = {"seconds": round(seconds, 2)}
    for key in POLICY_COUNTS:
        cost[f"backend_{key}"] = pol1.get(key, 0) - pol0.get(key, 0)
    for key in POLICY_TIMES:
        if key in pol1:
            cost[f"backend_{key}"] = round(pol1.get(key, 0) - pol0.get(key, 0), 3)
    for key, name in EXECUTOR_COUNTS.items():
        cost[name] = ex1.get(key, 0) - ex0.get(key, 0)
    for key in EXECUTOR_LOOPS:
        if key in ex1:
            cost[key] = round(ex1.get(key, 0) - ex0.get(key, 0), 3)
    if roles0 and roles1:
        for key, value in roles1[0].items():
            cost[key] = round(value - roles0[0].get(key, 0.0), 3)
    return cost
