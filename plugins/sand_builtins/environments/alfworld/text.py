"""ALFWorld's text as ETO shows it, and the two spellings of the placing command.

The 2.1.1 game files (up to alfworld 0.3.x, and ETO's copies) place objects
with ``put X in/on Y``; the 2.1.2 files of alfworld >= 0.4 use ``move X to Y``.
An agent may write either (or ``put X in Y`` / ``put X on Y``); everything is
rewritten to what the loaded game's grammar expects.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

NOTHING_HAPPENS = "Nothing happens."
"""The engine's reply to an action that is not admissible."""

_ARRIVE_RE = re.compile(r"^You arrive at loc \d+\. ")
_PUT_RE = re.compile(r"^put (?P<o>.+?) (?:in/on|in|on|into|onto) (?P<r>.+)$")
_MOVE_RE = re.compile(r"^move (?P<o>.+?) to (?P<r>.+)$")


def task_text(feedback: str) -> str:
    """ETO's task text: TextWorld's welcome banner dropped, room description and ``Your task is to: ...``."""
    text = str(feedback).strip()
    if text.startswith("-="):
        parts = text.split("\n\n")
        text = "\n".join(p.strip() for p in parts[1:] if p.strip())
    return text


def process_observation(feedback: str) -> str:
    """ETO's ``process_ob``: drop "You arrive at loc N. " (2.1.1 games name locations by number)."""
    text = str(feedback).strip()
    return _ARRIVE_RE.sub("", text, count=1)


def _placing(command: str) -> re.Match | None:
    return _PUT_RE.match(command) or _MOVE_RE.match(command)


def to_syntax(action: str, syntax: str) -> str:
    """Rewrite a placing command to ``syntax`` (``put`` or ``move``); other actions only whitespace-collapsed."""
    a = " ".join(str(action).strip().split())
    m = _placing(a.lower().rstrip("."))
    if not m:
        return a
    return f"put {m['o']} in/on {m['r']}" if syntax == "put" else f"move {m['o']} to {m['r']}"


def command_table(commands: Iterable[str], normalize: Callable[[str], str]) -> dict[str, str]:
    """Every accepted spelling (normalized) -> the engine's admissible command it stands for."""
    table: dict[str, str] = {}
    for cmd in commands:
        cmd = str(cmd)
        table[normalize(cmd)] = cmd
        m = _placing(cmd.lower())
        if m:
            o, r = m["o"], m["r"]
            for alias in (f"put {o} in/on {r}", f"put {o} in {r}", f"put {o} on {r}", f"move {o} to {r}"):
                table.setdefault(normalize(alias), cmd)
    return table


def instruction(syntax: str, max_steps: int) -> str:
    """ETO's ALFWorld instruction, listing the placing command in the games' ``syntax``."""
    place = "put {obj} in/on {recep}" if syntax == "put" else "move {obj} to {recep}"
    actions = [
        "go to {recep}", "take {obj} from {recep}", place, "open {recep}", "close {recep}",
        "use {lamp}", "clean {obj} with {recep}", "heat {obj} with {recep}", "cool {obj} with {recep}",
        "examine {obj or recep}", "inventory", "look",
    ]
    listing = "\n".join(f"{i}. {a}" for i, a in enumerate(actions, 1))
    return (
        "Interact with a household to solve a task. Imagine you are an intelligent agent in a household "
        "environment and your target is to perform actions to complete the task goal. At the beginning of "
        "your interactions, you will be given a detailed description of the current environment and your "
        "goal to accomplish.\n"
        "For each of your turns, you will be given the observation of the last turn. You should first think "
        "about the current condition and plan for your future actions, and then output your action in this "
        "turn. Your output must strictly follow this format:\n"
        "Thought: your thoughts.\n"
        "Action: your next action\n\n"
        f"The available actions are:\n{listing}\n"
        "where {obj} and {recep} are objects and receptacles as the observations name them "
        "(e.g. apple 1, countertop 2).\n"
        'If the environment outputs "Nothing happens.", your previous action was invalid and you should '
        f"try something else. You have at most {max_steps} actions."
    )
