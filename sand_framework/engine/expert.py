"""Expert trajectories: the environment's own expert and model-written thoughts.

Shared by the pipeline's ``expert`` stage and ``sand data expert`` so both
produce the same trajectories.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Callable

from sand_framework.components import Environment, Policy
from sand_framework.errors import NoExpertError
from sand_framework.types import SamplingParams, Step, Trajectory


def expert_trajectory(env: Environment, task_id: str) -> Trajectory:
    """Run ``env``'s expert on ``task_id``; each thought is :meth:`Environment.expert_thought` of the step.

    The thought is asked for before the action is executed, with the steps so
    far, so it cannot see the action's outcome. Environments without expert
    thoughts (the default) leave them empty.
    """
    task = env.reset(task_id)
    traj = Trajectory(task_id=task_id, env=env.name, instruction=env.instruction(), task=task)
    for action in _expert_actions(env, task_id):
        thought = env.expert_thought(task_id, task, list(traj.steps), action)
        res = env.step(action)
        traj.steps.append(Step(thought=thought, action=action, observation=res.observation))
        traj.reward, traj.success = res.reward, res.success
        if res.done:
            break
    return traj


def _expert_actions(env: Environment, task_id: str) -> Iterator[str]:
    """``env.expert_actions(task_id)``, lazily as the environment yields them; an environment without an expert
    (the base class raises ``NotImplementedError``) is the user's :class:`NoExpertError`, not a bug report."""
    try:
        yield from env.expert_actions(task_id)
    except NotImplementedError as exc:
        raise NoExpertError(
            f"environment {env.name!r} has no expert ({exc}), and this run asks it for expert trajectories "
            "(data.source: env, a method's explore_tasks, or `sand data expert`); give the expert data as a file "
            "instead: data.source=sharegpt data.path=FILE (`sand data import-eto` converts ETO's)") from exc


THOUGHT_PROMPT = """You are writing the reasoning of an agent that acts in a text environment.

{task}

Recent history:
{history}

Next action: {action}

In one or two short first-person sentences, explain why "{action}" is the right next step. \
Do not mention that the action was given to you.
Reasoning:"""


def _history(traj: Trajectory, i: int, k: int = 3) -> str:
    lines = [f"> {s.action}\n{s.observation}" for s in traj.steps[max(0, i - k):i]]
    return "\n".join(lines) if lines else "(none yet)"


def _clean_thought(text: str) -> str:
    text = " ".join(text.replace("\x00", "").split())
    text = re.split(r"\b(?:Action|Observation)\s*:", text, maxsplit=1)[0].strip()
    parts = re.split(r"(?<=[.!?])\s+", text)
    return " ".join(parts[:2]).strip()


def write_thoughts(trajs: list[Trajectory], policy: Policy, max_new_tokens: int = 60, seed: int | None = 0,
                   batch_size: int = 16, progress: Callable[[int], None] | None = None) -> None:
    """Fill every step's thought with a short "why this action" written by the base model (in place).

    One base-model call per step, greedy, batched across steps. A step the
    model leaves empty keeps an empty thought.
    """
    items = [(t, i) for t in trajs for i in range(len(t.steps))]
    sp = SamplingParams(n=1, temperature=0.0, max_new_tokens=max_new_tokens, seed=seed)
    for start in range(0, len(items), max(1, batch_size)):
        batch = items[start:start + batch_size]
        chats = [[{"role": "user", "content": THOUGHT_PROMPT.format(task=t.task, history=_history(t, i),
                                                                   action=t.steps[i].action)}]
                 for t, i in batch]
        outs = policy.generate(chats, sp, role="base")
        for (t, i), out in zip(batch, outs):
            t.steps[i].thought = _clean_thought(out[0].text) if out else ""
        if progress is not None:
            progress(len(batch))
