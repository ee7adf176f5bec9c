"""The per-task evaluation loop, shared by the pipeline's ``eval`` stage and ``sand eval``
(:mod:`sand_framework.app.model_eval`).

One unit per task in ``<dir>/eval/<model>/<split>.units.jsonl``: a task
recorded there is never evaluated again, so an interrupted evaluation resumes
where it stopped. Each unit holds the full trajectory (every step's thought,
action, observation and ``deliberated`` flag, the final reward and success)
and the task's prompt/completion token counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sand_framework.components import Environment, Evaluator, Policy, TaskResult
from sand_framework.engine.units import StageUnits
from sand_framework.metrics import task_results_from_units


def eval_unit(result: TaskResult) -> dict[str, Any]:
    """What one evaluated task records."""
    return {"trajectory": result.trajectory.to_dict(), "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens}


def evaluate_tasks(units: StageUnits, evaluator: Evaluator, env: Environment, policy: Callable[[], Policy],
                   batch_size: int, progress: Any = None, label: str = "eval") -> list[TaskResult]:
    """Evaluate the tasks ``units`` still lacks, in batches, and return every task's result in their order.

    ``policy`` is called only when some task is still to do, so a finished
    evaluation never loads a model. ``progress`` is an optional rich Progress.
    """
    todo = units.todo
    if todo:
        agent = policy()
        with units.progress(progress, label):
            for i in range(0, len(todo), max(1, batch_size)):
                for res in evaluator.evaluate(todo[i:i + batch_size], env, agent):
                    units.save(res.trajectory.task_id, eval_unit(res))
    return task_results_from_units(units.values())
