"""Preference pairs as files: TRL's conversational preference format in and out, and ETO's pair files in.

A pair file is JSON lines, one ``{"prompt": [...], "chosen": [...], "rejected": [...]}`` per pair, each a
list of chat messages (TRL's "conversational preference" format), so it loads in TRL as it is. The prompt
is the agent's chat up to the first continued turn, in the layout the agent is sampled with
(:func:`sand_framework.prompting.trajectory_chat`); each side alternates assistant turns and observations
and ends on its last assistant turn (ETO's rule: a pair's sides both end on a model turn). Each line also
carries ``id`` (the task id) and ``chosen_reward``/``rejected_reward``, which TRL ignores.

:func:`read_preference_pairs` reads such files back into :class:`~sand_framework.types.PreferencePair`,
and also

* TRL's implicit-prompt preference lines (``chosen``/``rejected`` only, each the whole chat: the prompt is
  their common first messages), and
* ETO's pair files, as ``construct_preference.py`` writes them: one JSON list of
  ``{"id", "prompt", "chosen", "rejected"}`` whose turns are ShareGPT ``{"from": "human"|"gpt", "value"}``
  (prompt = instruction, ``OK``, task; chosen/rejected start and end on a ``gpt`` turn),

so a user can train on pairs made elsewhere (``sand data import-pairs``, the ``pairs_file`` method). A
malformed file raises :class:`~sand_framework.formats.FormatError` (exit 2) naming the file and record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sand_framework.formats import FormatError, _turns, from_conversation, loads, non_finite, record_id
from sand_framework.prompting import format_observation, format_turn, parse_turn, trajectory_chat
from sand_framework.store.files import atomic_write_text
from sand_framework.types import Chat, PreferencePair, Step, Trajectory

PairFormat = Literal["auto", "trl", "eto"]
"""How a pair file is laid out: TRL JSON lines, ETO's JSON list, or ``auto`` (a file opening with ``[`` is ETO's)."""

SIDES = ("chosen", "rejected")


def side_messages(steps: list[Step]) -> Chat:
    """One side of a pair as messages: assistant turns with the observations between them, ending on the
    last assistant turn (its observation is not part of what is trained)."""
    chat: Chat = []
    for i, step in enumerate(steps):
        chat.append({"role": "assistant", "content": format_turn(step.thought, step.action)})
        if i < len(steps) - 1:
            chat.append({"role": "user", "content": format_observation(step.observation)})
    return chat


def pair_messages(pair: PreferencePair) -> dict[str, Chat]:
    """A pair in TRL's conversational preference format."""
    return {"prompt": trajectory_chat(pair.prompt, upto=len(pair.prompt.steps)),
            "chosen": side_messages(pair.chosen), "rejected": side_messages(pair.rejected)}


def pair_record(pair: PreferencePair) -> dict[str, Any]:
    """A pair file's line: TRL's three message lists plus the task id and both rewards."""
    return {"id": pair.prompt.task_id, **pair_messages(pair), "chosen_reward": pair.chosen_reward,
            "rejected_reward": pair.rejected_reward}


def write_preference_pairs(path: str | os.PathLike, pairs: list[PreferencePair]) -> None:
    """Write ``pairs`` as TRL conversational preference JSON lines (atomically: a reader never sees half)."""
    atomic_write_text(path, "".join(json.dumps(pair_record(p), ensure_ascii=False) + "\n" for p in pairs))


# --------------------------------------------------------------------------- reading


@dataclass
class PairFile:
    """What :func:`read_preference_pairs` found in a file."""

    pairs: list[PreferencePair]
    format: str
    """``trl`` or ``eto``."""
    notes: list[str] = field(default_factory=list)
    """What was kept but changed: turns without a usable action, text the SAND layout renders differently."""


def _side(turns: Chat, side: str, where: str) -> tuple[list[Step], int]:
    """A side's turns (assistant first and last, alternating with observations) as steps; and how many of its
    assistant turns have no usable ``Action:`` (kept, with the text as the thought)."""
    if not turns:
        raise FormatError(f"{where}: {side} is empty; a side needs at least one assistant turn")
    roles = [t["role"] for t in turns]
    if roles[0] != "assistant" or roles[-1] != "assistant":
        raise FormatError(f"{where}: {side} must start and end on an assistant (gpt) turn, got "
                          f"{roles[0]} ... {roles[-1]} (ETO drops such pairs)")
    for i, role in enumerate(roles):
        if role != ("assistant" if i % 2 == 0 else "user"):
            raise FormatError(f"{where}: {side} turn {i} is {role!r}; the turns must alternate assistant, user "
                              "(observation), assistant ...")
    steps, unusable = [], 0
    for i in range(0, len(turns), 2):
        parsed = parse_turn(turns[i]["content"])
        unusable += int(not parsed.valid)
        obs = turns[i + 1]["content"] if i + 1 < len(turns) else ""
        obs = obs[len("Observation:"):].strip() if obs.startswith("Observation:") else obs
        steps.append(Step(thought=parsed.thought, action=parsed.action, observation=obs))
    return steps, unusable


def _common_prefix(a: Chat, b: Chat) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _pair(raw_id: str, prompt: Chat, chosen: Chat, rejected: Chat, env: str, where: str,
          rewards: tuple[float, float], fmt: str) -> tuple[PreferencePair, list[str]]:
    if prompt and prompt[0]["role"] == "system":
        raise FormatError(f"{where}: the prompt opens with a system message; SAND's chat layout has none (the "
                          "environment instruction is the first user turn): merge it into that turn")
    if not prompt or prompt[-1]["role"] != "user":
        raise FormatError(f"{where}: the prompt must end on a user turn (the task or the observation the agent "
                          f"answers next), got {prompt[-1]['role'] if prompt else 'an empty prompt'!r}")
    traj = from_conversation(raw_id, prompt, env, where)  # an expert prefix (IPR's step pairs) becomes its steps
    notes = []
    sides = {}
    for side, turns in (("chosen", chosen), ("rejected", rejected)):
        steps, unusable = _side(turns, side, where)
        sides[side] = steps
        if unusable:
            notes.append(f"{where}: {unusable} {side} turn(s) without a usable 'Action:' line, kept with the text "
                         "as the thought and an empty action")
    pair = PreferencePair(traj, sides["chosen"], sides["rejected"], chosen_reward=rewards[0],
                          rejected_reward=rewards[1], meta={"source": fmt, "id": raw_id})
    again = pair_messages(pair)
    for name, turns in (("prompt", prompt), ("chosen", chosen), ("rejected", rejected)):
        if [m["content"].strip() for m in again[name]] != [m["content"].strip() for m in turns]:
            notes.append(f"{where}: the {name} renders differently in SAND's layout (it writes 'OK' as turn 1, "
                         "'Thought: ...\\nAction: ...' replies and 'Observation: ...' turns); trained as rendered")
            break
    return pair, notes


def _number(item: dict[str, Any], key: str, default: float, where: str) -> float:
    value = item.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FormatError(f"{where}: {key} must be a number, got {value!r}"[:300])
    return float(value)


def _record(item: Any, index: int, env: str, where: str, fmt: str) -> tuple[PreferencePair, list[str]]:
    if not isinstance(item, dict):
        raise FormatError(f"{where}: a pair must be a JSON object, got {type(item).__name__}")
    if non_finite(item):
        raise FormatError(f"{where}: contains NaN or Infinity, which is not JSON; fix or remove the pair")
    key_from, key_val = ("from", "value") if fmt == "eto" else ("role", "content")
    missing = [k for k in SIDES if k not in item]
    if missing:
        raise FormatError(f"{where}: no {' or '.join(repr(k) for k in missing)}; a pair needs 'prompt', 'chosen' "
                          "and 'rejected' message lists")
    chosen = _turns(item["chosen"], key_from, key_val, f"{where} chosen")
    rejected = _turns(item["rejected"], key_from, key_val, f"{where} rejected")
    if "prompt" in item:
        prompt = _turns(item["prompt"], key_from, key_val, f"{where} prompt")
    elif fmt == "trl":  # implicit prompt: the sides are whole chats sharing their first messages
        n = _common_prefix(chosen, rejected)
        while n and chosen[n - 1]["role"] != "user":
            n -= 1
        prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
    else:
        raise FormatError(f"{where}: no 'prompt'; ETO pair records hold 'id', 'prompt', 'chosen', 'rejected'")
    rewards = (_number(item, "chosen_reward", 1.0, where), _number(item, "rejected_reward", 0.0, where))
    pair, notes = _pair(record_id(item.get("id"), str(index), where), prompt, chosen, rejected, env, where, rewards,
                        fmt)
    pair.meta["id_given"] = item.get("id") is not None
    return pair, notes


def read_preference_pairs(path: str | os.PathLike, env: str, format: PairFormat = "auto",
                          map_eto_id: Callable[[str, Trajectory], str] | None = None) -> PairFile:
    """The pairs of a TRL (JSON lines) or ETO (JSON list) pair file; :class:`FormatError` when it is unreadable,
    malformed or holds no pair.

    Each pair's ``prompt.task_id`` is the record's ``id``; ``meta`` holds
    ``source`` (the format), ``id`` and ``id_given`` (False: the record had
    none and its position stands in). In an ETO file,
    ``map_eto_id(eto_id, prompt_trajectory)`` turns each id into the
    environment's task id (``Environment.task_id_from_eto``); a
    ``ValueError`` from it is a :class:`FormatError` naming the record. TRL
    files written by SAND hold task ids already.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FormatError(f"{path}: not a readable pair file ({str(exc)[:200]})") from None
    fmt = format if format != "auto" else ("eto" if text.lstrip().startswith("[") else "trl")
    records: list[tuple[Any, str]] = []
    if fmt == "eto":
        try:
            data = loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise FormatError(f"{path}: not a JSON pair list ({str(exc)[:200]})") from None
        if not isinstance(data, list):
            raise FormatError(f"{path}: expected a JSON list of pairs (ETO's construct_preference.py output), got "
                              f"{type(data).__name__}")
        records = [(item, f"{path}[{i}]") for i, item in enumerate(data)]
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append((loads(line), f"{path}:{lineno}"))
            except (json.JSONDecodeError, RecursionError) as exc:
                raise FormatError(f"{path}:{lineno}: not a JSON object ({str(exc)[:200]})") from None
    if not records:
        raise FormatError(f"{path}: holds no preference pairs")
    pairs, notes = [], []
    for i, (item, where) in enumerate(records):
        pair, found = _record(item, i, env, where, fmt)
        if map_eto_id is not None and fmt == "eto" and pair.meta["id_given"]:
            try:
                pair.prompt.task_id = map_eto_id(pair.prompt.task_id, pair.prompt)
            except ValueError as exc:
                raise FormatError(f"{where} (id {pair.prompt.task_id!r}): {exc}") from None
        pairs.append(pair)
        notes += found
    return PairFile(pairs, fmt, notes)
