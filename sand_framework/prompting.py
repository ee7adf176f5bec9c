"""The ReAct turn format and the agent's chat view of a trajectory.

Kept in the core because the policy, samplers, executors, evaluators and the
data writers must all agree on it byte for byte: the agent is trained on the
chats produced here and sampled from the same chats.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from sand_framework.types import Chat, Trajectory

log = logging.getLogger(__name__)

MAX_ACTION_CHARS = 200
"""Longer "actions" are model babble, not commands; they count as invalid."""

_ACTION_RE = re.compile(r"action\s*:\s*(.*)", re.IGNORECASE)
_THOUGHT_RE = re.compile(r"thought\s*:[ \t]*(.*?)(?=\n\s*action\s*:|\Z)", re.IGNORECASE | re.DOTALL)


@dataclass
class ParsedTurn:
    thought: str
    action: str
    valid: bool


def format_turn(thought: str, action: str) -> str:
    """The agent's reply: ``Thought: ...`` then ``Action: ...``."""
    return f"Thought: {thought.strip()}\nAction: {action.strip()}"


def parse_turn(text: str) -> ParsedTurn:
    """Parse an agent reply. Never raises: anything unusable is an invalid action.

    The action is the first line after the last ``Action:``; a reply with no
    ``Action:``, an empty action, a multi-hundred-character action or
    non-printable junk yields ``valid=False`` and ``action=""``.
    """
    if not isinstance(text, str):
        return ParsedTurn("", "", False)
    text = text.replace("\x00", "")
    thought_m = _THOUGHT_RE.search(text)
    thought = thought_m.group(1).strip() if thought_m else ""
    matches = list(_ACTION_RE.finditer(text))
    if not matches:
        return ParsedTurn(thought or text.strip()[:500], "", False)
    action = matches[-1].group(1).split("\n", 1)[0].strip().strip("`").strip()
    if thought_m is None:  # no 'Thought:' marker: whatever precedes the action is the thought
        thought = text[: matches[-1].start()].strip()
    valid = bool(action) and len(action) <= MAX_ACTION_CHARS and action.isprintable()
    return ParsedTurn(thought, action if valid else "", valid)


def cut_at_stop(text: str, stops: list[str]) -> str:
    """``text`` up to the first of the stop strings (the backends' shared post-processing), stripped."""
    if not isinstance(text, str):
        return ""
    cut = len(text)
    for s in stops:
        if s:
            pos = text.find(s)
            if pos != -1:
                cut = min(cut, pos)
    return text[:cut].strip()


HEAD_TURNS = 3
"""Instruction, ``OK``, task: never dropped when a prompt is shortened."""


def fit_prompt(chat: Chat, render, limit: int, counts: dict[str, Any] | None = None) -> list[int]:
    """Token ids of ``chat`` (``render`` tokenizes a chat) shortened to ``limit`` tokens.

    The oldest (assistant, observation) pairs after the first three ETO turns go
    first, so the instruction and the task always stay; if that is not enough,
    tokens are cut from the left, which keeps the generation prompt intact.
    A shortened prompt is counted in ``counts`` when given (``prompts_shortened``,
    ``prompt_turns_dropped``, ``prompt_tokens_cut``; see :func:`report_shortened`).
    """
    ids = render(chat)
    if limit <= 0 or len(ids) <= limit:
        return ids
    full = len(ids)
    chat = list(chat)
    turns = 0
    while len(ids) > limit and len(chat) >= HEAD_TURNS + 3 and chat[HEAD_TURNS].get("role") == "assistant":
        del chat[HEAD_TURNS : HEAD_TURNS + 2]
        turns += 2
        ids = render(chat)
    out = ids[-limit:] if len(ids) > limit else ids
    if counts is not None:
        for key, add in (("prompts_shortened", 1), ("prompt_turns_dropped", turns),
                         ("prompt_tokens_cut", full - len(out))):
            counts[key] = counts.get(key, 0) + add
    return out


SHORTENED_KEYS = ("prompts_shortened", "prompt_turns_dropped", "prompt_tokens_cut")


def report_shortened(total: dict[str, Any], batch: dict[str, Any], who: str, limit: int) -> None:
    """Add one call's shortening counts to a policy's ``total`` stats; warn with the totals whenever the number of
    shortened prompts passes 1, 10, 100, ... (a run's log says how much context the agent lost, without flooding)."""
    if not batch.get("prompts_shortened"):
        return
    before = int(total.get("prompts_shortened", 0))
    for key in SHORTENED_KEYS:
        total[key] = total.get(key, 0) + batch.get(key, 0)
    after = int(total["prompts_shortened"])
    if len(str(after)) > len(str(before)) or before == 0:
        log.warning("%s: %d prompt(s) longer than %d tokens so far were shortened (%d turn(s) dropped, %d token(s) "
                    "cut in all): the agent is sampled on less context than its training shows. Raise the policy's "
                    "context (and trainer.max_length with it) or shorten the episodes.", who, after, limit,
                    total["prompt_turns_dropped"], total["prompt_tokens_cut"])


def format_observation(observation: str) -> str:
    return f"Observation: {observation.strip()}"


def trajectory_chat(traj: Trajectory, upto: int | None = None, with_thoughts: bool = True) -> Chat:
    """The agent's chat for ``traj`` (ETO layout), with steps ``[0, upto)``.

    Turn 0 is the environment instruction, turn 1 the assistant's ``OK``,
    turn 2 the task; then assistant turns alternate with observations. With
    ``upto`` < len(steps) the chat ends on the observation the agent must
    answer next, which is the sampling prompt for step ``upto``.
    """
    steps = traj.steps if upto is None else traj.steps[:upto]
    chat: Chat = [
        {"role": "user", "content": traj.instruction},
        {"role": "assistant", "content": "OK"},
        {"role": "user", "content": traj.task},
    ]
    for i, step in enumerate(steps):
        thought = step.thought if with_thoughts else ""
        chat.append({"role": "assistant", "content": format_turn(thought, step.action)})
        last = i == len(traj.steps) - 1
        if not last or upto is not None:
            chat.append({"role": "user", "content": format_observation(step.observation)})
    return chat
