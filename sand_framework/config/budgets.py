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


def context_budgets(slots: dict[str, tuple[str, Any]], registries: Registries) -> dict[str, list[tuple[str, str, int]]]:
    """Per role (``train``, ``engine``, ``prompt``), the ``(slot, param, tokens)`` the components declare through
    :meth:`~sand_framework.components.Component.context_token_budget`, returning ``{role: (param, tokens)}``
    (0 tokens = no limit)."""
    out: dict[str, list[tuple[str, str, int]]] = {"train": [], "engine": [], "prompt": []}
    for kind, (name, params) in slots.items():
        for role, (param, tokens) in (registries[kind].get(name).context_token_budget(params) or {}).items():
            if role in out and tokens and int(tokens) > 0:
                out[role].append((kind, param, int(tokens)))
    return out


def check_context(slots: dict[str, tuple[str, Any]], registries: Registries) -> list[str]:
    """Problems where training, prompts and engines disagree on the context (one budget per recipe).

    The agent is trained on sequences of up to ``train`` tokens (the trainer keeps
    their start). At sampling and evaluation time its prompt is such a sequence's
    prefix, so the engine must hold ``train`` tokens, and a prompt limit must
    leave at least ``train - (what the agent writes per turn)`` tokens: shorter,
    every long episode's prompt loses turns the agent saw in training. Set the
    policy's context from the trainer's (``max_model_len: ${trainer.max_length}``)
    and leave the prompt limit at 0 (= the context minus the generation).
    """
    found = context_budgets(slots, registries)
    if not found["train"]:
        return []
    t_kind, t_param, train = max(found["train"], key=lambda b: b[2])
    writes = [b for kind, (name, params) in slots.items()
              if (b := registries[kind].get(name).agent_token_budget(params)) is not None]
    gen = max((tokens for _, tokens in writes), default=0)
    problems = []
    for kind, param, tokens in found["engine"]:
        if tokens < train:
            problems.append(
                f"{kind}.{param}={tokens} is shorter than the {t_kind}.{t_param}={train} tokens the agent is trained "
                f"on: prompts of long episodes would lose turns the agent saw in training. Fix: {kind}.{param}="
                f"{train} (e.g. {kind}.{param}=${{{t_kind}.{t_param}}}), or a shorter {t_kind}.{t_param}.")
    need = max(1, train - gen)
    for kind, param, tokens in found["prompt"]:
        if tokens < need:
            problems.append(
                f"{kind}.{param}={tokens} cuts agent prompts shorter than training shows them: {t_kind}.{t_param}="
                f"{train} tokens minus the {gen} the agent may write per turn = {need}. Fix: {kind}.{param}=0 (the "
                f"context left after the generation) or >= {need}.")
    return problems
