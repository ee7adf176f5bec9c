"""Preference pairs as files: TRL's conversational preference format, in and out.

A pair file is JSON lines, one ``{"prompt": [...], "chosen": [...], "rejected": [...]}`` per pair, each a
list of chat messages (TRL's "conversational preference" format), so it loads in TRL as it is. The prompt
is the agent's chat up to the first continued turn, in the layout the agent is sampled with
(:func:`sand_framework.prompting.trajectory_chat`); each side alternates assistant turns and observations
and ends on its last assistant turn (ETO's rule: a pair's sides both end on a model turn).
"""

from __future__ import annotations

import json
import os
from sand_framework.prompting import format_observation, format_turn, trajectory_chat
from sand_framework.store.files import atomic_write_text
from sand_framework.types import Chat, PreferencePair, Step


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


def write_preference_pairs(path: str | os.PathLike, pairs: list[PreferencePair]) -> None:
    """Write ``pairs`` as TRL conversational preference JSON lines (atomically: a reader never sees half)."""
    atomic_write_text(path, "".join(json.dumps(pair_messages(p), ensure_ascii=False) + "\n" for p in pairs))

