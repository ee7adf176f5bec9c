"""Generation budgets that fit the behaviour the agent is trained on.

A SAND agent is fine-tuned on deliberation thoughts of up to N tokens. If the
sampler, the rollout executor or the evaluator then lets it write fewer than
N tokens plus its ``Action:`` line, an agent that learned to deliberate is cut
off before it acts: its samples stop parsing and its evaluation counts them as
invalid actions. That silently changes the experiment, so ``sand validate``
refuses it. Components declare their budgets themselves
(:meth:`~sand_framework.components.base.Component.agent_token_budget`,
:meth:`~sand_framework.components.base.Component.thought_token_budget`), so a
third-party sampler or synthesizer takes part without changes here.
"""

from __future__ import annotations

from typing import Any

from sand_framework.registry import Registries

ACTION_TOKENS = 32
"""Room for ``\\nAction: <command>`` after the thought (commands are a few words; 32 tokens covers every
benchmark's longest, e.g. ALFWorld's ``put apple 1 in/on countertop 2``, with any tokenizer measured)."""


def check_budgets(slots: dict[str, tuple[str, Any]], registries: Registries, iterations: int) -> list[str]:
    """Problems for every agent-generation budget shorter than the longest trained thought plus an action."""
    if iterations < 1:
        return []  # no deliberation is trained: the SFT agent writes expert-length thoughts only
    writers = []
    for kind, (name, params) in slots.items():
        budget = registries[kind].get(name).thought_token_budget(params)
        if budget is not None:
            writers.append((kind, name, *budget))
    if not writers:
        return []
    w_kind, w_name, w_param, longest = max(writers, key=lambda w: w[3])
    need = longest + ACTION_TOKENS
    problems = []
    for kind, (name, params) in slots.items():
        budget = registries[kind].get(name).agent_token_budget(params)
        if budget is None or budget[1] >= need:
            continue
        param, tokens = budget
        problems.append(
            f"{kind}.{param}={tokens} is shorter than what the agent is trained to write: {w_kind} {w_name!r} "
            f"writes thoughts of up to {w_kind}.{w_param}={longest} tokens, plus ~{ACTION_TOKENS} for the action "
            f"line = {need}. A deliberating agent would be cut off before acting. Fix: {kind}.{param}={need} "
            f"or more (or a shorter {w_kind}.{w_param}).")
    return problems
