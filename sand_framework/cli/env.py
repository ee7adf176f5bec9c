"""``sand env ...``: inspect and verify environments.

``sand env check ENV [--split S] [--limit K] [--recipe R] [key=value ...]``
replays the environment's expert on every task of a split (or the first K)
and prints one JSON object::

    {"env": ..., "split": ..., "params": {...}, "tasks": N, "reached_goal": M,
     "no_expert": ..., "failures": [first few], "seconds": ...}

It works for any registered environment: it only uses ``tasks``,
``expert_actions``, ``reset``, ``step`` and ``max_steps``. An expert that is
longer than the step cap fails (the engine would cut it too); pass
``max_steps=...`` as an override to check the data beyond the cap.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from sand_framework.cli.common import PLUGINS_DIR, build_environment, friendly, params_dict
from sand_framework.errors import RecipeError, SandError

MAX_FAILURES_SHOWN = 10


@click.group(name="env")
def command() -> None:
    """Inspect and verify environments (expert replays, splits)."""


def _build_env(env_name: str, recipe: str | None, overrides: list[str], plugin_dirs: list[str]):
    """The environment component from ``--recipe``'s node (if given) with ``key=value`` overrides."""
    if recipe:
        from sand_framework.app.runner import resolve

        r, _, registries = resolve(recipe, [f"environment.{o}" for o in overrides], plugin_dirs)
        name, params = r.slots["environment"]
        if name != env_name:
            raise RecipeError([f"recipe {recipe!r} uses environment {name!r}, not {env_name!r}"])
        return registries.build("environment", name, params)

    from sand_framework.config.load import parse_overrides
    from sand_framework.plugins import load_plugins

    return build_environment(load_plugins(dirs=plugin_dirs).registries(), env_name, parse_overrides(overrides))


def check_expert(env: Any, task_id: str) -> str | None:
    """Replay the expert on one task; ``None`` when it reaches the goal, else what went wrong."""
    try:
        actions = env.expert_actions(task_id)
    except NotImplementedError:
        raise
    except SandError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported per task
        return f"expert_actions raised {type(exc).__name__}: {exc}"[:300]
    cap = env.max_steps(task_id)
    env.reset(task_id)
    for i, action in enumerate(actions):
        res = env.step(action)
        if not res.valid:
            return f"step {i} {action!r} was rejected: {res.observation[:120]!r}"
        if res.done and i < len(actions) - 1:
            why = f" (step cap max_steps={cap})" if i + 1 >= cap else ""
            return f"episode ended at step {i + 1} of {len(actions)} expert actions{why}"
    if not actions:
        return "empty expert"
    if not res.success:
        return f"goal not reached after {len(actions)} actions (reward={res.reward})"
    return None


@command.command()
@click.argument("env_name", metavar="ENV")
@click.argument("overrides", nargs=-1)
@click.option("--split", default="seen", show_default=True, help="Split whose tasks are checked.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Check only the first K tasks of the split.")
@click.option("--recipe", default=None, help="Take the environment's parameters from this recipe.")
@PLUGINS_DIR
@friendly
def check(env_name, overrides, split, limit, recipe, plugin_dirs):
    """Replay ENV's expert on each task of a split and report how many reach the goal.

    OVERRIDES are key=value parameters of the environment, e.g. max_steps=150.
    """
    env = _build_env(env_name, recipe, list(overrides), list(plugin_dirs))
    start = time.perf_counter()
    failures: list[str] = []
    reached = no_expert = 0
    no_expert_reason = ""
    try:
        try:
            tasks = env.tasks(split)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--split") from exc
        if limit is not None:
            tasks = tasks[: max(0, limit)]
        for task_id in tasks:
            try:
                problem = check_expert(env, task_id)
            except NotImplementedError as exc:
                env.reset(task_id)  # no expert to replay, but the environment itself must work
                no_expert += 1
                no_expert_reason = str(exc)
                continue
            except SandError:
                raise
            except Exception as exc:  # noqa: BLE001 - the environment crashed on its own expert
                problem = f"{type(exc).__name__}: {exc}"[:300]
            if problem is None:
                reached += 1
            else:
                failures.append(f"{task_id}: {problem}")
    finally:
        env.close()
    report = {
        "env": env_name,
        "split": split,
        "params": params_dict(env.params),
        "tasks": len(tasks),
        "reached_goal": reached,
        "no_expert": no_expert,
        **({"no_expert_reason": no_expert_reason} if no_expert else {}),
        "failed": len(failures),
        "failures": failures[:MAX_FAILURES_SHOWN],
        "seconds": round(time.perf_counter() - start, 1),
    }
    click.echo(json.dumps(report, indent=2))
    if failures:
        sys.exit(1)
