"""Short ReAct thoughts for TextWorld-Express gold actions, written from what the agent has seen.

The paper's expert data is ReAct: every action comes with a short reason.
TWX's gold paths have none, and an agent fine-tuned on empty thoughts learns
to write none, which SAND then asks it to replace by long deliberations. These
thoughts close that gap with one templated sentence per gold action.

Grounding rule: a thought may use only the task text, the observations so far
and the action itself (plus, for ``twc``, the commonsense of where household
objects belong, which is what that game tests). In particular the coin's room
is never named before the coin is in view: the shortened coin gold path walks
straight to it, but its thoughts only say "no coin here, explore there".
Every word a template adds on its own is in :data:`TEMPLATE_WORDS`, so tests
can check that nothing else leaks in.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Sequence

from sand_framework.types import Step

_ROOM = re.compile(r"You are in the ([^.\n]+?)\.")
_EXIT = re.compile(r"to the (north|south|east|west) you see (?:the |a |an )?([^.\n]+?)\.", re.I)
_REVEAL = re.compile(r"You open the [^,\n]+?, revealing the ([^.\n]+?)\.")
_TAKEN = re.compile(r"^You take the (.+?)\.$")
_PUT = re.compile(r"^You put the (.+?) (?:in|on) the (.+?)\.$")
_SIMON = re.compile(r"Simon says,? '([^']+)'")

TEMPLATE_WORDS = frozenset("""
a again am and anything are around away back belong belongs can carrying check close closed coin do done
door eat everything exactly explore first for go goes going has have head here i i'll i'm in inside is it left let
longer look lying me meal need needs next no not now of open out pick place prepare put quantity read ready recipe
room says see should simon smallest so still take task tell that the them there things this to try up usually wants
what which
""".split())
"""Every word the templates below add themselves (lower case); the rest comes from the task, the
observations so far or the action."""


@dataclass
class View:
    """What the agent knows before its next action, rebuilt from the task text and the steps so far."""

    room: str = ""
    """The room the agent is in ("" when no observation named one)."""
    here: str = ""
    """The latest description of that room."""
    exits: dict[str, str] = field(default_factory=dict)
    """Direction -> what was seen that way from the current room (a room name or a closed door)."""
    visited: set[str] = field(default_factory=set)
    rooms: dict[str, str] = field(default_factory=dict)
    """Room -> its latest description."""
    inventory: list[str] = field(default_factory=list)
    """Objects taken and not put anywhere yet."""
    last: str = ""
    """The latest observation."""
    seen: str = ""
    """Everything seen so far, joined."""


def _observation_part(task: str) -> str:
    return task.split("Observation:", 1)[1] if "Observation:" in task else task


def _strip_valid(text: str) -> str:
    """Drop the ``Valid actions:`` line (``show_valid_actions``): it lists commands, not what is in view."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("Valid actions:"))


def _look(view: View, obs: str) -> None:
    m = _ROOM.search(obs)
    if m is None:
        return
    view.room, view.here = m.group(1), obs
    view.visited.add(view.room)
    view.rooms[view.room] = obs
    view.exits = {d.lower(): what for d, what in _EXIT.findall(obs)}


def build_view(task: str, history: Sequence[Step]) -> View:
    """Replay the known text: rooms entered, exits seen, objects taken and put."""
    view = View()
    first = _strip_valid(_observation_part(task))
    _look(view, first)
    view.last, seen = first, [task]
    for step in history:
        obs = _strip_valid(step.observation)
        seen.append(obs)
        view.last = obs
        _look(view, obs)
        line = obs.strip()
        if (m := _TAKEN.match(line)) and m.group(1) not in view.inventory:
            view.inventory.append(m.group(1))
        elif (m := _PUT.match(line)) and m.group(1) in view.inventory:
            view.inventory.remove(m.group(1))
        elif m := _REVEAL.search(obs):
            direction = step.action.rsplit(" ", 1)[-1].lower()
            view.exits[direction] = m.group(1)
    view.seen = "\n".join(seen)
    return view


# --------------------------------------------------------------------- twc commonsense


@functools.lru_cache(maxsize=1)
def _twc_places() -> dict[str, list[str]]:
    """TWX's own commonsense table for twc: object name -> the containers/supporters it usually goes in.

    It ships inside the ``textworld_express`` wheel; without it the thoughts
    fall back to phrasings that need no table.
    """
    try:
        text = resources.files("textworld_express").joinpath("twc_objects.folds.json").read_text(encoding="utf-8")
    except (ImportError, FileNotFoundError, OSError):
        return {}
    table: dict[str, list[str]] = {}
    for fold in json.loads(text).values():
        for name, entry in fold.items():
            table[name.lower()] = [str(loc) for loc in entry.get("locations", [])]
    return table


def _squash(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def _belongs(obj: str, place: str) -> bool:
    return _squash(place) in {_squash(p) for p in _twc_places().get(obj.lower(), [])}


def _place_in(obj: str, description: str) -> str | None:
    """A usual place of ``obj`` that ``description`` (a room seen before) mentions."""
    for place in _twc_places().get(obj.lower(), []):
        if re.search(rf"\b{re.escape(place)}\b", description, re.I):
            return place
    return None


# ------------------------------------------------------------------------- thoughts


def _first_person_move(view: View, direction: str, purpose: str) -> str:
    target = view.exits.get(direction, "")
    if not target or "door" in target:
        return f"{purpose}, so I'll try going {direction}."
    if target in view.visited:
        return f"{purpose}, so I'll head back {direction} to the {target}."
    return f"{purpose}, so I'll explore the {target} to the {direction}."


def _coin(view: View, action: str) -> str:
    here = f"the {view.room}" if view.room else "this room"
    if action == "take coin":
        return f"I can see the coin here in {here}, so I'll take it."
    if action.startswith("move "):
        direction = action.split()[1]
        return _first_person_move(view, direction, f"There is no coin in {here}")
    if action.startswith("open door to "):
        direction = action.split()[-1]
        return f"There is no coin in {here}, and the door to the {direction} is closed, so I'll open it."
    return ""


def _plural(obj: str) -> bool:
    """Grammatical number for "the socks are" / "the shirt is" (names only, no table needed)."""
    last = obj.split()[-1].lower() if obj.split() else ""
    return last.endswith("s") and not last.endswith("ss")


def _twc(view: View, action: str) -> str:
    here = f"the {view.room}" if view.room else "this room"
    if m := re.fullmatch(r"take (.+)", action):
        obj = m.group(1)
        verb, it = ("are", "them") if _plural(obj) else ("is", "it")
        return f"The {obj} {verb} lying out of place in {here}, so I'll pick {it} up to put {it} away."
    if m := re.fullmatch(r"put (.+?) in (.+)", action):
        obj = m.group(1)
        verb, it = ("go", "them") if _plural(obj) else ("goes", "it")
        return f"The {obj} usually {verb} in the {m.group(2)}, so I'll put {it} there."
    if m := re.fullmatch(r"open (.+)", action):
        place = m.group(1)
        owners = [o for o in view.inventory if _belongs(o, place)]
        if owners:
            verb = "belong" if _plural(owners[0]) else "belongs"
            return f"The {owners[0]} {verb} in the {place}, which is closed, so I'll open it first."
        return f"I'll open the {place} so I can put things away in it."
    if action.startswith("move "):
        direction = action.split()[1]
        target = view.exits.get(direction, "")
        for obj in view.inventory:
            place = _place_in(obj, view.rooms.get(target, "")) if target in view.visited else None
            if place:
                verb = "belong" if _plural(obj) else "belongs"
                return f"The {obj} {verb} in the {place} in the {target}, so I'll head back {direction}."
        if view.inventory:
            return _first_person_move(view, direction, f"I still need a place for the {view.inventory[0]}")
        return _first_person_move(view, direction, "I'm not carrying anything to put away")
    return ""


def _simonsays(view: View, action: str) -> str:
    m = _SIMON.search(view.last)
    return f"Simon says {m.group(1)}, so I'll do exactly that." if m else ""


def _sorting(view: View, action: str) -> str:
    if m := re.fullmatch(r"take (.+)", action):
        return f"Of what is left, the {m.group(1)} has the smallest quantity, so I'll take it next."
    return ""


def _cooking(view: View, action: str) -> str:
    if action == "prepare meal":
        return "I have everything the recipe needs, so I'll prepare the meal."
    if action == "eat meal":
        return "The meal is ready, so I'll eat it."
    m = re.fullmatch(r"(slice|dice|chop|cook) (.+?)(?: (?:in|with) (.+))?", action)
    if m and "Directions:" in view.seen:
        return f"The recipe says to {m.group(1)} the {m.group(2)}, so I'll do that now."
    return ""


def _generic(view: View, action: str) -> str:
    """Games without their own templates: the action's verb and objects, nothing else."""
    here = f"the {view.room}" if view.room else "here"
    if action.startswith("move "):
        direction = action.split()[1]
        return _first_person_move(view, direction, f"I have done what I need in {here}")
    if action.startswith("open door to "):
        return f"The door to the {action.split()[-1]} is closed, so I'll open it."
    if m := re.fullmatch(r"read (.+)", action):
        return f"The {m.group(1)} should tell me what to do, so I'll read it."
    if m := re.fullmatch(r"take (.+)", action):
        return f"I need the {m.group(1)} for the task, so I'll take {'them' if _plural(m.group(1)) else 'it'}."
    if m := re.fullmatch(r"put (.+?) in (.+)", action):
        it = "them" if _plural(m.group(1)) else "it"
        return f"The task needs the {m.group(1)} in the {m.group(2)}, so I'll put {it} there."
    if m := re.fullmatch(r"open (.+)", action):
        return f"I'll open the {m.group(1)} to see what is inside."
    if m := re.fullmatch(r"close (.+)", action):
        return f"I no longer need the {m.group(1)} open, so I'll close it."
    if action == "look around":
        return "Let me look around to see what is here."
    if action == "inventory":
        return "Let me check what I am carrying."
    if action == "task":
        return "Let me read the task again to see what it wants."
    return ""


_GAMES = {"coin": _coin, "twc": _twc, "simonsays": _simonsays, "sorting": _sorting, "cookingworld": _cooking}


def expert_thought(game: str, task: str, history: Sequence[Step], action: str) -> str:
    """One short first-person sentence justifying ``action`` from the task and the steps so far."""
    view = build_view(task, history)
    action = " ".join(action.split())
    special = _GAMES.get(game)
    return (special(view, action) if special else "") or _generic(view, action)
